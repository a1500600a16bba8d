"""What a benchmark must know about the memory family: what decides what a suite plays
(:attr:`~comprl_gym.families.FamilySpec.suite_content`) and the answer no observation may show
(its validation profile's ``solution_texts``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from comprl_gym.envs.memory import dungeons
from comprl_gym.families import first_observations
from comprl_gym.utils import json_sha256


def suite_content(
    seeds: list[int], env_kwargs: dict[str, Any], make_env: Callable[[], Any]
) -> dict[str, Any]:
    """Each seed's dungeon (its side and landmark) as the des-file NetHack plays, the step
    limit (what the first observations cannot show) and the first observations."""
    env = make_env()
    try:
        inner = env.unwrapped
        played = [dungeons.dungeon(inner.pool[seed % len(inner.pool)]) for seed in seeds]
        return {
            # Read through the module: a test moves one dungeon's level and sees the hash move.
            "des_files": json_sha256(
                [dungeons.dungeon_des_file(inner.variant, d, inner.branch_length) for d in played]
            ),
            "max_steps": inner.max_steps,
            "first_observations": first_observations(env, seeds),
        }
    finally:
        env.close()


def solution_texts(env: Any, info: dict[str, Any]) -> list[str]:
    """The memory task's answer: the lesson that names the stairs' branch of this dungeon.

    Example:
        >>> solution_texts(None, {"task_id": "fork/vault-of-marrow"})
        ['In the Vault of Marrow the staircase down is at the end of the west branch.']
    """
    return [dungeons.oracle_lesson(info["task_id"])]
