"""Regenerate the tables the README and the docs pages print from files (``make readme``).

A page marks a generated part with a pair of comments naming its table::

    <!-- generated: demo -->
    ...the table, rewritten by this script...
    <!-- end generated: demo -->

and this script rewrites every marked part of ``README.md`` and ``docs/**/*.md`` from its source:
the env id table from :mod:`comprl_gym.registration`, every results table from its committed
file under ``benchmarks/results/``. So a number in those tables is the file's number, and a
changed file shows up as a stale page: ``python scripts/update_docs.py --check`` (run by
``tests/test_docs.py``) exits non-zero naming the pages and tables to regenerate. A marker
naming no known table, or an unclosed one, is an error.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from comprl_gym.evaluation.stream import paired_cell
from comprl_gym.evaluation.table import markdown as method_table_markdown
from comprl_gym.registration import markdown_table
from comprl_gym.utils import atomic_write_text

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"

MARKED = re.compile(
    r"(<!-- generated: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- end generated: (?P=name) -->)",
    re.S,
)
OPENING = re.compile(r"<!-- generated: ([\w-]+) -->")


@cache
def result(name: str) -> dict[str, Any]:
    """A committed result file, read once."""
    return json.loads((RESULTS / name).read_text(encoding="utf-8"))


def interval(cell: dict[str, Any], signed: bool = False) -> str:
    """``0.48 [0.41, 0.55]`` (``+0.11 [+0.03, +0.19]`` when signed) from a stats interval."""
    fmt = "{:+.2f}" if signed else "{:.2f}"
    return f"{fmt.format(cell['mean'])} [{fmt.format(cell['low'])}, {fmt.format(cell['high'])}]"


def p_value(p: float) -> str:
    """McNemar's p as the pages print it: three decimals, or ``p < 0.001``."""
    return "p < 0.001" if p < 0.001 else f"p {p:.3f}"


def _rate(cell: dict[str, Any]) -> str:
    """``0.17 [0.10, 0.28]`` from a bench file's ``success`` / ``ci_low`` / ``ci_high``."""
    return f"{cell['success']:.2f} [{cell['ci_low']:.2f}, {cell['ci_high']:.2f}]"


def _table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


#: How a stream's ``shown_verdicts`` group an arm's later visits, in the order printed.
AFTER, SHOWN_VERDICTS = ("after_won", "after_lost"), ("right", "wrong", "no_side")
#: ``make demo``'s two streams (``demo.json``), in the order its tables show them.
DEMO_STREAMS = {"before": "before training", "after": "after training"}


def demo_table() -> str:
    """``make demo``'s success by visit per arm, before and after training, from ``demo.json``
    (``benchmarks/bench_demo.py``); each cell as its streams printed it."""
    demo = result("demo.json")
    arms = demo["after"]["stream"]["arms"]  # in the stream's order (the file's keys are sorted)
    visits = [v for v in demo["after"]["streaming"][arms[0]]["visits"] if v != "all"]
    head = ["arm"] + [f"{label}: visit {v}" for label in DEMO_STREAMS.values() for v in visits]
    rows = [
        [arm]
        + [
            interval(demo[name]["streaming"][arm]["visits"][v]["success"])
            for name in DEMO_STREAMS
            for v in visits
        ]
        for arm in arms
    ]
    return _table(head, rows)


def _visit_order(label: str) -> float:
    """Visits in order, ``all`` last."""
    return float("inf") if label == "all" else int(label)


def demo_versus_table() -> str:
    """``make demo``'s treatments minus their placebos at the last visit, before and after
    training (``demo.json``), each cell as its stream printed it."""
    demo = result("demo.json")
    last = [v for v in next(iter(demo["after"]["versus"].values())) if v != "all"][-1]
    head = [f"visit {last}, paired"] + list(DEMO_STREAMS.values())
    rows = [
        [name] + [paired_cell(demo[stream]["versus"][name][last]) for stream in DEMO_STREAMS]
        for name in demo["after"]["versus"]
    ]
    return _table(head, rows)


def demo_shown_table() -> str:
    """What each arm of ``make demo``'s streams showed at visit 2, by how visit 1 ended."""
    demo = result("demo.json")
    rows = [
        [label, arm, *(str(row[after][v]) for after in AFTER for v in SHOWN_VERDICTS)]
        for name, label in DEMO_STREAMS.items()
        for arm in demo[name]["stream"]["arms"]
        if (row := demo[name]["shown_verdicts"].get(arm))
    ]
    head = [
        "stream",
        "arm",
        "after a win: right",
        "wrong",
        "no side",
        "after a loss: right",
        "wrong",
        "no side",
    ]
    return _table(head, rows)


