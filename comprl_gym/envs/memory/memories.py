"""Scripted memories that bound a streaming evaluation's result (issue 44): two placebos, one ceiling.

A streaming arm's memory stores a lesson after each finished episode (between visits). These
three store lessons in the formats the real lesson sources write, so the words are matched
and only the information differs:

* ``coin``: the placebo of the trained ``stem`` extractor. After every episode, the oracle's
  sentence ("In the Vault of Iron the staircase down is at the end of the west branch.") with
  the side a coin drew for the dungeon: :func:`coin_side`, fixed per (stream seed, dungeon), a
  SHA-256 of the two (never Python's ``hash()``), so every visit stores the same side. Titled
  as the ``stem`` extractor titles its lessons (the family and the task).
* ``coin_exemplar``: the placebo of the exemplar memory. After every *won* episode, the
  exemplar memory's record of it (the task and the actions that won it), mirrored onto the
  coin's side when the coin disagrees with the side walked (east and west swapped, and the
  diagonals with them: the record of the same win in the mirror-image hall). Titled as the
  exemplar memory titles its records.
* ``outcome_aware``: the scripted ceiling of any extractor. After every episode, the oracle's
  sentence with the stairs' side the episode shows (:func:`side_shown`): the side walked in a
  won episode, the other side in one lost by stepping into the dead end. An episode without
  an east or west move shows nothing and stores nothing (a declined episode).

Each memory is an object with ``name`` and ``lesson(episode)``, which returns the lesson it
stores for a finished episode (``{"title", "description", "content"}``) or ``None``. The
family's :attr:`~comprl_gym.lessons.core.FamilyLessons.memories` hook (:func:`stream_memory`)
makes them; the stream stores each lesson as the no-model memories of
:mod:`comprl_gym.lessons.memories` store theirs (provenance: the episode, the memory's name
as the policy version; counts of episodes and declines). An env family sits below the
experience package (``tests/test_imports.py``), so it writes the lessons, never the store.

Nothing here needs the env's arguments: the sentence names only the dungeon (read from the
episode's task id), and a record is the episode's own task text and moves. An episode is
anything with ``task``, ``task_id``, ``env_family``, ``won`` and ``turns`` (each with an
``action`` and ``terminated``): a :class:`~comprl_gym.rollouts.Trajectory`.

Example:
    >>> from types import SimpleNamespace as Turn
    >>> from comprl_gym.rollouts import Trajectory
    >>> lost = Trajectory("e1", "comprl/Memory-Fork-v0", "memory", "fork/vault-of-iron",
    ...                   "You are in the Vault of Iron.", 0, won=False,
    ...                   turns=[Turn(action="north", terminated=False),
    ...                          Turn(action="east", terminated=True)])
    >>> stream_memory("outcome_aware", seed=0).lesson(lost)["content"]
    'In the Vault of Iron the staircase down is at the end of the west branch.'
    >>> stream_memory("coin_exemplar", seed=0).lesson(lost) is None  # only wins are kept
    True
    >>> coin_side(0, "fork/vault-of-iron"), coin_side(1, "fork/vault-of-iron")
    ('east', 'west')
"""

from __future__ import annotations

import hashlib
from typing import Any, ClassVar

from comprl_gym.core import ConfigurationError
from comprl_gym.envs.memory.dungeons import SIDES, dungeon, other_side
from comprl_gym.envs.memory.lessons import case_record, lesson_text
from comprl_gym.lessons.core import lesson_title, outcome_title

#: Each move and its mirror image (east and west swapped): the same walk in the other hall.
MIRROR: dict[str, str] = {
    "east": "west",
    "west": "east",
    "north-east": "north-west",
    "north-west": "north-east",
    "south-east": "south-west",
    "south-west": "south-east",
}


