"""The ladder (``comprl/Ladder-v0``): known-answer tasks that check an actor's learner.

A negative result about a method counts only once its learner has passed a check whose answer
is known. Each rung of this family (:data:`~.env.RUNGS`: a constant answer, an answer that
depends on the observation, an answer given in context, a two-step episode) has a perfect
reward and a fixed right branch, so a learner that cannot climb it is broken, whatever the
method. :func:`comprl_gym.trainers.ladder.climb_actor` trains the library's GRPO trainer and
the supervised control on it; ``benchmarks/ladder`` measures both.

Its :attr:`~comprl_gym.lessons.core.FamilyLessons.reading_examples` give the supervised
control its labels: every task of a split, labelled with its first right branch (format
``answer``, no lesson shown: the cue is in the observation).

Example:
    >>> import gymnasium as gym
    >>> import comprl_gym
    >>> env = gym.make("comprl/Ladder-v0", rung="lesson", split="test")
    >>> obs, info = env.reset(seed=1)
    >>> obs.endswith("the west branch."), env.step("west")[1]
    (True, 1.0)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from comprl_gym.core import ConfigurationError
from comprl_gym.envs.ladder.env import RUNGS, SIDES, SPLITS, LadderEnv, right_branches
from comprl_gym.families import EnvEntry, FamilySpec
from comprl_gym.lessons.core import FamilyLessons, ReadingExample

#: The one reading format: the task's own observation, labelled with its first right branch.
READING_FORMATS = ("answer",)


def reading_examples(
    split: str, formats: Sequence[str], sides: str, env_kwargs: Mapping[str, Any]
) -> list[ReadingExample]:
    """Every task of ``split`` for the env's rung (``env_kwargs["rung"]``), labelled with the
    first right branch. ``formats`` must be ``["answer"]`` and ``sides`` ``"true"``.

    Example:
        >>> [e.answer for e in reading_examples("train", ["answer"], "true",
        ...                                     {"rung": "observation"})[:3]]
        ['east', 'west', 'east']
    """
    if list(formats) != list(READING_FORMATS) or sides != "true":
        raise ConfigurationError(
            f"ladder reading examples: formats must be {list(READING_FORMATS)} and sides "
            f"'true', got {list(formats)} and {sides!r}"
        )
    if split not in SPLITS:
        raise ConfigurationError(f"ladder split must be one of {tuple(SPLITS)}, got {split!r}")
    rung = env_kwargs.get("rung", "constant")
    return [
        ReadingExample(
            position, {"task_id": position}, (), right_branches(rung, split, position)[0], "answer"
        )
        for position in range(len(SPLITS[split]))
    ]


SPEC = FamilySpec(
    name="ladder",
    label="Ladder",
    entries=(
        EnvEntry(
            "comprl/Ladder-v0",
            "comprl_gym.envs.ladder.env:LadderEnv",
            "known-answer forks with a perfect reward (rung: constant, observation, lesson, "
            "two_step): checks that a learner learns",
        ),
    ),
    expert="comprl_gym.envs.ladder.env:LadderExpert",
    action_grammar=(
        "You walk a dark hall through text. At each fork choose a branch, east or west. The "
        "right branch leads on to the staircase down ('>'); the wrong one is a dead end that "
        "ends the episode."
    ),
    extractor_focus=(
        "You record, naming the hall, which branch led on at each fork and what told the "
        "branches apart."
    ),
    lessons=FamilyLessons(reading_examples=reading_examples),
    held_out_split="test",
    training_split="train",
)

__all__ = ["READING_FORMATS", "RUNGS", "SIDES", "SPEC", "LadderEnv", "reading_examples"]