def demo_after_minus_before_table() -> str:
    """Per arm, ``make demo``'s trained run minus its starting point (``demo.json``)."""
    demo = result("demo.json")
    labels = sorted(next(iter(demo["after_minus_before"].values())), key=_visit_order)
    rows = [
        [arm] + [paired_cell(demo["after_minus_before"][arm][v]) for v in labels]
        for arm in demo["after"]["stream"]["arms"]
    ]
    head = ["arm"] + [f"visit {v}" if v != "all" else "all visits" for v in labels]
    return _table(head, rows)


#: The readers of ``landmark_rule.json`` (``bench_landmark_rule.py``), as the page names them.
LANDMARK_READERS = {"memory_reader": "fork reader", "landmark_reader": "rule reader"}


def landmark_rule_table() -> str:
    """Per reader and arm: success and the first move to the landmark's side at visit 1
    (``landmark_rule.json``), each a rate with its Wilson interval."""
    study = result("landmark_rule.json")
    rows = []
    for reader, label in LANDMARK_READERS.items():
        r = study["readers"][reader]
        for arm in study["arms"]:
            rate, counts = r["first_moves"]["landmark_side"][arm], r["first_moves"]["counts"][arm]
            rows.append(
                [
                    label,
                    arm,
                    interval(r["streaming"][arm]["visits"]["1"]["success"]),
                    interval(rate),
                    f"{counts['landmark_side']} / {counts['other_side']} / {counts['other']}",
                    f"{r['first_moves']['won_after_landmark_side'][arm]} of "
                    f"{counts['landmark_side']}",
                ]
            )
    head = [
        "reader",
        "arm",
        "success",
        "first move to the landmark's side",
        "first moves: landmark / other side / elsewhere",
        "won after a first move to the landmark's side",
    ]
    return _table(head, rows)


def landmark_rule_versus_table() -> str:
    """Per reader: each treatment minus its control at visit 1, on success and on the first
    move (``landmark_rule.json``), paired episode by episode."""
    study = result("landmark_rule.json")
    rows = [
        [
            label,
            name,
            paired_cell(study["readers"][reader]["versus"][name]["1"]),
            paired_cell(study["readers"][reader]["first_moves"]["versus"][name]),
        ]
        for reader, label in LANDMARK_READERS.items()
        for name in study["comparisons"]
    ]
    head = ["reader", "visit 1, paired", "success", "first move to the landmark's side"]
    return _table(head, rows)


#: The extractor-learning study's lesson writers, in the order its tables print them.
LEARNING_WRITERS = {
    "trained": "trained",
    "frozen": "frozen",
    "outcome_aware": "scripted outcome-aware rule",
}


def _overridden(overrides: list[str]) -> str:
    """A run's config overrides as a label's tail: ``, extractor.lr=5e-4``, or nothing."""
    return "".join(f", {o}" for o in overrides)


def _learning_runs() -> dict[str, dict[str, Any]]:
    """The extractor-learning study's probed runs: each seed, each try with a probe, then the
    perfect-credit diagnostics."""
    study = result("extractor_learning.json")
    runs = {f"seed {seed}": data for seed, data in study["seeds"].items()}
    runs.update(
        {
            f"seed {seed}, to iteration {d['iterations']}": d
            for seed, d in study.get("continued", {}).items()
        }
    )
    runs.update({name.replace("_", " "): t for name, t in study["tries"].items() if "trained" in t})
    runs.update(
        {
            f"perfect credit, {d['steps']} updates{_overridden(d['overrides'])} (diagnostic)": d
            for d in study["perfect_credit"].values()
        }
    )
    return runs


def extractor_learning_table() -> str:
    """Per run: each writer's P(right | won) and P(right | lost) on the probe episodes, and
    the trained extractor minus the frozen one, paired (``extractor_learning.json``)."""
    rows = []
    for run, data in _learning_runs().items():
        for key, label in LEARNING_WRITERS.items():
            w = data[key]
            c = w["counts"]
            versus = data["trained_minus_frozen"] if key == "trained" else None
            rows.append(
                [
                    run,
                    label,
                    f"{interval(w['right_after_won'])} ({c['right_won']}/{c['won']})",
                    f"{interval(w['right_after_lost'])} ({c['right_lost']}/{c['lost']})",
                    paired_cell(versus["after_won"]) if versus else "",
                    paired_cell(versus["after_lost"]) if versus else "",
                    ("yes" if data["meets_the_bar"] else "no") if versus else "",
                ]
            )
    head = [
        "run",
        "lesson writer",
        "right after a win",
        "right after a loss",
        "trained minus frozen, after a win",
        "trained minus frozen, after a loss",
        "meets the bar",
    ]
    return _table(head, rows)


