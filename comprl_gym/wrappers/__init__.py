"""Gymnasium wrappers for comprl envs."""

from comprl_gym.wrappers.experience import ExperienceAugmentedEnv

__all__ = ["ExperienceAugmentedEnv"]
