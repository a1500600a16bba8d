"""The ladder page's table (``docs/results/ladder.md``), from ``ladder.json``."""

from __future__ import annotations

from collections.abc import Callable

from benchmarks.ladder.run import ordered
from benchmarks.tables import result
from comprl_gym.trainers.ladder import RungResult, ladder_table


def ladder_results_table() -> str:
    """Per rung, learner and seed: updates to solve, the last evaluation and the time taken."""
    rows = ordered([RungResult.from_dict(r) for r in result("ladder.json")["results"]])
    return ladder_table(rows).replace("| learner |", "| learner (variant) |", 1)


TABLES: dict[str, Callable[[], str]] = {"ladder": ladder_results_table}
