"""The sealed table's page (``docs/results/sealed-table.md``), from ``sealed_table.json`` and its
post-hoc file."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from benchmarks.sealed_table import render_capable
from benchmarks.tables import result, table
from comprl_gym.evaluation.table import markdown as method_table_markdown


def sealed_table() -> str:
    """The sealed table (``run.py``: ``comprl-gym table``'s own
    Markdown of the pre-registered runs)."""
    return method_table_markdown(result("sealed_table.json")).rstrip("\n")


def sealed_comparisons_table() -> str:
    """The sealed table's registered comparisons at its visit: the primary (Complementary RL
    minus GRPO) first, then the secondary ones, pooled over seeds and per seed."""
    return render_capable.comparisons_table("sealed_table.json")


def sealed_runs_table() -> str:
    """Each sealed (method, seed): what it ran (:func:`~benchmarks.sealed_table.render_capable.
    runs_table`)."""
    return render_capable.runs_table("sealed_table.json")


def sealed_following_table() -> str:
    """Post hoc (``run.py --posthoc``): per actor and seed, at visit 2, how
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
    return table(head, rows)


#: Table name (the page's ``<!-- generated: NAME -->``) -> its renderer: the first plan's, then
#: the capable-extractor plan's (:mod:`benchmarks.sealed_table.render_capable`).
TABLES: dict[str, Callable[[], str]] = {
    "sealed-table": sealed_table,
    "sealed-comparisons": sealed_comparisons_table,
    "sealed-runs": sealed_runs_table,
    "sealed-following": sealed_following_table,
    **render_capable.TABLES,
}
