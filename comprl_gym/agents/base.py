"""The :class:`Agent` protocol and the agents that need no model.

Write your own agent against the protocol: ``reset`` is called once per episode with the
task and the first ``info``; ``act`` maps an observation to an action string.

Example:
    >>> import gymnasium as gym
    >>> import comprl_gym
    >>> from comprl_gym.agents import RandomAgent
    >>> env = gym.make("comprl/MiniHack-Room-5x5-v0")
    >>> obs, info = env.reset(seed=1)
    >>> agent = RandomAgent(seed=1)
    >>> agent.reset(info["task"], info)
    >>> agent.act(obs, info) in info["admissible_actions"]
    True
"""

from __future__ import annotations

import importlib
import inspect
import random
from typing import Any, Protocol, runtime_checkable

from comprl_gym.core import ConfigurationError
from comprl_gym.families import family_spec
from comprl_gym.utils import load_object


@runtime_checkable
class Agent(Protocol):
    """Anything that plays a comprl env: ``reset`` per episode, then ``act`` per step."""

    def reset(self, task: str, info: dict[str, Any]) -> None:
        """Start an episode on ``task`` (``info`` is the one ``env.reset`` returned)."""

    def act(self, observation: str, info: dict[str, Any]) -> str:
        """Return the next action for ``observation``."""


class RandomAgent:
    """Picks uniformly among ``info["admissible_actions"]`` (or a fixed fallback list)."""

    def __init__(self, seed: int | None = None, fallback_actions: list[str] | None = None):
        self._rng = random.Random(seed)
        self._fallback = fallback_actions or ["submit"]

    def reset(self, task: str, info: dict[str, Any]) -> None:
        """Nothing to remember between episodes."""

    def act(self, observation: str, info: dict[str, Any]) -> str:
        actions = info.get("admissible_actions") or self._fallback
        return self._rng.choice(list(actions))


def make_agent(spec: str, env: Any, seed: int | None = None) -> Agent:
    """Build an agent from a short spec.

    * ``random``: uniform over the admissible actions;
    * ``expert``: the expert of the env's family (its :class:`~comprl_gym.families.FamilySpec`);
    * ``hf:MODEL``, ``vllm:MODEL``, ``openai:URL#MODEL`` (optionally ``?temperature=0&...``):
      an :class:`~comprl_gym.agents.llm_agent.LLMAgent` on that backend;
    * ``module:Class``: your own agent class, called with ``seed=seed`` when its constructor
      takes a ``seed`` and one is given (a scripted agent that draws then draws alike for
      every caller that shares the seed: a stream's arms, common random numbers), else with
      no arguments.
    """
    if spec == "random":
        return RandomAgent(seed=seed)
    if spec == "expert":
        family = family_spec(env.unwrapped.env_family)
        if family is None or not family.expert:
            name = env.unwrapped.env_family
            raise ConfigurationError(f"no expert agent for env family {name!r}")
        return load_object(family.expert)(env)
    if ":" in spec and not spec.startswith(("hf:", "llm:", "vllm:", "openai:")):
        factory = load_object(spec)
        if seed is not None and "seed" in inspect.signature(factory).parameters:
            return factory(seed=seed)
        return factory()
    llm_specs = importlib.import_module("comprl_gym.agents.llm_agent")
    return llm_specs.agent_from_spec(spec, env, seed=seed)
