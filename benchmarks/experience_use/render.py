"""The experience-use page's table (``docs/results/experience-use.md``), from
``experience_use.json``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from benchmarks.tables import interval, rate, result, table


def experience_use_table() -> str:
    """Untrained SmolLM2 with no, a correct and a misleading lesson (``experience_use.json``)."""
    cells: dict[tuple[str, float], dict[str, dict[str, Any]]] = {}
    for cell in result("experience_use.json")["cells"]:
        cells.setdefault((cell["env_id"], cell["temperature"]), {})[cell["condition"]] = cell

    def lesson(cell: dict[str, Any] | None) -> str:
        if cell is None:
            return "(not run)"
        return f"{rate(cell)}; {interval(cell['difference_vs_none'], signed=True)}"

    rows = [
        [
            f"`{env_id}`",
            f"{temperature:g}",
            rate(by["none"]) if "none" in by else "(not run)",
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
    return table(head, rows)


#: Table name (the page's ``<!-- generated: NAME -->``) -> its renderer.
TABLES: dict[str, Callable[[], str]] = {
    "experience-use": experience_use_table,
}