def extractor_learning_sides_table() -> str:
    """Per run: the side each extractor named on the probe, per (walked side, outcome) cell
    (``extractor_learning.json``), as east / west."""
    runs = _learning_runs()
    cells = sorted({cell for d in runs.values() for cell in d["trained"]["sides_named"]})
    rows = []
    for run, data in runs.items():
        for key in ("frozen", "trained", "outcome_aware"):
            named = data[key]["sides_named"]
            rows.append(
                [run, LEARNING_WRITERS[key]]
                + [f"{named[c]['east']} / {named[c]['west']}" if c in named else "" for c in cells]
            )
    return _table(["run", "lesson writer", *cells], rows)


def corridor_table() -> str:
    """The corridor run's table (``configs/corridor.yaml``), from ``corridor.json``
    (``benchmarks/bench_corridor.py``)."""
    rows = []
    for env_id, env in result("corridor.json")["envs"].items():
        with_minus_before = {
            "mean": env["difference"],
            "low": env["difference_ci_low"],
            "high": env["difference_ci_high"],
        }
        rows.append(
            [
                env_id,
                _rate(env["before_training"]),
                _rate(env["after_without_experience"]),
                _rate(env["after_with_experience"]),
                interval(with_minus_before, signed=True),
                interval(env["with_minus_without_experience"], signed=True),
                str(env["episodes"]),
            ]
        )
    head = [
        "env id",
        "before training",
        "after, without experience",
        "after, with experience",
        "with experience - before",
        "with - without experience (not a lesson effect: see below)",
        "episodes",
    ]
    return _table(head, rows)


#: ``paper_table.json``'s method keys -> the names the pages use.
TRAINER_NAMES = {
    "untrained": "untrained",
    "grpo": "GRPO",
    "static_experience": "static experience",
    "experience_only": "experience-only",
    "complementary": "Complementary RL",
}


def trainers_corridor_table() -> str:
    """The five trainers on the corridor (``paper_table.json``, ``bench_trainers.py``)."""
    by_method: dict[str, dict[str, dict[str, Any]]] = {}
    for row in result("paper_table.json")["table"]:
        by_method.setdefault(row["method"], {})[row["mode"]] = row

    def cells(row: dict[str, Any] | None) -> tuple[str, str, str]:
        if row is None:
            return "", "", ""
        seeds = ", ".join(f"{row['per_seed'][s]['mean']:.2f}" for s in sorted(row["per_seed"]))
        paper = "" if row["paper"] is None else f"{row['paper']:.2f}"
        return interval(row["pooled"]), seeds, paper

    rows = []
    for method, modes in by_method.items():
        without, seeds_without, paper_without = cells(modes.get("without_experience"))
        with_, seeds_with, paper_with = cells(modes.get("with_experience"))
        seeds = "; ".join(s for s in (seeds_without, seeds_with) if s)
        paper = " / ".join(p or "–" for p in (paper_without, paper_with) if with_ or p)
        rows.append([TRAINER_NAMES[method], without, with_, seeds, paper])
    head = [
        "method",
        "without experience",
        "with experience",
        "per seed (without; with)",
        "paper (without / with)",
    ]
    return _table(head, rows)


def memory_paper_table() -> str:
    """The paper's table on the memory family (``comprl-gym table``'s own Markdown)."""
    return method_table_markdown(result("extractor_memory_table.json")).rstrip("\n")


def memory_base_rates_table() -> str:
    """Base rates on the 64 held-out dungeons (``benchmarks/bench_memory_family.py``)."""
    variants = result("memory_family.json")["variants"]
    names = {
        "random": "random",
        "walk_east": "always east (blind to the side)",
        "expert": "expert (knows the side)",
    }
    rows = []
    agents = [a for a in variants["fork"] if a in variants["landmark"]]
    for agent in agents:
        cells = [variants[v][agent] for v in ("fork", "landmark")]
        rows.append(
            [names.get(agent, f"untrained ({cells[0]['agent']})")]
            + [f"{c['rate']:.3f} [{c['ci95'][0]:.3f}, {c['ci95'][1]:.3f}]" for c in cells]
            + [str(cells[0]["episodes"])]
        )
    return _table(["agent", "Fork", "Landmark", "episodes"], rows)


