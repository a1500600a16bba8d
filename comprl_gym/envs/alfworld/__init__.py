"""ALFWorld on alfworld's own TextWorld engine: official json_2.1.1 games or generated ones.

Example:
    >>> import gymnasium as gym
    >>> import comprl_gym
    >>> env = gym.make("comprl/ALFWorld-v0")  # generated games unless $ALFWORLD_DATA is set
"""

from comprl_gym.envs.alfworld.data import SPLITS, TASK_TYPES
from comprl_gym.envs.alfworld.env import ALFWorldEnv

__all__ = ["ALFWorldEnv", "SPLITS", "TASK_TYPES"]
