"""The tables of the memory-family pages this runner's files feed: the paper's table
(``docs/results/memory-paper-table.md``) and lesson reading
(``docs/results/lesson-reading.md``)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from benchmarks.tables import interval, p_value, result, table
from comprl_gym.evaluation.table import markdown as method_table_markdown


def memory_paper_table() -> str:
    """The paper's table on the memory family (``comprl-gym table``'s own Markdown)."""
    return method_table_markdown(result("extractor_memory_table.json")).rstrip("\n")


def complementary_per_seed_table() -> str:
    """Each method's deployed arm minus static experience's, per seed (the table's ``per_seed``)."""
    rows = []
    for row in result("extractor_memory_table.json")["rows"]:
        static = row["versus"].get("static experience")
        if static is None:
            continue
        last = row["last_visit"]
        cells = [
            f"{interval(c[last]['difference'], True)}, {p_value(c[last]['mcnemar_p'])}"
            for _, c in sorted(static["per_seed"].items())
        ]
        rows.append([row["method"], *cells])
    head = ["method", *(f"seed {s}" for s in sorted(static["per_seed"]))]
    return table(head, rows)


#: The stem runs whose held-out lessons are counted by side, seeds 0, 1, 2 of each method.
STEM_RUNS = {"static experience": "stem_static", "Complementary RL": "stem_complementary"}


def stem_sides_table() -> str:
    """Which side the stem extractor's held-out lessons name, per seed (its ``own`` store)."""
    rows = []
    for method, stem in STEM_RUNS.items():
        for seed, suffix in enumerate(("", "_seed1", "_seed2")):
            texts = result(f"extractor_memory_{stem}{suffix}.json")["store_texts"]["own"]
            sides = [re.search(r"the (east|west) branch", t) for t in texts]
            counts = {
                side: sum(1 for m in sides if m and m.group(1) == side) for side in ("east", "west")
            }
            rows.append(
                [method, str(seed), str(len(texts)), str(counts["east"]), str(counts["west"])]
            )
    return table(["method", "seed", "held-out lessons", "name east", "name west"], rows)


#: The three runs on the 256-dungeon ``test_large`` pool, in the order the page discusses them.
LARGE_RUNS = ("reader_coin_large", "reader_coin_large_seed1", "mismatched_large")


def streaming_large_table() -> str:
    """Paired differences of the 256-dungeon streaming runs (``run.py``'s earlier version)."""

    def diff(cell: dict[str, Any] | None, with_p: bool = False) -> str:
        if cell is None:
            return "(not run)"
        text = interval(cell["difference"], signed=True)
        return f"{text}, {p_value(cell['mcnemar_p'])}" if with_p else text

    rows = []
    for run in LARGE_RUNS:
        data = result(f"experience_transfer_streaming_{run}.json")
        summary, placebo = data["summary"], data["minus_placebo"]

        def minus_none(arm: str, summary=summary) -> str:
            return diff(summary[arm]["minus_none"]["all"] if arm in summary else None)

        rows.append(
            [
                f"`{run}` ({data['held_out_pool']}, {len(data['held_out_dungeons'])} dungeons)",
                minus_none("oracle"),
                minus_none("inverted"),
                minus_none("placebo"),
                diff(summary["none"]["minus_visit_1"]["3"]),
                diff(summary["exemplar"]["minus_visit_1"]["3"]),
                diff(summary["exemplar"]["minus_none"]["3"]),
                diff(placebo["exemplar"]["2"], with_p=True),
                diff(placebo["exemplar"]["3"], with_p=True),
            ]
        )
    head = [
        "run (pool)",
        "oracle minus none",
        "inverted minus none",
        "placebo minus none",
        "none, visit 3 minus visit 1",
        "exemplar, visit 3 minus visit 1",
        "exemplar minus none, visit 3",
        "exemplar minus placebo, visit 2",
        "exemplar minus placebo, visit 3",
    ]
    return table(head, rows)


def exemplar_history_table() -> str:
    """Where the exemplar memory's visit-3 gain comes from (``reader_coin_large``): the dungeons
    its arm won on an earlier visit (it shows them their own winning moves) and the ones it
    never won (it shows them a neighbour's record), each arm's visit-3 wins on those dungeons.
    """
    rows = []
    for run in LARGE_RUNS[:2]:
        episodes = result(f"experience_transfer_streaming_{run}.json")["episodes"]
        won = {(e["arm"], e["task_index"], e["visit"]): bool(e["won"]) for e in episodes}
        tasks = sorted({e["task_index"] for e in episodes})
        arms = [a for a in ("exemplar", "none", "placebo", "oracle") if (a, tasks[0], 3) in won]
        earlier = [t for t in tasks if won[("exemplar", t, 1)] or won[("exemplar", t, 2)]]
        groups = {
            "won at visit 1 or 2": earlier,
            "never won before": sorted(set(tasks) - set(earlier)),
        }
        for label, group in groups.items():
            cells = []
            for arm in ("exemplar", "none", "placebo", "oracle"):
                wins = sum(won[(arm, t, 3)] for t in group) if arm in arms else None
                cells.append("(not run)" if wins is None else f"{wins} ({wins / len(group):.2f})")
            rows.append([f"`{run}`", f"{label} by the exemplar arm", str(len(group)), *cells])
    head = ["run", "dungeons", "count", "exemplar", "none", "placebo", "oracle"]
    return table(head, rows)


#: Table name (the page's ``<!-- generated: NAME -->``) -> its renderer.
TABLES: dict[str, Callable[[], str]] = {
    "memory-paper-table": memory_paper_table,
    "complementary-per-seed": complementary_per_seed_table,
    "stem-sides": stem_sides_table,
    "streaming-large": streaming_large_table,
    "exemplar-history": exemplar_history_table,
}