#: The three runs on the 256-dungeon ``test_large`` pool, in the order the page discusses them.
LARGE_RUNS = ("reader_coin_large", "reader_coin_large_seed1", "mismatched_large")


def streaming_large_table() -> str:
    """Paired differences of the 256-dungeon streaming runs (``bench_experience_transfer.py``)."""

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
    return _table(head, rows)


def sealed_table() -> str:
    """The sealed table (``benchmarks/bench_sealed_table.py``: ``comprl-gym table``'s own
    Markdown of the pre-registered runs)."""
    return method_table_markdown(result("sealed_table.json")).rstrip("\n")


def sealed_comparisons_table() -> str:
    """The sealed table's registered comparisons at its visit: the primary (Complementary RL
    minus GRPO) first, then the secondary ones, pooled over seeds and per seed."""
    table = result("sealed_table.json")
    primary = table["plan"]["content"]["primary"]
    visit = str(primary["visit"])
    seeds = [str(s) for s in table["plan"]["content"]["seeds"]]
    treatment = next(row for row in table["rows"] if row["method"] == primary["treatment"])
    rows = []
    for other in table["versus"]:
        cell = treatment["versus"][other]
        pooled = cell["this_minus_that"][visit]
        per_seed = [f"{cell['per_seed'][s][visit]['difference']['mean']:+.2f}" for s in seeds]
        rows.append(
            [
                f"{primary['treatment']} − {other}",
                "primary" if other == primary["control"] else "secondary",
                str(pooled["pairs"]),
                interval(pooled["difference"], True),
                p_value(pooled["mcnemar_p"]),
                ", ".join(per_seed),
            ]
        )
    head = [
        f"visit {visit}, deployed arms",
        "",
        "pairs",
        "difference [95%]",
        "McNemar",
        f"per seed ({', '.join(seeds)})",
    ]
    return _table(head, rows)


def sealed_runs_table() -> str:
    """Each sealed (method, seed): whether both its runs ran the registered inputs, the minutes
    each took, the dungeons it trained on and its streamed checkpoint's hash."""
    table = result("sealed_table.json")
    rows = []
    for method, by_seed in table["runs"].items():
        for seed, run in by_seed.items():
            trainer = run["checkpoint"]["files"]["trainer.pt"]
            tasks = run["training_tasks"].values()
            rows.append(
                [
                    method,
                    seed,
                    "yes" if all(c["inputs_as_registered"] for c in run["code"].values()) else "no",
                    f"{run['time_s']['train'] / 60:.1f}",
                    f"{run['time_s']['stream'] / 60:.1f}",
                    ", ".join(f"{len(t['played'])} {t['env_kwargs']['split']}" for t in tasks),
                    f"`{trainer[:12]}…`",
                ]
            )
    head = [
        "method",
        "seed",
        "inputs as registered",
        "train (min)",
        "stream (min)",
        "dungeons trained on",
        "trainer.pt sha256",
    ]
    return _table(head, rows)


def sealed_following_table() -> str:
    """Post hoc (``bench_sealed_table.py --posthoc``): per actor and seed, at visit 2, how
    often it moved east first with no lesson, and how often it moved the way a lesson named;
    on the sealed dungeons, and GRPO's seed-0 actor on two development pools."""

    def followed(cell: dict[str, Any] | None, side: str) -> str:
        moved = (cell or {}).get("follows", {}).get(side)
        return f"{round(moved['mean'] * moved['n'])}/{moved['n']}" if moved else "–"

    posthoc = result("sealed_table_posthoc.json")
    streams = posthoc["streams"]
    methods = [row["method"] for row in result("sealed_table.json")["rows"]]
    # the reader first, then the methods in the plan's order (the file's keys are sorted), with
    # GRPO's seed-0 actor on the development pools after GRPO's sealed rows
    listed = [
        ("reader, untrained", seed, arms) for seed, arms in streams["reader, untrained"].items()
    ]
    for method in methods:
        listed += [(method, seed, arms) for seed, arms in streams[method].items()]
        if method == methods[0]:
            listed += [
                (f"{method} on `{split}` (64 dungeons)", "0", stream["following"])
                for split, stream in posthoc["development_pools"].items()
            ]
    rows = []
    for actor, seed, arms in listed:
        none = arms["none"]["2"]
        aware, own = arms["outcome_aware"].get("2"), arms.get("own", {}).get("2")
        rows.append(
            [
                actor,
                seed,
                f"{none['east_first']}/{none['episodes']}",
                followed(aware, "west"),
                followed(aware, "east"),
                followed(own, "west"),
                followed(own, "east"),
            ]
        )
    head = [
        "actor",
        "seed",
        "no lesson: moved east",
        "ceiling says west: moved west",
        "ceiling says east: moved east",
        "own lesson says west: moved west",
        "own lesson says east: moved east",
    ]
    return _table(head, rows)


