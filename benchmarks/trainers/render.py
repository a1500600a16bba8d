"""The trainers-on-the-corridor page's table (``docs/results/trainers-corridor.md``), from
``paper_table.json``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from benchmarks.tables import interval, result, table

#: ``paper_table.json``'s method keys -> the names the pages use.
TRAINER_NAMES = {
    "untrained": "untrained",
    "grpo": "GRPO",
    "static_experience": "static experience",
    "experience_only": "experience-only",
    "complementary": "Complementary RL",
}


def trainers_corridor_table() -> str:
    """The five trainers on the corridor (``paper_table.json``, ``run.py paper-table``)."""
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
    return table(head, rows)


#: Table name (the page's ``<!-- generated: NAME -->``) -> its renderer.
TABLES: dict[str, Callable[[], str]] = {
    "trainers-corridor": trainers_corridor_table,
}
