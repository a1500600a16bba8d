"""Trainers: GRPO, Complementary RL and the paper's baselines, with their losses.

Example:
    >>> from comprl_gym.trainers import TrainConfig, make_trainer
    >>> TrainConfig().algorithm
    'complementary'
"""

from __future__ import annotations

from typing import Any

from comprl_gym.agents.base import load_object
from comprl_gym.trainers.config import (
    ExperienceSettings,
    LoraSettings,
    ModelSettings,
    TrainConfig,
)

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

#: Trainer class of each ``TrainConfig.algorithm``, as ``module:Class``.
TRAINERS = {
    "grpo": "comprl_gym.trainers.grpo:GRPOTrainer",
    "complementary": "comprl_gym.trainers.complementary:ComplementaryRLTrainer",
    "static_experience": "comprl_gym.trainers.baselines:StaticExperienceTrainer",
    "experience_only": "comprl_gym.trainers.baselines:ExperienceOnlyTrainer",
}


def make_trainer(config: TrainConfig) -> Any:
    """The trainer ``config.algorithm`` names, built from ``config``."""
    return load_object(TRAINERS[config.algorithm])(config)


def __getattr__(name: str) -> Any:
    # Trainer classes import torch; keep ``import comprl_gym.trainers`` cheap.
    for path in TRAINERS.values():
        if path.endswith(":" + name):
            return load_object(path)
    raise AttributeError(name)
