"""Play one episode of an env with an agent and summarise many.

Example:
    >>> import gymnasium as gym
    >>> import comprl_gym
    >>> from comprl_gym.agents import make_agent
    >>> env = gym.make("comprl/MiniHack-Room-5x5-v0")
    >>> result = run_episode(env, make_agent("expert", env), seed=0)
    >>> result.won
    True
"""

from __future__ import annotations

import fnmatch
import time
from dataclasses import asdict, dataclass
from typing import Any

import gymnasium as gym

from comprl_gym.agents.base import Agent
from comprl_gym.core import ConfigurationError
from comprl_gym.registration import ENV_TABLE


@dataclass
class EpisodeResult:
    """The outcome of one episode."""

    env_id: str
    seed: int
    task_id: str
    won: bool
    score: float
    steps: int
    invalid_actions: int
    total_reward: float
    wall_time_s: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_episode(
    env: gym.Env, agent: Agent, seed: int, options: dict[str, Any] | None = None
) -> EpisodeResult:
    """Reset ``env`` with ``seed``, let ``agent`` act until the episode ends."""
    start = time.perf_counter()
    observation, info = env.reset(seed=seed, options=options)
    agent.reset(info["task"], info)
    total_reward, invalid, done = 0.0, 0, False
    while not done:
        action = agent.act(observation, info)
        observation, reward, terminated, truncated, info = env.step(action)
        total_reward += float(reward)
        invalid += int(info["invalid_action"])
        done = terminated or truncated
    return EpisodeResult(
        env_id=env.spec.id if env.spec else type(env.unwrapped).__name__,
        seed=seed,
        task_id=str(info["task_id"]),
        won=bool(info["won"]),
        score=float(info["score"]),
        steps=int(info["step"]),
        invalid_actions=invalid,
        total_reward=total_reward,
        wall_time_s=time.perf_counter() - start,
    )


def expand_env_ids(patterns: list[str]) -> list[str]:
    """Expand shell-style patterns (``comprl/MiniHack-*``) against the registered ids."""
    ids: list[str] = []
    for pattern in patterns:
        matched = [env_id for env_id in ENV_TABLE if fnmatch.fnmatchcase(env_id, pattern)]
        if not matched:
            raise ConfigurationError(
                f"no comprl id matches {pattern!r}; `comprl-gym envs` lists them"
            )
        ids.extend(m for m in matched if m not in ids)
    return ids