def glance_table(pages: str = "docs/results/") -> str:
    """The README's one results table: the sealed table's methods (the pre-registered claim)
    and the demo's row, each linking to its results page (``pages``: where those lie, seen from
    the page printing it)."""
    sealed = result("sealed_table.json")
    study = f"[sealed table]({pages}sealed-table.md)"
    rows = []
    for row in sealed["rows"]:
        last = row["last_visit"]
        grpo = row["versus"].get("GRPO")
        versus = "–"
        if grpo is not None:
            cell = grpo["this_minus_that"][last]
            versus = f"{interval(cell['difference'], True)}, {p_value(cell['mcnemar_p'])}"
        rows.append(
            [
                study,
                row["method"],
                interval(row["success"][row["deployed_arm"]][last]),
                versus,
            ]
        )
    demo = result("demo.json")["after"]
    iterations = len(result("demo.json")["training"])
    last = [v for v in demo["streaming"]["own"]["visits"] if v != "all"][-1]
    method = f"Complementary RL, {iterations} iterations: its own lessons, visit {last}"
    own = interval(demo["streaming"]["own"]["visits"][last]["success"])
    rows.append([f"[the demo]({pages}demo.md)", method, own, "–"])
    head = ["study", "method", "success [95% interval]", "minus GRPO (paired, McNemar p)"]
    return _table(head, rows)


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
    return _table(head, rows)


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
    return _table(["method", "seed", "held-out lessons", "name east", "name west"], rows)


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
    return _table(head, rows)


def experience_use_table() -> str:
    """Untrained SmolLM2 with no, a correct and a misleading lesson (``experience_use.json``)."""
    cells: dict[tuple[str, float], dict[str, dict[str, Any]]] = {}
    for cell in result("experience_use.json")["cells"]:
        cells.setdefault((cell["env_id"], cell["temperature"]), {})[cell["condition"]] = cell

    def lesson(cell: dict[str, Any] | None) -> str:
        if cell is None:
            return "(not run)"
        return f"{_rate(cell)}; {interval(cell['difference_vs_none'], signed=True)}"

    rows = [
        [
            f"`{env_id}`",
            f"{temperature:g}",
            _rate(by["none"]) if "none" in by else "(not run)",
            lesson(by.get("correct")),
            lesson(by.get("misleading")),
            str(by.get("none", {}).get("episodes", "")),
        ]
        for (env_id, temperature), by in cells.items()
    ]
    head = [
        "env id",
        "temperature",
        "no lesson",
        "correct lesson; minus none",
        "misleading lesson; minus none",
        "episodes",
    ]
    return _table(head, rows)


def _quoted_figures(node: Any, intervals: set, p_values: set) -> None:
    """Every interval (``mean``/``low``/``high`` and the benches' other spellings) and every
    p-value anywhere in a result file's JSON."""
    if isinstance(node, list):
        for value in node:
            _quoted_figures(value, intervals, p_values)
        return
    if not isinstance(node, dict):
        return
    for keys in INTERVAL_KEYS:
        values = [node.get(key) for key in keys]
        if all(isinstance(v, int | float) for v in values):
            intervals.add(tuple(values))
    if isinstance(node.get("rate"), int | float) and isinstance(node.get("ci95"), list):
        intervals.add((node["rate"], *node["ci95"]))
    for key, value in node.items():
        if (key == "p" or key.endswith("_p")) and isinstance(value, int | float):
            p_values.add(value)
        _quoted_figures(value, intervals, p_values)


