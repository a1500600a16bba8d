"""The memory family's extractor-probe episodes: a fixed, committed set of held-out episodes.

``probe_episodes.json`` (beside this module) holds :data:`PROBE_DUNGEONS` played twice each on
``comprl/Memory-Fork-v0`` (``split="test_large"``, ``branch_length=2``, ``observation_mode=
"compact"``, ``moves="open"``) by a scripted agent that walks one side: once east, once
west, so every dungeon has one won and one lost episode and the probe covers both sides x both
outcomes. ``scripts/make_probe_episodes.py`` wrote it; :func:`probe_episodes` reads it back as
``Trajectory.to_dict`` records (the family's
:attr:`~comprl_gym.lessons.core.FamilyLessons.probe_episodes` hook), which
:mod:`comprl_gym.lessons.probe` turns into :class:`~comprl_gym.rollouts.Trajectory`
objects and gives to an extractor.

Example:
    >>> records = probe_episodes()
    >>> len(records), sum(r["won"] for r in records)
    (32, 16)
    >>> [dungeon(i).side for i in PROBE_DUNGEONS].count("east")
    8
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from comprl_gym.core import DataError
from comprl_gym.envs.memory.dungeons import SIDES, dungeon, pool

PROBE_FILE = Path(__file__).with_name("probe_episodes.json")
#: Where the probe's dungeons come from: a held-out pool no trainer samples.
PROBE_SPLIT = "test_large"
#: Dungeons per side: the first of each side in the pool's index order.
PER_SIDE = 8
#: The env the episodes were played on (and its ``gym.make`` arguments).
PROBE_ENV_ID = "comprl/Memory-Fork-v0"
PROBE_ENV_KWARGS: dict[str, Any] = {
    "split": PROBE_SPLIT,
    "branch_length": 2,
    "observation_mode": "compact",
    "moves": "open",
}


def _probe_dungeons() -> tuple[int, ...]:
    chosen: list[int] = []
    for side in SIDES:
        chosen += [i for i in pool(PROBE_SPLIT) if dungeon(i).side == side][:PER_SIDE]
    return tuple(sorted(chosen))


#: The dungeon indices of the probe: :data:`PER_SIDE` with the stairs east, as many west.
PROBE_DUNGEONS: tuple[int, ...] = _probe_dungeons()


class WalkAgent:
    """Walks one side, whatever it sees: the probe's scripted player.

    Example:
        >>> WalkAgent("west").act("You stand at a fork.", {})
        'west'
    """

    def __init__(self, side: str):
        self.side = side

    def reset(self, task: str, info: dict[str, Any]) -> None:
        """Nothing to remember."""

    def act(self, observation: str, info: dict[str, Any]) -> str:
        return self.side


def probe_episodes() -> list[dict[str, Any]]:
    """The committed probe episodes as ``Trajectory.to_dict`` records (read-only data).

    Raises:
        DataError: the file is missing or is not the generator's JSON.
    """
    try:
        data = json.loads(PROBE_FILE.read_text(encoding="utf-8"))
        episodes = data["episodes"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DataError(
            PROBE_FILE,
            f"cannot read the probe episodes: {exc}",
            "run scripts/make_probe_episodes.py",
        ) from exc
    return list(episodes)


__all__ = [
    "PER_SIDE",
    "WalkAgent",
    "PROBE_DUNGEONS",
    "PROBE_ENV_ID",
    "PROBE_ENV_KWARGS",
    "PROBE_FILE",
    "PROBE_SPLIT",
    "probe_episodes",
]
