"""The results index's one table across studies (``docs/results/index.md``): the sealed table's
methods and the demo's row."""

from __future__ import annotations

from collections.abc import Callable

from benchmarks.tables import interval, p_value, result, table


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
    return table(head, rows)


#: Table name (the page's ``<!-- generated: NAME -->``) -> its renderer.
TABLES: dict[str, Callable[[], str]] = {
    "glance": glance_table,
    "glance-docs": lambda: glance_table(pages=""),
}
