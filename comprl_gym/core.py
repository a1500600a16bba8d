"""The text-environment contract every ``comprl/*`` environment keeps.

An LLM agent reads a string and writes a string. :class:`TextEnv` fixes everything around
that exchange so that agents, wrappers and trainers can treat MiniHack, ALFWorld, WebShop and
SWE-bench alike:

* observations and actions are ``str`` (:class:`UnicodeText` spaces);
* ``info`` always carries the keys in :data:`INFO_KEYS`;
* a malformed or inadmissible action never raises: it costs a step, earns no reward, sets
  ``info["invalid_action"]`` and the observation says what is allowed;
* ``reset(seed=s)`` gives the same task and the same dynamics in any process;
* ``render_mode="ansi"`` returns the current text view.

A family implements three hooks, :meth:`TextEnv._reset_task`, :meth:`TextEnv._step_task` and
:meth:`TextEnv.admissible_actions`; the base class does the bookkeeping.

Example:
    >>> import gymnasium as gym
    >>> import comprl_gym
    >>> env = gym.make("comprl/MiniHack-Room-5x5-v0")
    >>> obs, info = env.reset(seed=0)
    >>> sorted(k for k in comprl_gym.INFO_KEYS if k in info) == sorted(comprl_gym.INFO_KEYS)
    True
    >>> obs, reward, terminated, truncated, info = env.step("nort")
    >>> info["invalid_action"]
    True
    >>> env.close()
"""

from __future__ import annotations

import difflib
import re
import string
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces

#: The name of an env family (``info["env_family"]``); the families are listed by their specs
#: (:mod:`comprl_gym.families`).
EnvFamily = str

#: Keys present in ``info`` after every ``reset`` and ``step`` of every comprl env.
INFO_KEYS: tuple[str, ...] = (
    "task",
    "task_id",
    "env_family",
    "admissible_actions",
    "won",
    "score",
    "step",
    "invalid_action",
)

#: Longest observation a comprl env may emit (characters).
MAX_OBSERVATION_CHARS = 1 << 20
#: Longest action the action space describes. Longer actions are still accepted as input and
#: answered as invalid, never with an exception.
MAX_ACTION_CHARS = 8192

_SAMPLE_CHARSET = string.ascii_letters + string.digits + string.punctuation + " "


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------
class ComprlGymError(Exception):
    """Base class of every error comprl-gym raises on purpose."""


class ConfigurationError(ComprlGymError, ValueError):
    """A constructor argument, id or option is wrong; the message says which and why."""


class DataError(ComprlGymError):
    """A data file is missing or corrupt; the message names the file and what is wrong."""

    def __init__(self, path: Any, problem: str, hint: str | None = None):
        self.path = str(path)
        self.problem = problem
        message = f"{self.path}: {problem}"
        if hint:
            message += f" ({hint})"
        super().__init__(message)


class EnvBackendError(ComprlGymError, RuntimeError):
    """The process behind an env (NetHack, a container, a game engine) died or misbehaved."""


class DependencyMissingError(ComprlGymError, ImportError):
    """An optional package is needed for this feature; the message says what to install."""

    def __init__(self, package: str, feature: str, extra: str | None = None):
        hint = f'pip install "comprl-gym[{extra}]"' if extra else f"pip install {package}"
        super().__init__(f"{feature} needs the package {package!r}; install it with: {hint}")


