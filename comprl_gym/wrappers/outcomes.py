"""OutcomeReporting: at the end of an episode, credit every experience it was shown.

The episode's ``info["experience_ids"]`` (set by the injection and search wrappers) are
reported to the manager once: ``uses += 1`` and ``wins += won`` for each.

Example:
    >>> import tempfile, gymnasium as gym, comprl_gym
    >>> from comprl_gym.experience import ExperienceManager
    >>> from comprl_gym.wrappers import ExperienceInjection, OutcomeReporting
    >>> manager = ExperienceManager(tempfile.mkdtemp())
    >>> [eid] = manager.add(["## Title: Stairs\\n## Description: rooms\\n## Content: walk to the '>'"], env_family="minihack")
    >>> inner = ExperienceInjection(gym.make("comprl/MiniHack-Room-5x5-v0", max_steps=1), manager)
    >>> env = OutcomeReporting(inner, manager)
    >>> _ = env.reset(seed=0)
    >>> *_, truncated, info = env.step("wait")
    >>> truncated, (manager.get_one(eid).uses, manager.get_one(eid).wins)
    (True, (1, 0))
    >>> env.close(); manager.close()
"""

from __future__ import annotations

import logging
from typing import Any

import gymnasium as gym

from comprl_gym.experience.access import ExperienceAccess

logger = logging.getLogger(__name__)


class OutcomeReporting(gym.Wrapper):
    """Report won/lost for ``info["experience_ids"]`` once per episode, when it ends."""

    def __init__(self, env: gym.Env, manager: ExperienceAccess):
        super().__init__(env)
        self.manager = manager
        self._reported = True

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        self._reported = False
        return self.env.reset(seed=seed, options=options)

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        observation, reward, terminated, truncated, info = self.env.step(action)
        if (terminated or truncated) and not self._reported:
            self._reported = True
            ids = info.get("experience_ids") or []
            if ids:
                try:
                    self.manager.report_outcome(ids, bool(info.get("won", False)))
                except Exception:  # a store hiccup must not end the actor's episode
                    logger.exception("could not report the episode outcome to the manager")
        return observation, reward, terminated, truncated, info
