"""GRPO: the outcome-reward baseline, no experience.

K rollouts per task, advantages normalised within each task group, one clipped
policy-gradient step on the actor's own tokens per iteration.

Example:
    >>> from comprl_gym.trainers import GRPOTrainer
    >>> GRPOTrainer.uses_experience, GRPOTrainer.trains_actor
    (False, True)
"""

from __future__ import annotations

from comprl_gym.trainers.base import Trainer


class GRPOTrainer(Trainer):
    """Group Relative Policy Optimization on sparse outcome rewards (won = 1, else 0)."""

    algorithm = "grpo"
    uses_experience = False
    trains_actor = True
    trains_extractor = False
