"""What a benchmark must know about ALFWorld: what decides what a suite plays (the family's
:attr:`~comprl_gym.families.FamilySpec.suite_content`) and whether the official games it
needs are here (:attr:`~comprl_gym.families.FamilySpec.missing_data`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from comprl_gym.envs.alfworld.data import find_split_dir
from comprl_gym.utils import files_sha256, json_sha256


def suite_content(
    seeds: list[int], env_kwargs: dict[str, Any], make_env: Callable[[], Any]
) -> dict[str, Any]:
    """Where the games come from (official or generated) and the game and expert-trajectory
    files of every pinned seed (the first observations add nothing: the files decide them)."""
    env = make_env()
    try:
        inner = env.unwrapped
        records = [inner.game_record(seed) for seed in seeds]
        return {
            "data_source": inner.data_source,
            "games": json_sha256(
                [
                    (r.task_id.split("/", 1)[-1], files_sha256([r.game_file, r.traj_file]))
                    for r in records
                ]
            ),
        }
    finally:
        env.close()


def missing_data(env_kwargs: dict[str, Any]) -> str:
    """``""`` when ALFWorld's official games of ``env_kwargs``' split are under its
    ``data_dir`` (or ``$ALFWORLD_DATA``), else what to do about it.

    Example:
        >>> missing_data({"data_dir": "/nonexistent", "split": "valid_seen"})[:46]
        "ALFWorld's official valid_seen games, which ar"
    """
    split = env_kwargs.get("split", "train")
    if find_split_dir(env_kwargs.get("data_dir"), split) is not None:
        return ""
    return (
        f"ALFWorld's official {split} games, which are not here: pass --env-arg "
        "data_dir=FOLDER (holding json_2.1.1/), or play the generated games (a different suite)"
    )
