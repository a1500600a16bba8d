"""Lesson sensitivity: does the actor's first move depend on the lesson it is shown?

An actor trained until its outputs stop depending on its input ("template collapse") walks the
same way whatever its lesson says, and no success rate shows it while it happens. For a family
that writes fixed lessons (:meth:`~comprl_gym.families.FamilySpec.fixed_lesson`: ``oracle``,
``inverted``, ``placebo``), the actor plays the first step of a few tasks greedily three times,
shown the oracle lesson, its inversion and its placebo (each alone in a scratch store, so it is
the lesson retrieved), and :func:`lesson_sensitivity` reports how often the first action under
the inverted (or placebo) lesson differs from the one under the oracle's. A reader that follows
lessons scores near 1 against the inversion; a lesson-deaf actor scores 0.

Example (a scripted reader that walks the side its lesson names, on the memory family):
    >>> class Reader:
    ...     def reset(self, task, info):
    ...         self.lesson = str(info.get("experiences"))
    ...     def act(self, observation, info):
    ...         return "east" if "east branch" in self.lesson else "west"
    >>> kwargs = {"split": "test", "branch_length": 2, "observation_mode": "compact",
    ...           "moves": "open"}
    >>> lesson_sensitivity(Reader(), "comprl/Memory-Fork-v0", kwargs, seeds=range(4))
    {'sensitivity/inverted': 1.0, 'sensitivity/placebo': 0.5, 'sensitivity/tasks': 4}
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from typing import Any

from comprl_gym.env_factory import EnvSpec, ExperienceSpec, make_env
from comprl_gym.families import family_spec
from comprl_gym.registration import families_of

#: The lesson every swap is compared with, and the swaps.
REFERENCE = "oracle"
SWAPS = ("inverted", "placebo")


def measures_sensitivity(env_id: str) -> bool:
    """Whether ``env_id``'s family writes the oracle lesson and every swap of :data:`SWAPS`."""
    [family] = families_of([env_id]) or [None]
    spec = family_spec(family) if family else None
    return spec is not None and {REFERENCE, *SWAPS} <= set(spec.lessons.fixed)


def first_action(agent: Any, env_id: str, kwargs: dict[str, Any], seed: int, lesson: str) -> str:
    """``agent``'s first action on the task of reset ``seed``, shown ``lesson`` as the one
    experience of its episode (a scratch store holding only it)."""
    from comprl_gym.experience import ExperienceConfig, ExperienceManager
    from comprl_gym.lessons.probe import ScratchEmbedder

    family = families_of([env_id])[0]
    with tempfile.TemporaryDirectory(prefix="comprl-sensitivity-") as folder:
        store = ExperienceManager(
            folder, ExperienceConfig(diversify=False), embedder=ScratchEmbedder()
        )
        experience = ExperienceSpec(
            inject_top_k=1, search_budget=0, report_outcomes=False, in_observation=False
        )
        env = make_env(EnvSpec.of(env_id, kwargs, experience=experience), manager=store)
        try:
            store.add([lesson], env_family=family)
            observation, info = env.reset(seed=seed)
            agent.reset(info["task"], info)
            return str(agent.act(observation, info)).strip()
        finally:
            env.close()
            store.close()


def lesson_sensitivity(
    agent: Any, env_id: str, kwargs: dict[str, Any], seeds: Iterable[int]
) -> dict[str, float | int]:
    """``sensitivity/<swap>``: the fraction of the tasks of reset ``seeds`` on which ``agent``'s
    first action differs between the oracle lesson and that swap; ``sensitivity/tasks``: how
    many tasks. ``agent`` should act greedily (the difference is then the lesson's alone)."""
    import gymnasium as gym

    spec = family_spec(families_of([env_id])[0])
    assert spec is not None
    seeds = list(seeds)
    plain = gym.make(env_id, **kwargs)
    try:
        tasks = [plain.reset(seed=seed)[1]["task_id"] for seed in seeds]
    finally:
        plain.close()
    actions = {
        kind: [
            first_action(agent, env_id, kwargs, seed, spec.fixed_lesson(kind, task))
            for seed, task in zip(seeds, tasks)
        ]
        for kind in (REFERENCE, *SWAPS)
    }
    out: dict[str, float | int] = {}
    for swap in SWAPS:
        changed = sum(a != b for a, b in zip(actions[REFERENCE], actions[swap]))
        out[f"sensitivity/{swap}"] = changed / len(seeds) if seeds else float("nan")
    out["sensitivity/tasks"] = len(seeds)
    return out


__all__ = ["REFERENCE", "SWAPS", "first_action", "lesson_sensitivity", "measures_sensitivity"]
