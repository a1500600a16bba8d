"""The memory family's base rates (``docs/environments/memory.md``), from ``memory_family.json``."""

from __future__ import annotations

from collections.abc import Callable

from benchmarks.tables import result, table


def memory_base_rates_table() -> str:
    """Base rates on the 64 held-out dungeons (``run.py``)."""
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
    return table(["agent", "Fork", "Landmark", "episodes"], rows)


#: Table name (the page's ``<!-- generated: NAME -->``) -> its renderer.
TABLES: dict[str, Callable[[], str]] = {
    "memory-base-rates": memory_base_rates_table,
}
