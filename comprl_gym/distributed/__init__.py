"""Scale-out on Ray: env worker pools, inference engines, a shared experience service and
data-parallel updates. Ray is imported only by the modules that need it (never by
``import comprl_gym``); :class:`DistributedConfig` is the one switch, ``distributed:`` in a
training YAML.
"""

from comprl_gym.distributed.config import DistributedConfig

__all__ = ["DistributedConfig"]