#: How the result files spell an interval: (estimate, low, high) keys of one dict.
INTERVAL_KEYS = (
    ("mean", "low", "high"),
    ("success", "ci_low", "ci_high"),
    ("difference", "difference_ci_low", "difference_ci_high"),
)
#: ``0.48 [0.41, 0.55]`` or ``+0.11 [+0.03, +0.19]`` as the pages print an interval.
QUOTED_INTERVAL = re.compile(r"([+-]?\d+\.\d+)\s+\[([+-]?\d+\.\d+),\s+([+-]?\d+\.\d+)\]")
#: ``p 0.014`` as the pages print McNemar's p (``p < 0.001`` is a bound, not a figure).
QUOTED_P = re.compile(r"\bp\s+(\d\.\d+)\b")


def unsupported_figures(text: str, results: Path = RESULTS) -> list[str]:
    """The intervals and p-values ``text`` prints that no file under ``results`` holds (each
    compared at the number of decimals printed). A figure no file holds cannot be printed.

    >>> unsupported_figures("GRPO 0.48 [0.41, 0.55]; made up: 0.99 [0.12, 0.13], p 0.0123")
    ['0.99 [0.12, 0.13]', 'p 0.0123']
    """
    intervals, p_values = _figures_in(results)
    wrong = []
    for match in QUOTED_INTERVAL.finditer(text):
        printed = tuple(float(x) for x in match.groups())
        places = len(match.group(1).split(".")[1])
        if not any(
            all(round(v, places) == p for v, p in zip(held, printed, strict=True))
            for held in intervals
        ):
            wrong.append(" ".join(match.group(0).split()))
    for match in QUOTED_P.finditer(text):
        places = len(match.group(1).split(".")[1])
        if not any(round(v, places) == float(match.group(1)) for v in p_values):
            wrong.append(" ".join(match.group(0).split()))
    return wrong


def _longest_run(study: dict, seed: str) -> dict:
    """A seed's extractor-learning run as trained longest: its continuation when there is one
    (whose logs hold the first iterations too), else the run."""
    return study.get("continued", {}).get(seed) or study["seeds"][seed]


def extractor_learning_curve_table() -> str:
    """The probe each extractor-learning run logged every few iterations, right after a win /
    after a loss of 16 each: the seeds (their continuation's log when there is one, which
    holds the first iterations too) and the perfect-credit diagnostics
    (``extractor_learning.json``)."""
    study = result("extractor_learning.json")
    columns = {}
    for seed in study["seeds"]:
        columns[f"seed {seed}"] = _longest_run(study, seed)["curve"]
    for d in study["perfect_credit"].values():
        columns[f"perfect credit{_overridden(d['overrides'])}"] = d["curve"]
    logged = {
        name: {r["iteration"]: f"{r['probe_right_won']} / {r['probe_right_lost']}" for r in curve
               if "probe_right_won" in r}
        for name, curve in columns.items()
    }  # fmt: skip
    iterations = sorted({i for cells in logged.values() for i in cells})
    rows = [[str(i)] + [logged[name].get(i, "") for name in columns] for i in iterations]
    return _table(["iteration", *columns], rows)


def extractor_learning_windows_table() -> str:
    """Per seed (its continuation when there is one), per ten iterations: the trained samples,
    how many named the stairs' side and east, and how often the credit's sign agreed with the
    lesson's correctness (``extractor_learning.json``, ``trained_lessons.by_window``)."""
    study = result("extractor_learning.json")
    rows = []
    for seed in study["seeds"]:
        for w in _longest_run(study, seed)["trained_lessons"]["by_window"]:
            rows.append(
                [
                    f"seed {seed}",
                    w["iterations"],
                    str(w["samples"]),
                    f"{w['right']} ({w['right'] / w['samples']:.2f})",
                    str(w["east"]),
                    f"{w['agree']} of {w['signed']}",
                ]
            )
    head = ["run", "iterations", "samples", "naming the stairs' side", "naming east",
            "credit's sign agrees"]  # fmt: skip
    return _table(head, rows)


def extractor_learning_representation_table() -> str:
    """Per extractor: held-out accuracy of a linear read-out of its features at the answer
    position (fitted on scripted `train` walks, scored on the 32 probe episodes) for the
    stairs' side, the walked side and the outcome, per layer; and its own greedy choice
    (``extractor_learning.json``, ``representation``)."""
    study = result("extractor_learning.json")["representation"]
    n = study["test_episodes"]
    rows = []
    for name, writer in study["writers"].items():
        for layer in study["layers"]:
            decoded = writer["decoded"][str(layer)]
            rows.append(
                [
                    name,
                    f"{layer}",
                    *(
                        f"{round(decoded[t] * n)}/{n}"
                        for t in ("stairs_side", "walked_side", "won")
                    ),
                    f"{writer['greedy_names_stairs']}/{n}",
                ]
            )
    head = ["extractor", "layer", "stairs' side (the rule)", "walked side", "outcome",
            "its own greedy choice names the stairs' side"]  # fmt: skip
    return _table(head, rows)


