"""Trainers: Complementary RL (``complementary.py``: the algorithm, top to bottom), GRPO and
the paper's baselines as presets of it, and the infrastructure they share (``base.py``'s
``Trainer``, put together from one file per concern: see its docstring).

Example:
    >>> from comprl_gym.trainers import TrainConfig, trainer_class
    >>> TrainConfig().algorithm
    'complementary'
    >>> trainer_class("grpo").__name__
    'GRPOTrainer'
"""

from __future__ import annotations

from typing import Any

from comprl_gym.trainers.config import (
    ExperienceSettings,
    LoraSettings,
    ModelSettings,
    TrainConfig,
)
from comprl_gym.utils import load_object

__all__ = [
    "ComplementaryRLTrainer",
    "ExperienceOnlyTrainer",
    "ExperienceSettings",
    "GRPOTrainer",
    "LoraSettings",
    "ModelSettings",
    "StaticExperienceTrainer",
    "TRAINERS",
    "TrainConfig",
    "make_trainer",
]

#: Trainer class of each built-in ``TrainConfig.algorithm``, as ``module:Class``.
TRAINERS = {
    "complementary": "comprl_gym.trainers.complementary:ComplementaryRLTrainer",
    "grpo": "comprl_gym.trainers.complementary:GRPOTrainer",
    "static_experience": "comprl_gym.trainers.complementary:StaticExperienceTrainer",
    "experience_only": "comprl_gym.trainers.complementary:ExperienceOnlyTrainer",
}


def trainer_class(algorithm: str) -> Any:
    """The trainer class of ``algorithm``: a name of :data:`TRAINERS`, or ``module:Class``
    for a trainer of your own (a :class:`~comprl_gym.trainers.base.Trainer` subclass)."""
    from comprl_gym.core import ConfigurationError
    from comprl_gym.trainers.base import Trainer

    if algorithm not in TRAINERS and ":" not in algorithm:
        raise ConfigurationError(
            f"unknown algorithm {algorithm!r}: one of {sorted(TRAINERS)}, or module:Class"
        )
    try:
        cls = load_object(TRAINERS.get(algorithm, algorithm))
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(f"algorithm {algorithm!r} cannot be loaded: {exc}") from exc
    if not (isinstance(cls, type) and issubclass(cls, Trainer)):
        raise ConfigurationError(f"algorithm {algorithm!r} is not a Trainer subclass: {cls!r}")
    return cls


def make_trainer(config: TrainConfig) -> Any:
    """The trainer ``config.algorithm`` names, built from ``config``."""
    return trainer_class(config.algorithm)(config)


def __getattr__(name: str) -> Any:
    # Trainer classes import torch; keep ``import comprl_gym.trainers`` cheap.
    for path in TRAINERS.values():
        if path.endswith(":" + name):
            return load_object(path)
    raise AttributeError(name)