def coin_side(seed: int, task: int | str) -> str:
    """The side a fair coin drew for the dungeon of ``task`` (an index, task id or name) in
    the stream of ``seed``: the first byte of ``SHA-256("coin:<seed>:<dungeon index>")``, even
    for east, odd for west. The same in every visit, process and Python version; independent
    of the dungeon's real side (a hash of its name).

    Example:
        >>> import hashlib
        >>> index = dungeon("fork/vault-of-iron").index
        >>> index, hashlib.sha256(f"coin:1:{index}".encode()).digest()[0]
        (192, 49)
        >>> coin_side(1, index)  # 49 is odd
        'west'
    """
    digest = hashlib.sha256(f"coin:{seed}:{dungeon(task).index}".encode()).digest()
    return SIDES[digest[0] % 2]


def side_shown(episode: Any) -> str | None:
    """The stairs' side ``episode`` shows, as a reader of its moves and outcome can tell it:
    the side of its first east or west move (from the start, a move into the dead end ends
    the episode at once, so a first move that did not end it went towards the stairs: a win,
    or a loss on the step limit); for an episode lost by stepping into the dead end (its last
    move, east or west, ended it), the other side of that last move. ``None``: it never moved
    east or west.

    In the fork every such side is right; in the landmark hall an east or west bump from the
    landmark's alcove counts as a move and could mislead.
    """
    moves = [turn.action.strip().lower() for turn in episode.turns if turn.action]
    horizontal = [move for move in moves if move in SIDES]
    if not horizontal:
        return None
    if not episode.won and episode.turns[-1].terminated and moves[-1] in SIDES:
        return other_side(moves[-1])
    return horizontal[0]


class CoinMemory:
    """``coin``: after every episode, the oracle's sentence with the coin's side."""

    name: ClassVar[str] = "coin"

    def __init__(self, seed: int = 0):
        self.seed = seed

    def lesson(self, episode: Any) -> dict[str, str] | None:
        side = coin_side(self.seed, episode.task_id)
        sentence = lesson_text("oracle", dungeon(episode.task_id).index, side=side)
        return {"title": lesson_title(episode), "description": "", "content": sentence}


class CoinExemplarMemory(CoinMemory):
    """``coin_exemplar``: after every won episode, its exemplar record on the coin's side."""

    name: ClassVar[str] = "coin_exemplar"

    def lesson(self, episode: Any) -> dict[str, str] | None:
        actions = [turn.action.strip() for turn in episode.turns if turn.action.strip()]
        walked = side_shown(episode)
        if not episode.won or walked is None:
            return None
        if walked != coin_side(self.seed, episode.task_id):
            actions = [MIRROR.get(a.lower(), a) for a in actions]
        content = case_record(episode.task, actions, "won")
        return {"title": outcome_title(episode), "description": "", "content": content}


class OutcomeAwareMemory(CoinMemory):
    """``outcome_aware``: after every episode, the oracle's sentence with the side it shows."""

    name: ClassVar[str] = "outcome_aware"

    def lesson(self, episode: Any) -> dict[str, str] | None:
        side = side_shown(episode)
        if side is None:
            return None
        sentence = lesson_text("oracle", dungeon(episode.task_id).index, side=side)
        return {"title": lesson_title(episode), "description": "", "content": sentence}


#: The scripted memories by arm name (:attr:`~comprl_gym.lessons.core.FamilyLessons.memories`).
STREAM_MEMORIES: dict[str, type[CoinMemory]] = {
    "coin": CoinMemory,
    "coin_exemplar": CoinExemplarMemory,
    "outcome_aware": OutcomeAwareMemory,
}


def stream_memory(name: str, seed: int = 0) -> CoinMemory:
    """A fresh scripted memory called ``name`` for the stream of ``seed`` (the family's
    :attr:`~comprl_gym.lessons.core.FamilyLessons.memories` hook)."""
    if name not in STREAM_MEMORIES:
        raise ConfigurationError(
            f"the memory family has no scripted memory {name!r} "
            f"(it has: {', '.join(STREAM_MEMORIES)})"
        )
    return STREAM_MEMORIES[name](seed)


__all__ = [
    "MIRROR",
    "STREAM_MEMORIES",
    "CoinExemplarMemory",
    "CoinMemory",
    "OutcomeAwareMemory",
    "coin_side",
    "side_shown",
    "stream_memory",
]