def require(module: str, feature: str, extra: str | None = None) -> Any:
    """Import ``module`` or raise :class:`DependencyMissingError` naming what to install."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise DependencyMissingError(module.split(".")[0], feature, extra) from exc


# --------------------------------------------------------------------------------------------
# Spaces
# --------------------------------------------------------------------------------------------
class UnicodeText(spaces.Text):
    """A :class:`gymnasium.spaces.Text` that contains any Python ``str`` up to ``max_length``.

    Gymnasium's ``Text`` only admits characters of a fixed charset; game text and model output
    contain arbitrary unicode. Sampling still draws from printable ASCII.

    Example:
        >>> UnicodeText(16).contains("héllo → wörld")
        True
    """

    def __init__(self, max_length: int, seed: int | np.random.Generator | None = None):
        super().__init__(max_length=max_length, min_length=0, charset=_SAMPLE_CHARSET, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"UnicodeText({self.max_length})"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, UnicodeText) and other.max_length == self.max_length


class _SharedTextBatch(Sequence[str]):
    """The strings of a batch of envs, decoded from shared memory when read.

    Gymnasium's ``AsyncVectorEnv`` reads its shared-memory observations once, at start-up,
    and relies on the result being a live view (true of numpy arrays, not of a tuple of
    strings). This sequence is that live view; ``copy.deepcopy`` (what ``copy=True`` does)
    freezes it into a plain tuple.
    """

    def __init__(self, shared_memory: Any, n: int, max_length: int):
        self._data = np.frombuffer(shared_memory.get_obj(), dtype=np.int32).reshape(n, max_length)

    def __len__(self) -> int:
        return len(self._data)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(len(self))))
        row = self._data[index]
        end = np.flatnonzero(row == -1)
        row = row[: end[0]] if end.size else row
        return row.astype("<u4").tobytes().decode("utf-32-le")

    def __deepcopy__(self, memo: dict[int, Any]) -> tuple[str, ...]:
        return tuple(self)

    def __eq__(self, other: Any) -> bool:
        return tuple(self) == tuple(other) if isinstance(other, Sequence) else NotImplemented

    def __repr__(self) -> str:
        return repr(tuple(self))


def _register_vector_support() -> None:
    """Let ``AsyncVectorEnv`` share :class:`UnicodeText` observations through shared memory.

    Gymnasium writes ``Text`` into shared memory as charset indices, which cannot hold
    unicode, and reads it back once. We store code points (-1 ends a string) and read through
    :class:`_SharedTextBatch`.
    """
    import multiprocessing as mp

    from gymnasium.vector.utils import shared_memory as sm

    @sm.create_shared_memory.register(UnicodeText)
    def _create(space: UnicodeText, n: int = 1, ctx: Any = mp) -> Any:
        return ctx.Array(np.dtype(np.int32).char, n * (space.max_length + 1))

    @sm.read_from_shared_memory.register(UnicodeText)
    def _read(space: UnicodeText, shared_memory: Any, n: int = 1) -> _SharedTextBatch:
        return _SharedTextBatch(shared_memory, n, space.max_length + 1)

    @sm.write_to_shared_memory.register(UnicodeText)
    def _write(space: UnicodeText, index: int, value: str, shared_memory: Any) -> None:
        size = space.max_length + 1
        dest = np.frombuffer(shared_memory.get_obj(), dtype=np.int32)
        codes = np.frombuffer(value[: space.max_length].encode("utf-32-le"), dtype="<u4")
        dest[index * size : index * size + codes.size] = codes
        dest[index * size + codes.size] = -1


_register_vector_support()


# --------------------------------------------------------------------------------------------
# The contract
# --------------------------------------------------------------------------------------------
@dataclass
class Transition:
    """What a family's :meth:`TextEnv._step_task` returns for one accepted or refused action.

    Attributes:
        observation: the text shown to the agent.
        reward: reward for this step.
        terminated: the task was won or lost.
        won: the task's success criterion holds.
        score: the task's own metric in ``[0, 1]``.
        invalid_action: the action was malformed or inadmissible (nothing happened).
        info: extra family-specific ``info`` entries.
    """

    observation: str
    reward: float = 0.0
    terminated: bool = False
    won: bool = False
    score: float = 0.0
    invalid_action: bool = False
    info: dict[str, Any] = field(default_factory=dict)


def normalize_action_text(action: str) -> str:
    """Lower-case, trim and fold runs of white space, underscores and hyphens into one space.

    Example:
        >>> normalize_action_text("  South_West ")
        'south west'
    """
    folded = action.replace("_", " ").replace("-", " ").strip().lower()
    return " ".join(folded.split())


#: Control characters (except tab and newline), DEL, C1 controls and lone surrogates.
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
_VISIBLE = {c: f"\\x{c:02x}" for c in [*range(0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0)]}
_VISIBLE.update(dict.fromkeys(range(0xD800, 0xE000), "\ufffd"))


def action_text(action: Any) -> str | None:
    """An action as the text an env reads: bytes decoded (invalid UTF-8 replaced), numpy
    strings as ``str``; ``None`` for anything that is not text.

    Example:
        >>> action_text(b"north"), action_text("go"), action_text(3)
        ('north', 'go', None)
    """
    if isinstance(action, bytes):
        action = action.decode("utf-8", errors="replace")
    if isinstance(action, np.str_):
        action = str(action)
    return action if isinstance(action, str) else None


def printable_text(text: str | bytes) -> str:
    r"""``text`` as printable text: what every comprl env shows an agent (and a terminal).

    Invalid UTF-8 (and lone surrogates) become U+FFFD; a CRLF line end becomes a newline;
    every other control character (NUL, the ESC that starts a terminal escape sequence, a lone
    carriage return, DEL, C1 controls) is written as its ``\xNN`` escape, so the agent still
    sees it and no terminal acts on it. Tabs and newlines stay.

    Example:
        >>> printable_text(b"ok\x00\xff \x1b[2J\r\n")
        'ok\\x00\ufffd \\x1b[2J\n'
        >>> printable_text("col\tcol\nline")
        'col\tcol\nline'
    """
    if isinstance(text, bytes | bytearray):
        text = bytes(text).decode("utf-8", errors="replace")
    if not _UNPRINTABLE.search(text):
        return text
    return text.replace("\r\n", "\n").translate(_VISIBLE)


def invalid_action_message(action: str, reason: str, allowed: list[str] | None) -> str:
    """The observation an agent sees after an invalid action: what was wrong, what is allowed.

    Example:
        >>> print(invalid_action_message("nort", "unknown action", ["north", "south"]))
        Invalid action 'nort': unknown action. Did you mean 'north'?
        Allowed actions: north, south
    """
    shown = action if len(action) <= 80 else action[:77] + "..."
    message = f"Invalid action {shown!r}: {reason}."
    if allowed:
        close = difflib.get_close_matches(normalize_action_text(action), allowed, n=1, cutoff=0.6)
        if close:
            message += f" Did you mean {close[0]!r}?"
        message += "\nAllowed actions: " + ", ".join(allowed)
    return message


class TextEnv(gym.Env[str, str]):
    """Base class of every comprl environment: text in, text out, one ``info`` contract.

    Subclasses set :attr:`env_family` and implement :meth:`_reset_task`, :meth:`_step_task`
    and :meth:`admissible_actions`. They may override :meth:`render_text` for a richer
    ``ansi`` view. Everything else (step counting, truncation at ``max_steps``, the info keys,
    rejecting non-strings, over-long and empty actions, seeding) lives here.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 4}
    env_family: ClassVar[EnvFamily]

    def __init__(self, max_steps: int, render_mode: str | None = None):
        if max_steps < 1:
            raise ConfigurationError(f"max_steps must be at least 1, got {max_steps}")
        if render_mode not in (None, "ansi"):
            raise ConfigurationError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        self.max_steps = max_steps
        self.render_mode = render_mode
        self.observation_space = UnicodeText(MAX_OBSERVATION_CHARS)
        self.action_space = UnicodeText(MAX_ACTION_CHARS)
        self.task: str = ""
        self.task_id: str = ""
        self._step_count = 0
        self._won = False
        self._score = 0.0
        self._last_observation = ""
        self._episode_over = False

    # ---- hooks ------------------------------------------------------------------------------
    def _reset_task(self, seed: int, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """Start a new episode; set :attr:`task` and :attr:`task_id`.

        ``seed`` is always an int: the one passed to ``reset`` or one drawn from
        :attr:`np_random`, so a sequence of resets after ``reset(seed=s)`` is reproducible.
        Returns the first observation and extra ``info`` entries.
        """
        raise NotImplementedError

    def _step_task(self, action: str) -> Transition:
        """Apply one non-empty action string (at most :data:`MAX_ACTION_CHARS` long)."""
        raise NotImplementedError

    def admissible_actions(self) -> list[str] | None:
        """The actions valid now, or ``None`` for an open-ended action space."""
        raise NotImplementedError

    def render_text(self) -> str:
        """The ``ansi`` view; by default the last observation."""
        return self._last_observation

    # ---- gymnasium API ------------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        episode_seed = seed if seed is not None else int(self.np_random.integers(0, 2**31 - 1))
        self._step_count = 0
        self._won = False
        self._score = 0.0
        self._episode_over = False
        observation, extra = self._reset_task(episode_seed, dict(options or {}))
        observation = printable_text(observation)
        self._last_observation = observation
        return observation, self._info(invalid_action=False, extra=extra)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        text = action_text(action)
        if text is None:
            transition = self._refuse(
                repr(action), f"actions are strings, got {type(action).__name__}"
            )
        elif not text.strip():
            transition = self._refuse(text, "the action is empty")
        elif len(text) > MAX_ACTION_CHARS:
            transition = self._refuse(
                text, f"the action is longer than {MAX_ACTION_CHARS} characters"
            )
        else:
            transition = self._step_task(text)
        self._step_count += 1
        self._won = self._won or transition.won
        self._score = transition.score if not transition.invalid_action else self._score
        observation = self._last_observation = printable_text(transition.observation)
        terminated = transition.terminated
        truncated = not terminated and self._step_count >= self.max_steps
        self._episode_over = terminated or truncated
        info = self._info(invalid_action=transition.invalid_action, extra=transition.info)
        return observation, float(transition.reward), terminated, truncated, info

    def render(self) -> str | None:  # type: ignore[override]
        if self.render_mode == "ansi":
            return self.render_text()
        return None

    # ---- helpers ----------------------------------------------------------------------------
    def _refuse(self, action: str, reason: str) -> Transition:
        """The transition for an action that is not accepted: nothing happens, reward 0."""
        message = invalid_action_message(action, reason, self.admissible_actions())
        return Transition(observation=message, score=self._score, invalid_action=True)

    def _info(self, invalid_action: bool, extra: dict[str, Any]) -> dict[str, Any]:
        info = {
            "task": self.task,
            "task_id": self.task_id,
            "env_family": self.env_family,
            "admissible_actions": self.admissible_actions(),
            "won": self._won,
            "score": float(self._score),
            "step": self._step_count,
            "invalid_action": invalid_action,
        }
        info.update(extra)
        return info
