"""The corridor page's table (``docs/results/corridor.md``), from ``corridor.json``."""

from __future__ import annotations

from collections.abc import Callable

from benchmarks.tables import interval, rate, result, table


def corridor_table() -> str:
    """The corridor run's table (``configs/corridor.yaml``), from ``corridor.json``
    (``run.py``)."""
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
                rate(env["before_training"]),
                rate(env["after_without_experience"]),
                rate(env["after_with_experience"]),
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
    return table(head, rows)


#: Table name (the page's ``<!-- generated: NAME -->``) -> its renderer.
TABLES: dict[str, Callable[[], str]] = {
    "corridor": corridor_table,
}
