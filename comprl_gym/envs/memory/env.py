"""The memory family's env: a MiniHack text env that plays one named dungeon per episode.

:class:`MemoryTextEnv` is :class:`~comprl_gym.envs.minihack.env.MiniHackTextEnv` (real
NetHack through minihack, the same words, actions and seeding) with the level chosen per
``reset``: the dungeon's des-file (:mod:`.dungeons`) is compiled into the running NetHack with
minihack's own ``update`` when it differs from the last one (about 15 ms; the two sides of a
variant are the only distinct levels of the fork).

Example:
    >>> import gymnasium as gym
    >>> import comprl_gym
    >>> env = gym.make("comprl/Memory-Fork-v0", split="test")
    >>> obs, info = env.reset(seed=0)
    >>> info["task_id"], info["env_family"], env.unwrapped.max_steps
    ('fork/vault-of-iron', 'memory', 5)
    >>> "staircase down:" in obs  # the stairs are out of sight
    False
    >>> env.close()
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from comprl_gym.core import ConfigurationError, EnvBackendError, Transition
from comprl_gym.envs.memory.dungeons import (
    BRANCH_LENGTH,
    VARIANTS,
    Dungeon,
    default_max_steps,
    des_file,
    dungeon,
    dungeon_des_file,
    pool,
    task_text,
)
from comprl_gym.envs.minihack.actions import DIRECTION_DELTAS
from comprl_gym.envs.minihack.env import MiniHackTextEnv
from comprl_gym.envs.minihack.language import cell_description

#: The minihack id the env is built on (its des-file is replaced on every reset that needs it).
BASE_TASK = "MiniHack-Memory-Hall-v0"
#: ``info["end_status"]`` of an episode that entered the branch without the stairs.
WRONG_BRANCH = "WRONG_BRANCH"
#: nle's words for the hall's cells next to the start (unlit room floor seen from beside it).
_HALL_FLOOR = "floor of a room"
#: What ``moves`` may be: every compass move listed, or only the moves not into a wall.
MOVE_LISTS = ("all", "open")
#: Words of nle's cell descriptions that block a move.
_BLOCKING = ("wall", "solid rock", "stone")


def _register_base_task() -> None:
    if BASE_TASK not in gym.registry:
        gym.register(
            id=BASE_TASK,
            entry_point="minihack.navigation:MiniHackNavigation",
            kwargs={"des_file": des_file("fork", "east")},
        )


class MemoryTextEnv(MiniHackTextEnv):
    """A dark fork whose stairs' side only experience can tell (see :mod:`.dungeons`).

    Args:
        variant: ``"fork"`` (recall: nothing in the observation tells the sides apart) or
            ``"landmark"`` (rule: a landmark beside the start marks the stairs' side).
        split: ``"train"`` (dungeons 0-191), ``"test"`` (the held-out dungeons 192-255),
            ``"test_large"`` (256 more held-out dungeons, 256-511, whose names share no word
            with the other pools') or ``"sealed"`` (256 more, 512-767, reserved for issue
            44's one final, pre-registered table: see :func:`.dungeons.pool`). An env of one
            split never plays a dungeon of another.
        branch_length: steps from the start to the stairs (default 3).
        max_steps: step limit (default ``branch_length + 2``: two spare steps).
        moves: which moves ``info["admissible_actions"]`` and the observation's "Allowed
            actions" list: ``"all"`` (the eight compass moves, as every MiniHack task) or
            ``"open"`` (only those not into a wall: at the fork, east and west). Any move is
            still accepted; ``"open"`` takes the wall-bumping out of the choice, so a policy
            blind to the side wins half the time and one that reads a lesson can win always
            (``benchmarks/experience_transfer/run.py`` uses it).
        observation_mode, render_mode: as :class:`MiniHackTextEnv`.

    ``reset(seed=s)`` plays the pool's dungeon number ``s mod len(pool)``;
    ``reset(options={"task_id": ...})`` plays a dungeon named by task id
    (``"fork/vault-of-marrow"``), name, or position in the pool (an int), and raises
    :class:`ConfigurationError` for a dungeon of the other split. ``info["task_id"]`` names
    the dungeon, the same on every visit. Privileged access for the expert: :attr:`dungeon`.

    The branch without the stairs is a dead end: the first step into it ends the episode,
    lost (``info["end_status"] == "WRONG_BRANCH"``; the last observation says which branch it
    was, after the choice is made), so one wrong choice loses whatever the step limit.
    """

    env_family = "memory"

    def __init__(
        self,
        variant: str = "fork",
        split: str = "train",
        branch_length: int = BRANCH_LENGTH,
        max_steps: int | None = None,
        moves: str = "all",
        observation_mode: str = "text",
        render_mode: str | None = None,
    ):
        if variant not in VARIANTS:
            raise ConfigurationError(f"variant must be one of {VARIANTS}, got {variant!r}")
        if moves not in MOVE_LISTS:
            raise ConfigurationError(f"moves must be one of {MOVE_LISTS}, got {moves!r}")
        self.pool = pool(split)
        des_file(variant, "east", "FOUNTAIN", "north", branch_length)  # checks branch_length
        _register_base_task()
        super().__init__(
            task=BASE_TASK,
            observation_mode=observation_mode,
            max_steps=max_steps or default_max_steps(branch_length),
            render_mode=render_mode,
        )
        self.variant = variant
        self.split = split
        self.branch_length = branch_length
        self.moves = moves
        self.dungeon: Dungeon | None = None
        self._des = des_file("fork", "east")

    def _choose(self, seed: int, options: dict[str, Any]) -> Dungeon:
        wanted = options.get("task_id")
        if wanted is None:
            return dungeon(self.pool[seed % len(self.pool)])
        if isinstance(wanted, int) and not isinstance(wanted, bool):
            if not 0 <= wanted < len(self.pool):
                raise ConfigurationError(
                    f"task_id {wanted} outside the {self.split} pool's 0..{len(self.pool) - 1}"
                )
            return dungeon(self.pool[wanted])
        chosen = dungeon(str(wanted))
        if chosen.index not in self.pool:
            raise ConfigurationError(
                f"{chosen.name} belongs to the {chosen.split} pool; this env plays the "
                f"{self.split} pool only"
            )
        return chosen

    def _reset_task(self, seed: int, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        chosen = self._choose(seed, options)
        des = dungeon_des_file(self.variant, chosen, self.branch_length)
        if des != self._des:
            self._require_open()
            self.nle_env.update(des)
            self._des = des
        self.dungeon = chosen
        self.renderer.task_description = task_text(self.variant, chosen)
        observation, extra = super()._reset_task(seed, {})
        self._check_level()
        self._start_x = int(self.nle_observation["blstats"][0])
        self.task = self.renderer.task_description
        self.task_id = chosen.task_id(self.variant)
        return observation, {**extra, "dungeon": chosen.name, "split": self.split}

    def _step_task(self, action: str) -> Transition:
        transition = super()._step_task(action)
        if transition.terminated or transition.invalid_action or self.dungeon is None:
            return transition
        x = int(self.nle_observation["blstats"][0])
        right = 1 if self.dungeon.side == "east" else -1
        if (x - self._start_x) * right >= 0:
            return transition
        wrong = "west" if right == 1 else "east"
        return Transition(
            observation=(
                f"Task: {self.task}\nYou walked into the {wrong} branch of {self.dungeon.name}, "
                "a dead end: the staircase down is not there. The episode is over: you lost."
            ),
            reward=transition.reward,
            terminated=True,
            info={"end_status": WRONG_BRANCH},
        )

    def _render(self, notes: str = "", first: bool = False) -> str:
        if self.moves == "open" and self.nle_observation:
            self._admissible = self._open_moves()
        return super()._render(notes, first=first)

    def _open_moves(self) -> list[str]:
        """The compass moves whose cell is not a wall (in the action set's order)."""
        obs = self.nle_observation
        x, y = int(obs["blstats"][0]), int(obs["blstats"][1])
        height, width = obs["glyphs"].shape
        open_moves = []
        for name in self.action_set.names:
            delta = DIRECTION_DELTAS.get(name)
            if delta is None:
                continue
            cx, cy = x + delta[0], y + delta[1]
            if not (0 <= cx < width and 0 <= cy < height):
                continue
            words = cell_description(obs["screen_descriptions"], cx, cy)
            if words and not any(block in words for block in _BLOCKING):
                open_moves.append(name)
        return open_moves

    def _check_level(self) -> None:
        """Fail loudly if NetHack is not playing the hall (a des-file that did not compile
        leaves minihack on a random level without a word)."""
        obs = self.nle_observation
        x, y = int(obs["blstats"][0]), int(obs["blstats"][1])
        sides = [cell_description(obs["screen_descriptions"], x + dx, y) for dx in (-1, 1)]
        if sides != [_HALL_FLOOR, _HALL_FLOOR]:
            raise EnvBackendError(
                f"NetHack is not playing the memory hall ({self.dungeon}): west and east of "
                f"the start are {sides}, not {_HALL_FLOOR!r}"
            )


__all__ = ["BASE_TASK", "MOVE_LISTS", "WRONG_BRANCH", "MemoryTextEnv"]
