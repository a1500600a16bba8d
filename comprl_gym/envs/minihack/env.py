"""MiniHack as a text environment: real NetHack underneath, words on top.

:class:`MiniHackTextEnv` wraps one minihack task (``gym.make("MiniHack-...")``) in the
:class:`comprl_gym.core.TextEnv` contract. It requests only the nle observation keys the text
needs, seeds NetHack itself (``reset(seed=...)`` alone does not), renders each observation in
words (:mod:`.language`) and maps named actions onto the task's action set (:mod:`.actions`).

Example:
    >>> import gymnasium as gym
    >>> import comprl_gym
    >>> env = gym.make("comprl/MiniHack-Room-5x5-v0")
    >>> obs, info = env.reset(seed=0)
    >>> "staircase down" in obs
    True
    >>> obs, reward, terminated, truncated, info = env.step("south-east")
    >>> info["invalid_action"]
    False
    >>> env.close()
"""

from __future__ import annotations

import logging
from typing import Any

import gymnasium as gym
import numpy as np

from comprl_gym.core import (
    ConfigurationError,
    DependencyMissingError,
    EnvBackendError,
    TextEnv,
    Transition,
    invalid_action_message,
    require,
)
from comprl_gym.envs.minihack.actions import ActionSet, NamedAction
from comprl_gym.envs.minihack.language import ObservationRenderer, cell_description, decode_bytes
from comprl_gym.envs.minihack.layouts import register_layouts

logger = logging.getLogger(__name__)

#: The nle arrays the text (and the expert) read; asking for these only keeps steps cheap.
OBSERVATION_KEYS: tuple[str, ...] = (
    "glyphs",
    "chars",
    "blstats",
    "message",
    "screen_descriptions",
    "inv_strs",
    "inv_letters",
)
OBSERVATION_MODES = ("text", "text+map", "map", "compact")

_NAVIGATION_GOAL = "reach the staircase down (>)."
#: What each task family asks, by id prefix; the first match wins.
TASK_DESCRIPTIONS: tuple[tuple[str, str], ...] = (
    (
        "MiniHack-KeyRoom",
        "pick up the key, stand north, south, east or west of the locked door and 'apply' "
        "the key to unlock and open it, then reach the staircase down (>).",
    ),
    ("MiniHack-Room-Monster", "reach the staircase down (>); monsters are in the way."),
    ("MiniHack-Room-Trap", "reach the staircase down (>); avoid the traps."),
    ("MiniHack-Room-Ultimate", "reach the staircase down (>) in the dark past monsters and traps."),
    ("MiniHack-Room-Dark", "find the staircase down (>) in a dark room and reach it."),
    ("MiniHack-Corridor", "find the staircase down (>) through rooms and corridors and reach it."),
    ("MiniHack-MazeWalk", "find the way through the maze to the staircase down (>)."),
    ("MiniHack-MultiRoom", "go through the doors from room to room to the staircase down (>)."),
    ("MiniHack-Room", _NAVIGATION_GOAL),
)

_STEP_STATUS_WON = "TASK_SUCCESSFUL"


def task_description(task: str) -> str:
    """The instruction for a minihack task id, in words."""
    for prefix, text in TASK_DESCRIPTIONS:
        if task.startswith(prefix):
            return text[0].upper() + text[1:]
    return f"Complete the MiniHack task {task}; the episode ends when its goal is reached."


def nethack_seeds(seed: int) -> tuple[int, int]:
    """The NetHack core and display RNG seeds derived from one episode seed."""
    core, disp = np.random.SeedSequence(seed).generate_state(2, dtype=np.uint64).tolist()
    return core >> 2, disp >> 2  # NetHack takes a signed long


