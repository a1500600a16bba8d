"""The ladder page's tables (``docs/results/ladder.md``), from ``ladder.json`` (the extractor's
rungs) and ``actor_ladder.json`` (the actor's)."""

from __future__ import annotations

from collections.abc import Callable

from benchmarks.ladder import actor
from benchmarks.ladder.run import ordered
from benchmarks.tables import result
from comprl_gym.trainers.ladder import RungResult, ladder_table


def ladder_results_table() -> str:
    """Per rung, learner and seed: updates to solve, the last evaluation and the time taken."""
    rows = ordered([RungResult.from_dict(r) for r in result("ladder.json")["results"]])
    return ladder_table(rows).replace("| learner |", "| learner (variant) |", 1)


def actor_ladder_table() -> str:
    """The actor's rungs: per rung, learner and seed, updates to solve (all 32 held-out tasks
    won greedily), the last evaluation and the time taken."""
    rows = actor.ordered([RungResult.from_dict(r) for r in result("actor_ladder.json")["results"]])
    return (
        ladder_table(rows)
        .replace("| greedy right (last) |", "| won greedily (last) |", 1)
        .replace("| P(target) (last) |", "| P(right first branch) (last) |", 1)
    )


TABLES: dict[str, Callable[[], str]] = {
    "ladder": ladder_results_table,
    "actor_ladder": actor_ladder_table,
}
