"""comprl-gym: train and evaluate LLM agents that learn from experience.

``import comprl_gym`` registers every ``comprl/*`` gymnasium id (see
:mod:`comprl_gym.registration`).
"""

from comprl_gym.core import (
    INFO_KEYS,
    ComprlGymError,
    ConfigurationError,
    DataError,
    DependencyMissingError,
    EnvBackendError,
    TextEnv,
    Transition,
    UnicodeText,
)
from comprl_gym.registration import ENV_TABLE, register_envs

__version__ = "0.1.0"

register_envs()

__all__ = [
    "ENV_TABLE",
    "INFO_KEYS",
    "ComprlGymError",
    "ConfigurationError",
    "DataError",
    "DependencyMissingError",
    "EnvBackendError",
    "TextEnv",
    "Transition",
    "UnicodeText",
    "__version__",
    "register_envs",
]
