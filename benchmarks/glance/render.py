"""The results index's one table across studies (``docs/results/index.md``): the registered
tables' methods and the demo's row."""

from __future__ import annotations

from collections.abc import Callable

from benchmarks.tables import interval, p_value, result, table

#: The registered tables, newest first: (result file, page, the study's name in the table).
REGISTERED = (
    ("capable_table.json", "capable-table.md", "capable-extractor table"),
    ("sealed_table.json", "sealed-table.md", "sealed table"),
)


def registered_rows(name: str, link: str) -> list[list[str]]:
    """A registered table's methods: the deployed arm at the last visit, and minus GRPO's
    between the training seeds (Student's t over the seeds' paired differences, where the
    plan's unit is the seed) and pooled over the pairs (McNemar's p)."""
    rows = []
    for row in result(name)["rows"]:
        last = row["last_visit"]
        grpo = row["versus"].get("GRPO")
        between, pooled = "–", "–"
        if grpo is not None:
            cell = grpo["this_minus_that"][last]
            pooled = f"{interval(cell['difference'], True)}, {p_value(cell['mcnemar_p'])}"
            if "between_seeds" in grpo:
                between = interval(grpo["between_seeds"][last], True)
        success = interval(row["success"][row["deployed_arm"]][last])
        rows.append([link, row["method"], success, between, pooled])
    return rows


def glance_table(pages: str = "docs/results/") -> str:
    """The results index's one table: the registered tables' methods and the demo's row, each
    linking to its results page (``pages``: where those lie, seen from the page printing it)."""
    rows = []
    for name, page, study in REGISTERED:
        rows += registered_rows(name, f"[{study}]({pages}{page})")
    demo = result("demo.json")["after"]
    iterations = len(result("demo.json")["training"])
    last = [v for v in demo["streaming"]["own"]["visits"] if v != "all"][-1]
    method = f"Complementary RL, {iterations} iterations: its own lessons, visit {last}"
    own = interval(demo["streaming"]["own"]["visits"][last]["success"])
    rows.append([f"[the demo]({pages}demo.md)", method, own, "–", "–"])
    head = [
        "study",
        "method",
        "success [95% interval]",
        "minus GRPO, between training seeds (t)",
        "minus GRPO, pooled pairs (McNemar p)",
    ]
    return table(head, rows)


#: Table name (the page's ``<!-- generated: NAME -->``) -> its renderer.
TABLES: dict[str, Callable[[], str]] = {
    "glance": glance_table,
    "glance-docs": lambda: glance_table(pages=""),
}