#: The second-reader study's readers, in the order its tables print them.
SECOND_READERS = {"seed_0": "seed 0 (committed)", "seed_1": "seed 1"}


def second_reader_table() -> str:
    """Per reader and arm: success at each visit (``second_reader.json``), Wilson intervals."""
    study = result("second_reader.json")
    visits = sorted(
        {v for r in study["readers"].values() for v in r["streaming"]["none"]["visits"]} - {"all"}
    )
    rows = [
        [label, arm]
        + [
            interval(study["readers"][reader]["streaming"][arm]["visits"][v]["success"])
            for v in visits
        ]
        for reader, label in SECOND_READERS.items()
        for arm in study["arms"]
    ]
    return _table(["reader", "arm", *[f"visit {v}" for v in visits]], rows)


def second_reader_versus_table() -> str:
    """Per reader: each comparison at visit 2, over all dungeons and split by the dungeon's
    visit-1 outcome, and oracle minus none at visit 1 (``second_reader.json``), paired."""
    study = result("second_reader.json")
    rows = []
    for reader, label in SECOND_READERS.items():
        r = study["readers"][reader]
        split = r["by_own_past"]
        won, lost = split["won_at_visit_1"], split["lost_at_visit_1"]
        for name in study["comparisons"]:
            rows.append(
                [
                    label,
                    name,
                    paired_cell(r["versus"][name]["2"]),
                    f"{paired_cell(won[name])} ({won['dungeons']})",
                    f"{paired_cell(lost[name])} ({lost['dungeons']})",
                ]
            )
        rows.append(
            [
                label,
                "oracle minus none, visit 1",
                paired_cell(r["streaming"]["oracle"]["minus_none"]["1"]),
                "",
                "",
            ]
        )
    head = [
        "reader",
        "comparison",
        "visit 2, all dungeons",
        "visit 2, dungeons won at visit 1 (n)",
        "visit 2, dungeons lost at visit 1 (n)",
    ]
    return _table(head, rows)


def second_reader_warmups_table() -> str:
    """The seed-1 reader's two warm-ups (``second_reader.json``, ``seed_1_warmups``)."""
    warmups = result("second_reader.json")["seed_1_warmups"]
    rows = []
    for name in ("memory-reader-seed1-oe80", "memory-reader-seed1"):
        w = warmups[name]
        rows.append(
            [
                f"`runs/{name}`",
                f"{w['steps']}, {w['lr']:g}",
                ", ".join(w["formats"]),
                f"{w['time_s'] / 60:.0f} min",
                ", ".join(f"{f} {v:.2f}" for f, v in w["first_ten"].items()),
                ", ".join(f"{f} {v:.2f}" for f, v in w["last_ten"].items()),
                f"`{w['reader_sha256'][:8]}…`",
            ]
        )
    head = ["warm-up", "steps, lr", "formats", "warm-up time", "loss, first ten steps",
            "loss, last ten steps", "reader sha256"]  # fmt: skip
    return _table(head, rows)


def second_reader_moves_table() -> str:
    """Per reader, own-past group and arm at visit 2: wins, first moves to the stairs' side,
    wins after one, and the shown record's side (``second_reader.json``, ``visit_2_moves``)."""
    study = result("second_reader.json")
    rows = []
    for reader, label in SECOND_READERS.items():
        moves = study["readers"][reader]["visit_2_moves"]
        for group in ("won_at_visit_1", "lost_at_visit_1"):
            for arm in study["arms"]:
                m = moves[group][arm]
                shown = m["record_names_stairs"] + m["record_names_other"]
                rows.append(
                    [
                        label,
                        group.replace("_", " "),
                        arm,
                        f"{m['won']} of {m['episodes']}",
                        str(m["first_move_to_stairs"]),
                        f"{m['won_after_first_move_to_stairs']} of {m['first_move_to_stairs']}",
                        f"{m['record_names_stairs']} / {m['record_names_other']}" if shown else "",
                        f"{m['first_move_as_record']} of {shown}" if shown else "",
                    ]
                )
    head = [
        "reader",
        "dungeons",
        "arm",
        "won",
        "first move to the stairs' side",
        "won after it",
        "record shown names the stairs' side / the other",
        "first move as the record's",
    ]
    return _table(head, rows)


