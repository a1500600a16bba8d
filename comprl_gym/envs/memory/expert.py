"""The memory family's expert: an oracle that knows each dungeon's side from the generator.

:class:`MemoryExpert` is privileged (it reads ``env.unwrapped.dungeon``, which the text never
shows) and walks straight down the stairs' branch: ``branch_length`` moves, within the step
limit. It is the upper bound a perfect lesson allows, not a player of the text.

Example:
    >>> import gymnasium as gym
    >>> import comprl_gym
    >>> from comprl_gym.agents import make_agent
    >>> env = gym.make("comprl/Memory-Landmark-v0", split="test")
    >>> obs, info = env.reset(seed=5)
    >>> agent = make_agent("expert", env)
    >>> agent.reset(info["task"], info)
    >>> while not (info["won"] or info["step"] >= env.unwrapped.max_steps):
    ...     obs, reward, terminated, truncated, info = env.step(agent.act(obs, info))
    >>> info["won"], info["step"]
    (True, 3)
    >>> env.close()
"""

from __future__ import annotations

from typing import Any


class MemoryExpert:
    """Walks towards the side the generator put the stairs on."""

    def __init__(self, env: Any):
        self.env = env

    def reset(self, task: str, info: dict[str, Any]) -> None:
        """Nothing to remember: the side is read from the env each step."""

    def act(self, observation: str, info: dict[str, Any]) -> str:
        """The stairs' side (``"east"`` or ``"west"``) of the dungeon being played."""
        return self.env.unwrapped.dungeon.side


__all__ = ["MemoryExpert"]
