"""A scripted reader of the memory family's lessons: it replays what a lesson says, no model.

:class:`ReplayAgent` is the streaming evaluation's "scripted replay of stored actions" (issue
44): ``comprl-gym stream --agent comprl_gym.envs.memory.replay:ReplayAgent --arms
none,exemplar``. At each episode's start it reads the lessons the stream injected
(``info["experiences"]``, :class:`~comprl_gym.wrappers.injection.ExperienceInjection`) and
keeps those about the dungeon it plays (the first dungeon a lesson names, as the family's
judge reads it, :func:`~comprl_gym.envs.memory.judge.judge_lesson`). Then it

1. replays the moves of a won episode's record about the dungeon ("Actions that won it, in
   order: east, east.", the exemplar memory's), if one is shown;
2. else walks the side an oracle-format sentence about the dungeon names ("... the staircase
   down is at the end of the west branch."), if one is shown;
3. else walks a side drawn at random from its ``seed`` and the dungeon;

and once the replayed moves run out, keeps walking their side (the last east or west move).
:func:`~comprl_gym.agents.base.make_agent` builds it with the caller's seed: the stream's is
each episode's sampling seed, so with no lesson it flips a fair coin anew at every visit, the
same coin in every arm (common random numbers); built without a seed, its coin is seed 0's.

Example:
    >>> import gymnasium as gym
    >>> import comprl_gym
    >>> from comprl_gym.envs.memory import dungeon, lesson_text
    >>> env = gym.make("comprl/Memory-Fork-v0", split="test")
    >>> obs, info = env.reset(seed=0)
    >>> d = dungeon(info["task_id"])
    >>> record = lesson_text("exemplar", d.index, 3, d.side)
    >>> agent = ReplayAgent(seed=1)
    >>> agent.reset(info["task"], {**info, "experiences": [{"id": 1, "text": record}]})
    >>> agent.source, agent.moves == [d.side] * 3
    ('exemplar', True)
    >>> while not (info["won"] or info["step"] >= env.unwrapped.max_steps):
    ...     obs, reward, terminated, truncated, info = env.step(agent.act(obs, info))
    >>> info["won"]
    True
    >>> env.close()
"""

from __future__ import annotations

import random
import re
from typing import Any

from comprl_gym.envs.memory.dungeons import SIDES, dungeon
from comprl_gym.envs.memory.judge import judge_lesson

#: The moves of a won episode's record (the exemplar memory's, :func:`.lessons.case_record`).
_WON_MOVES = re.compile(r"Actions that won it, in order: (.*?)\.?\s*$", re.MULTILINE)
#: The side of an oracle-format sentence (:func:`.dungeons.oracle_lesson`).
_ORACLE_SIDE = re.compile(r"the staircase down is at the end of the (east|west) branch", re.I)


def record_moves(text: str) -> list[str]:
    """The moves of a won episode's record (the exemplar memory's format), in order; ``[]``
    for any other text.

    Example:
        >>> record_moves("Actions that won it, in order: east, east.")
        ['east', 'east']
        >>> record_moves("In the Mire of Pearls the staircase down is at the end of the east branch.")
        []
    """
    found = _WON_MOVES.search(text)
    return [m.strip() for m in found.group(1).split(",")] if found else []


class ReplayAgent:
    """Replays a shown record's moves, else walks a shown sentence's side, else a coin's.

    Attributes (set by :meth:`reset`):
        moves: the moves still to replay.
        side: the side walked once they run out.
        source: where they came from: ``"exemplar"``, ``"oracle"`` or ``"coin"``.
    """

    def __init__(self, seed: int | None = None):
        self.seed = 0 if seed is None else seed
        self.moves: list[str] = []
        self.side = SIDES[0]
        self.source = "coin"

    def reset(self, task: str, info: dict[str, Any]) -> None:
        """Read the lessons shown about this episode's dungeon and plan the walk."""
        d = dungeon(info.get("task_id") or task)
        about = [
            e["text"]
            for e in info.get("experiences") or []
            if judge_lesson(e["text"]).task_id == d.index
        ]
        for text in about:
            moves = record_moves(text)
            walked = [m.lower() for m in moves if m.lower() in SIDES]
            if walked:
                self.moves, self.side, self.source = moves, walked[-1], "exemplar"
                return
        for text in about:
            found = _ORACLE_SIDE.search(text)
            if found:
                self.moves, self.side, self.source = [], found.group(1).lower(), "oracle"
                return
        coin = random.Random(f"replay:{self.seed}:{d.index}")
        self.moves, self.side, self.source = [], coin.choice(SIDES), "coin"

    def act(self, observation: str, info: dict[str, Any]) -> str:
        """The next move to replay, else the side."""
        return self.moves.pop(0) if self.moves else self.side


__all__ = ["ReplayAgent", "record_moves"]