@cache
def ladder_results_table() -> str:
    """The known-answer ladder (``benchmarks/results/ladder.json``): per rung and learner,
    updates to solve, the last evaluation and the time taken."""
    from comprl_gym.trainers.ladder import RungResult, ladder_table

    rows = [RungResult.from_dict(r) for r in result("ladder.json")["results"]]
    return ladder_table(rows).replace("| learner |", "| learner (variant) |", 1)


def probe_rescored_table() -> str:
    """The frozen extractor probed again with one draw per episode
    (``benchmarks/results/probe-rescored/``): sampled, greedy and mean-probability rates."""
    rows = []
    for path in sorted((RESULTS / "probe-rescored").glob("*.json")):
        report = json.loads(path.read_text(encoding="utf-8"))["families"]["memory"][0]
        seed = path.stem.rsplit("seed", 1)[-1]
        cells = []
        for key in ("right_after", "greedy_right_after", "p_right_after"):
            for outcome in ("won", "lost"):
                cells.append(interval(report[f"{key}_{outcome}"]))
        rows.append([f"frozen SmolLM2, temperature 1.5, seed {seed}", *cells])
    head = [
        "extractor",
        "sampled right after a win",
        "after a loss",
        "greedy right after a win",
        "after a loss",
        "P(right) after a win",
        "after a loss",
    ]
    return _table(head, rows)


def _figures_in(results: Path) -> tuple[set, set]:
    intervals: set = set()
    p_values: set = set()
    for path in sorted(results.rglob("*.json")):
        _quoted_figures(json.loads(path.read_text(encoding="utf-8")), intervals, p_values)
    return intervals, p_values


#: Table name -> its renderer.
TABLES: dict[str, Callable[[], str]] = {
    "envs": markdown_table,
    "demo": demo_table,
    "demo-versus": demo_versus_table,
    "demo-shown": demo_shown_table,
    "demo-after-minus-before": demo_after_minus_before_table,
    "corridor": corridor_table,
    "landmark-rule": landmark_rule_table,
    "landmark-rule-versus": landmark_rule_versus_table,
    "extractor-learning": extractor_learning_table,
    "extractor-learning-sides": extractor_learning_sides_table,
    "extractor-learning-curve": extractor_learning_curve_table,
    "extractor-learning-windows": extractor_learning_windows_table,
    "extractor-learning-representation": extractor_learning_representation_table,
    "second-reader": second_reader_table,
    "second-reader-versus": second_reader_versus_table,
    "second-reader-moves": second_reader_moves_table,
    "second-reader-warmups": second_reader_warmups_table,
    "trainers-corridor": trainers_corridor_table,
    "memory-paper-table": memory_paper_table,
    "memory-base-rates": memory_base_rates_table,
    "streaming-large": streaming_large_table,
    "exemplar-history": exemplar_history_table,
    "stem-sides": stem_sides_table,
    "complementary-per-seed": complementary_per_seed_table,
    "experience-use": experience_use_table,
    "sealed-table": sealed_table,
    "sealed-comparisons": sealed_comparisons_table,
    "sealed-runs": sealed_runs_table,
    "sealed-following": sealed_following_table,
    "ladder": ladder_results_table,
    "probe-rescored": probe_rescored_table,
    "glance": glance_table,
    "glance-docs": lambda: glance_table(pages=""),
}


def render(text: str) -> str:
    """``text`` with every marked part regenerated."""
    names = OPENING.findall(text)
    closed = [m.group("name") for m in MARKED.finditer(text)]
    if names != closed:
        raise SystemExit(f"unclosed generated part(s): {sorted(set(names) - set(closed))}")
    unknown = sorted(set(names) - set(TABLES))
    if unknown:
        raise SystemExit(f"unknown generated table(s) {unknown}; known: {sorted(TABLES)}")
    return MARKED.sub(lambda m: m.group(1) + TABLES[m.group("name")]() + "\n" + m.group(4), text)


def pages() -> list[Path]:
    """The README and every docs page."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def main(argv: list[str]) -> int:
    stale = []
    for page in pages():
        current = page.read_text(encoding="utf-8")
        updated = render(current)
        if updated == current:
            continue
        stale.append(page.relative_to(ROOT).as_posix())
        if "--check" not in argv:
            atomic_write_text(page, updated)
    if stale and "--check" in argv:
        print(f"stale generated tables in {', '.join(stale)}: run `make readme`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