class MiniHackTextEnv(TextEnv):
    """A MiniHack task with text observations and named actions.

    Args:
        task: a minihack gymnasium id, e.g. ``"MiniHack-Room-5x5-v0"``, ``"MiniHack-River-v0"``.
        observation_mode: ``"text"`` (words), ``"text+map"`` (words and ASCII map), ``"map"``
            or ``"compact"`` (the words of ``"text"``, told once: see ``ObservationRenderer``).
        max_steps: step limit of an episode; ``None`` takes the task's own limit.
        render_mode: ``None`` or ``"ansi"`` (``render()`` returns map and status).
        **minihack_kwargs: passed to the minihack constructor (e.g. ``reward_lose=-1``).
            ``observation_keys`` is fixed by this env.

    Actions are the task's own, named in words: ``north`` ... ``north-west``, ``pick up``,
    ``apply`` (in KeyRoom: unlock and open the adjacent door with the key; stand north,
    south, east or west of the door), ``open <direction>``, ``kick <direction>``, ``search``.
    ``info["admissible_actions"]`` lists them. The reward is minihack's (1 when the task is
    done, a small penalty for steps that let no game time pass); ``score`` is 1 for a win.

    Privileged access for scripted agents: :attr:`nle_observation` holds copies of the
    current nle arrays; :attr:`nle_env` is the minihack env itself.
    """

    env_family = "minihack"

    def __init__(
        self,
        task: str = "MiniHack-Room-5x5-v0",
        observation_mode: str = "text",
        max_steps: int | None = None,
        render_mode: str | None = None,
        **minihack_kwargs: Any,
    ):
        require("minihack", "MiniHack environments", extra="minihack")
        register_layouts()  # this project's generated layouts are minihack task ids too
        if observation_mode not in OBSERVATION_MODES:
            raise ConfigurationError(
                f"observation_mode must be one of {OBSERVATION_MODES}, got {observation_mode!r}"
            )
        if (
            not isinstance(task, str)
            or not task.startswith("MiniHack-")
            or task not in gym.registry
        ):
            raise ConfigurationError(
                f"unknown minihack task {task!r}; any registered 'MiniHack-*' id works, "
                "e.g. 'MiniHack-Room-5x5-v0'"
            )
        if "observation_keys" in minihack_kwargs:
            raise ConfigurationError("observation_keys is fixed by MiniHackTextEnv")
        try:
            wrapped = gym.make(
                task, observation_keys=OBSERVATION_KEYS, disable_env_checker=True, **minihack_kwargs
            )
        except ModuleNotFoundError as exc:
            if "minigrid" in str(exc):
                raise DependencyMissingError("minigrid", f"the MiniHack task {task}") from exc
            raise
        except (TypeError, AttributeError, ValueError) as exc:
            raise ConfigurationError(f"minihack could not build {task!r}: {exc}") from exc
        self._wrapped = wrapped
        self.nle_env = wrapped.unwrapped
        # The task's own limit becomes ours; nle's is lifted so that it never quits a game
        # under us (a compound action such as "open north" takes two nle steps).
        task_limit = int(self.nle_env._max_episode_steps)
        self.nle_env._max_episode_steps = 1 << 40
        super().__init__(max_steps=max_steps or task_limit, render_mode=render_mode)
        self.task_name = task
        self.task_step_limit = task_limit
        self.action_set = ActionSet.from_nle_actions(self.nle_env.actions)
        from minihack.envs.keyroom import MiniHackKeyDoor

        # KeyRoom tasks turn "apply" into unlock-and-open-the-adjacent-door (minihack's own step).
        self._keyroom_apply = isinstance(self.nle_env, MiniHackKeyDoor)
        self._admissible = list(self.action_set.names)
        uses_items = "apply" in self.action_set or "pick up" in self.action_set
        self.renderer = ObservationRenderer(
            task_description(task),
            mode=observation_mode,
            show_inventory=uses_items,
            action_notes=self._action_notes(),
        )
        self.nle_observation: dict[str, np.ndarray] = {}
        self._closed = False

    # ---- TextEnv hooks ------------------------------------------------------------------------
    def _reset_task(self, seed: int, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self._require_open()
        core, disp = nethack_seeds(seed)
        try:
            minigrid_env = getattr(self.nle_env, "minigrid_env", None)
            if minigrid_env is not None:
                # MiniGrid-based layouts (MultiRoom) are drawn by a minigrid env that minihack
                # never seeds; seeding it here makes the layout follow the episode seed.
                minigrid_env.reset(seed=int(core % (2**31)))
            # Call nle's own seed: minihack's MiniGrid override fails on gymnasium 1.x.
            from nle.env.base import NLE

            NLE.seed(self.nle_env, core, disp, False)
            obs, _ = self.nle_env.reset()
        except Exception as exc:  # nle raises plain exceptions when NetHack misbehaves
            raise EnvBackendError(
                f"NetHack failed to start an episode of {self.task_name}: {exc}"
            ) from exc
        self._store(obs)
        self.task = task_description(self.task_name)
        self.task_id = f"{self.task_name}/seed-{seed}"
        return self._render(first=True), {"end_status": "RUNNING"}

    def _step_task(self, action: str) -> Transition:
        self._require_open()
        if self._episode_over:
            return Transition(
                observation="The episode is over; call reset() to start a new one.",
                terminated=True,
                won=self._won,
                score=self._score,
                invalid_action=True,
            )
        named = self.action_set.parse(action)
        if named is None:
            return self._refuse(action, "not an action of this task")
        blocked = self._blocked_reason(named)
        if blocked:
            return Transition(
                observation=invalid_action_message(action, blocked, self._admissible),
                score=self._score,
                invalid_action=True,
            )
        total_reward, done, info = 0.0, False, {}
        try:
            for index in named.indices:
                obs, reward, done, _, info = self.nle_env.step(index)
                total_reward += float(reward)
                if done:
                    break
        except Exception as exc:
            raise EnvBackendError(
                f"NetHack failed during {action!r} in {self.task_name}: {exc!r}; "
                "the game is lost, make a new env"
            ) from exc
        status = info.get("end_status")
        status_name = getattr(status, "name", str(status))
        won = status_name == _STEP_STATUS_WON
        if done:
            # NetHack has quit: its arrays are blank. Keep the last live view for render().
            observation = self._render_final(obs, won, status_name)
        else:
            self._store(obs)
            observation = self._render()
        return Transition(
            observation=observation,
            reward=total_reward,
            terminated=bool(done),
            won=won,
            score=1.0 if won else 0.0,
            info={"end_status": status_name},
        )

    def admissible_actions(self) -> list[str]:
        return list(self._admissible)

    def render_text(self) -> str:
        if not self.nle_observation:
            return ""
        return "\n".join(
            (
                self.renderer.ascii_map(self.nle_observation),
                self.renderer.status_line(self.nle_observation),
            )
        )

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._wrapped.close()
        super().close()

    # ---- helpers ------------------------------------------------------------------------------
    def _action_notes(self) -> str:
        """One line explaining the actions whose effect is not obvious from their name."""
        notes = []
        if "apply" in self.action_set and self._keyroom_apply:
            notes.append(
                "'apply' uses the key from your inventory on the closed door next to you "
                "(stand north, south, east or west of it): it unlocks and opens it"
            )
        if "pick up" in self.action_set:
            notes.append("'pick up' takes what you stand on")
        if "open north" in self.action_set:
            notes.append("'open <direction>' opens a door (walking into one opens it too)")
        if "kick north" in self.action_set:
            notes.append("'kick <direction>' can break a locked door")
        if "search" in self.action_set:
            notes.append("'search' looks for hidden doors and corridors next to you")
        return ("Action notes: " + "; ".join(notes) + ".") if notes else ""

    def _require_open(self) -> None:
        if self._closed or getattr(self.nle_env.nethack, "_pynethack", None) is None:
            raise EnvBackendError(
                f"the NetHack process of {self.task_name} is closed or dead; make a new env"
            )

    def _store(self, obs: dict[str, np.ndarray]) -> None:
        # nle reuses these buffers on the next step: keep copies.
        self.nle_observation = {key: value.copy() for key, value in obs.items()}

    def _render(self, notes: str = "", first: bool = False) -> str:
        return self.renderer.render(self.nle_observation, self._admissible, notes, first=first)

    def _render_final(self, obs: dict[str, np.ndarray], won: bool, status_name: str) -> str:
        outcome = (
            "The task is done: you won." if won else f"The game is over ({status_name.lower()})."
        )
        lines = [f"Task: {self.renderer.task_description}", outcome]
        message = (
            decode_bytes(obs["message"]).strip()
            or decode_bytes(self.nle_observation["message"]).strip()
        )
        if message:
            lines.append(f"Last message: {message}")
        lines.append(self.renderer.status_line(self.nle_observation))
        return "\n".join(lines)

    def _blocked_reason(self, named: NamedAction) -> str | None:
        """Why an action would wedge minihack, if it would.

        minihack's KeyRoom ``apply`` unlocks the first closed door around the agent and then
        walks into it until it opens; a door diagonal to the agent never opens that way (NetHack
        forbids diagonal moves through doors), which would loop forever.
        """
        if named.name != "apply" or not self._keyroom_apply:
            return None
        if self.nle_env.key_in_inventory("key") is None:
            return None
        obs = self.nle_observation
        x, y = int(obs["blstats"][0]), int(obs["blstats"][1])
        for dy in (-1, 0, 1):
            for dx in (-1, 0, 1):
                if "closed door" in cell_description(obs["screen_descriptions"], x + dx, y + dy):
                    if dx and dy:
                        return (
                            "the closed door is diagonal to you; stand "
                            + "north, south, east or west of it before applying the key"
                        )
                    return None
        return None


__all__ = ["MiniHackTextEnv", "OBSERVATION_KEYS", "task_description"]
