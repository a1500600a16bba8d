"""MiniHack text environments (``comprl/MiniHack-*``): real NetHack through minihack and nle.

Example:
    >>> import gymnasium as gym
    >>> import comprl_gym
    >>> env = gym.make("comprl/MiniHack-v0", task="MiniHack-Room-5x5-v0")
    >>> obs, info = env.reset(seed=3)
    >>> info["env_family"], "north" in info["admissible_actions"]
    ('minihack', True)
    >>> env.close()
"""

from comprl_gym.envs.minihack.env import MiniHackTextEnv

__all__ = ["MiniHackTextEnv"]
