"""What a benchmark must know about WebShop: what decides what a suite plays (the family's
:attr:`~comprl_gym.families.FamilySpec.suite_content`) and the answer no observation may show
(its validation profile's ``solution_texts``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from comprl_gym.families import first_observations
from comprl_gym.utils import json_sha256


def suite_content(
    seeds: list[int], env_kwargs: dict[str, Any], make_env: Callable[[], Any]
) -> dict[str, Any]:
    """The catalog (products, prices, goals) and the first observations of the pinned seeds."""
    env = make_env()
    try:
        catalog = env.unwrapped.catalog
        return {
            "catalog": json_sha256([catalog.products, catalog.prices, catalog.goals]),
            "first_observations": first_observations(env, seeds),
        }
    finally:
        env.close()


def solution_texts(env: Any, info: dict[str, Any]) -> list[str]:
    """The target product's ASIN: an agent may find it by searching, never be told it."""
    goal = env.unwrapped.goal
    return [str(goal["asin"])] if goal.get("asin") else []
