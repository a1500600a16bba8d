"""The typed messages of a served comprl env, on OpenEnv's base classes.

An action is one string (``text``); an observation carries the env's text, its ``info``
(made JSON-safe) and gymnasium's ``terminated``/``truncated`` besides OpenEnv's ``done`` and
``reward``.

Example:
    >>> from comprl_gym.serving.models import ComprlAction, ComprlObservation
    >>> ComprlAction(text="north").model_dump()
    {'metadata': {}, 'text': 'north'}
    >>> ComprlObservation(text="You see a wall.", reward=0.0).done
    False
"""

from __future__ import annotations

from typing import Any

from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

from comprl_gym.core import MAX_ACTION_CHARS

#: The longest action text the protocol accepts. Longer messages are refused as bad requests
#: before they reach an env; shorter ones that exceed the env's own limit
#: (:data:`~comprl_gym.core.MAX_ACTION_CHARS`) are answered by the env as invalid actions, as
#: they are in process.
MAX_REQUEST_ACTION_CHARS = 8 * MAX_ACTION_CHARS


class ComprlAction(Action):
    """One action string for a comprl env."""

    text: str = Field(max_length=MAX_REQUEST_ACTION_CHARS, description="the action")


class ComprlObservation(Observation):
    """What a comprl env answers to ``reset`` or ``step``."""

    env_id: str | None = Field(default=None, description="the id this session plays")
    text: str = Field(default="", description="the observation text")
    info: dict[str, Any] = Field(default_factory=dict, description="the env's info, JSON-safe")
    terminated: bool = Field(default=False, description="the episode ended in the task")
    truncated: bool = Field(default=False, description="the episode ran out of steps")


class ComprlState(State):
    """A session's state: which id it plays and whether its episode is over."""

    env_id: str | None = Field(default=None, description="the id this session plays")
    done: bool = Field(default=False, description="the current episode is over")
