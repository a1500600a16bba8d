"""What decides what a MiniHack suite plays (the family's
:attr:`~comprl_gym.families.FamilySpec.suite_content`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from comprl_gym.families import first_observations
from comprl_gym.utils import json_sha256


def suite_content(
    seeds: list[int], env_kwargs: dict[str, Any], make_env: Callable[[], Any]
) -> dict[str, Any]:
    """The generated des-files (every layout the package registers) and the first
    observations of the pinned seeds."""
    from comprl_gym.envs.minihack.layouts import LAYOUTS

    env = make_env()
    try:
        return {
            "des_files": json_sha256(LAYOUTS),
            "first_observations": first_observations(env, seeds),
        }
    finally:
        env.close()
