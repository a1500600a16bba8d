"""The ladder's env: a hall of forks whose right branch a known rule decides.

Every task is a named hall with one fork (two for ``two_step``); ``east`` or ``west`` is the
whole action space, and the reward is perfect: 1 for reaching the staircase down (every choice
right), 0 for the first wrong branch, which ends the episode. What decides the right branch is
the rung's (:data:`RUNGS`):

* ``constant``: always the west branch (the second action listed, which SmolLM2 does not
  pick untrained); nothing in the observation matters.
* ``observation``: a lamp over the fork, red for east and blue for west: a mapping from what
  is seen to what is done, learnt in the weights.
* ``lesson``: a note from an earlier visitor names the branch, in the memory family's lesson
  sentence: the answer is given in context, and only reading it wins.
* ``two_step``: two forks in a row, each with its lamp; the reward comes at the end only.

Example:
    >>> env = LadderEnv("two_step", split="test")
    >>> obs, info = env.reset(seed=0)
    >>> info["task_id"], info["admissible_actions"], info["right_branches"]
    ('ladder/two_step/test/0', ['east', 'west'], ['east', 'west'])
    >>> print(obs)
    You stand at the first fork of the Hall of Rusted Mirrors. A red lamp hangs over it.
    >>> env.step("east")[1:3], env.step("west")[1:3]
    ((0.0, False), (1.0, True))
"""

from __future__ import annotations

import random
from typing import Any

from comprl_gym.core import ConfigurationError, TextEnv, Transition, invalid_action_message

#: The rungs, easiest first.
RUNGS = ("constant", "observation", "lesson", "two_step")
SIDES = ("east", "west")
#: The lamp's colour for each side (``observation`` and ``two_step``).
LAMPS = {"east": "red", "west": "blue"}
_ADJECTIVES = (
    "Quiet", "Amber", "Broken", "Hollow", "Silver", "Sunken", "Weeping", "Ashen",
    "Frozen", "Gilded", "Iron", "Mossy", "Pale", "Rusted", "Salt", "Twisted",
)  # fmt: skip
_NOUNS = (
    "Lanterns", "Bells", "Crowns", "Wells", "Masks", "Ravens", "Candles", "Keys",
    "Mirrors", "Roots", "Spires", "Thorns",
)  # fmt: skip
#: Every hall's name; ``train`` plays the first 160, ``test`` the last 32 (held out: no
#: training task shares a name with them).
HALLS = tuple(
    f"Hall of {a} {n}"
    for a, n in sorted(
        ((a, n) for a in _ADJECTIVES for n in _NOUNS),
        key=lambda pair: random.Random(f"{pair[0]} {pair[1]}").random(),
    )
)
SPLITS = {"train": HALLS[:160], "test": HALLS[160:]}


def right_branches(rung: str, split: str, position: int) -> list[str]:
    """The right branch at each fork of task ``position`` of ``split`` (one fork, two for
    ``two_step``): east for ``constant``; otherwise alternating sides by position, so each
    split is half east (and, for ``two_step``, its second fork a fixed coin of the task);
    west for ``constant``.

    Example:
        >>> right_branches("observation", "train", 0), right_branches("observation", "train", 1)
        (['east'], ['west'])
    """
    if rung == "constant":
        return ["west"]
    first = SIDES[position % 2]
    if rung != "two_step":
        return [first]
    return [first, random.Random(f"{split}-{position}").choice(SIDES)]


class LadderEnv(TextEnv):
    """One rung of the known-answer ladder (see the module docstring).

    Args:
        rung: one of :data:`RUNGS`.
        split: ``"train"`` (160 halls) or ``"test"`` (32 held-out halls).
        max_steps: step limit (default: one step per fork and one spare).

    ``reset(seed=s)`` plays hall ``s mod len(split)``; ``reset(options={"task_id": n})`` plays
    position ``n`` of the split (an int) or a task id. ``info["right_branches"]`` names the
    answer at each fork (the rung's known answer, for scoring and supervision).
    """

    env_family = "ladder"

    def __init__(self, rung: str = "constant", split: str = "train", max_steps: int | None = None):
        if rung not in RUNGS:
            raise ConfigurationError(f"rung must be one of {RUNGS}, got {rung!r}")
        if split not in SPLITS:
            raise ConfigurationError(f"split must be one of {tuple(SPLITS)}, got {split!r}")
        forks = 2 if rung == "two_step" else 1
        # One spare step: a malformed action costs a step and is not the end of the episode.
        super().__init__(max_steps=max_steps or forks + 1)
        self.rung, self.split = rung, split
        self.answers: list[str] = []
        self.fork = 0

    def _position(self, seed: int, options: dict[str, Any]) -> int:
        wanted = options.get("task_id", seed % len(SPLITS[self.split]))
        if isinstance(wanted, str):
            prefix = f"ladder/{self.rung}/{self.split}/"
            if not wanted.startswith(prefix) or not wanted[len(prefix) :].isdigit():
                raise ConfigurationError(f"task_id {wanted!r} is not a task of {prefix}N")
            wanted = int(wanted[len(prefix) :])
        if not isinstance(wanted, int) or not 0 <= wanted < len(SPLITS[self.split]):
            raise ConfigurationError(
                f"task_id {wanted!r} outside the {self.split} split's "
                f"0..{len(SPLITS[self.split]) - 1}"
            )
        return wanted

    def _reset_task(self, seed: int, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        position = self._position(seed, options)
        self.hall = SPLITS[self.split][position]
        self.answers = right_branches(self.rung, self.split, position)
        self.fork = 0
        self.task = f"You are in the {self.hall}. Reach the staircase down."
        self.task_id = f"ladder/{self.rung}/{self.split}/{position}"
        fork = "the first fork" if self.rung == "two_step" else "a fork"
        observation = f"You stand at {fork} of the {self.hall}." + self._cue()
        return observation, {"right_branches": list(self.answers)}

    def _cue(self) -> str:
        side = self.answers[self.fork]
        if self.rung in ("observation", "two_step"):
            return f" A {LAMPS[side]} lamp hangs over it."
        if self.rung == "lesson":
            return (
                " A note left by an earlier visitor reads: In the "
                f"{self.hall} the staircase down is at the end of the {side} branch."
            )
        return ""

    def _step_task(self, action: str) -> Transition:
        choice = action.strip().lower()
        if choice not in SIDES:
            message = invalid_action_message(action, "choose a branch", list(SIDES))
            return Transition(observation=message, invalid_action=True)
        if choice != self.answers[self.fork]:
            return Transition(
                observation=f"The {choice} branch is a dead end. The episode is over: you lost.",
                terminated=True,
            )
        self.fork += 1
        if self.fork == len(self.answers):
            return Transition(
                observation="You reach the staircase down. You won.",
                reward=1.0,
                terminated=True,
                won=True,
                score=1.0,
            )
        return Transition(
            observation=f"You walk down the {choice} branch to a second fork." + self._cue()
        )

    def admissible_actions(self) -> list[str]:
        return list(SIDES)


class LadderExpert:
    """The oracle: takes the right branch at each fork (read from the env, privileged)."""

    def __init__(self, env: Any):
        self.env = env

    def reset(self, task: str, info: dict[str, Any]) -> None:
        """Nothing to remember: the answer is read from the env each step."""

    def act(self, observation: str, info: dict[str, Any]) -> str:
        ladder = self.env.unwrapped
        return ladder.answers[ladder.fork]


__all__ = [
    "HALLS",
    "LAMPS",
    "RUNGS",
    "SIDES",
    "SPLITS",
    "LadderEnv",
    "LadderExpert",
    "right_branches",
]
