"""SWE-bench as a text env: instances, Docker and bubblewrap sandboxes, swebench grading.

Example:
    >>> from comprl_gym.envs.swebench import load_instances
    >>> len(load_instances()) >= 12
    True
"""

from comprl_gym.envs.swebench.env import SWEBenchConfig, SWEBenchEnv
from comprl_gym.envs.swebench.instances import load_instances

__all__ = ["SWEBenchConfig", "SWEBenchEnv", "load_instances"]
