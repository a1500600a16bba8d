"""Gymnasium wrappers for comprl envs: experience injection, the search_and_ask action,
outcome reporting, and ExperienceAugmentedEnv that composes the three."""

from comprl_gym.wrappers.experience import ExperienceAugmentedEnv
from comprl_gym.wrappers.injection import ExperienceInjection
from comprl_gym.wrappers.outcomes import OutcomeReporting
from comprl_gym.wrappers.search import SearchAndAskAction

__all__ = [
    "ExperienceAugmentedEnv",
    "ExperienceInjection",
    "OutcomeReporting",
    "SearchAndAskAction",
]
