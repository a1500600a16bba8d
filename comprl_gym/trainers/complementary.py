"""Complementary RL: a policy actor and an experience extractor that co-evolve.

Per iteration and task group: K rollouts, K/2 with experience (injected at reset and
``search_and_ask[...]`` answered by the extractor) and K/2 without; advantages normalised
within each half; one clipped policy-gradient step of the actor on its own tokens (env
text masked). Each finished episode credits the experiences it used in the store (+1 win,
-1 loss, reported by the experience wrapper). In the background the extractor (separate
weights) writes new experiences from the finished groups through the ExperienceManager, takes a CISPO step on generations whose experiences
have a reward (training-count-aware weights, cooldown), and merges the store every
``merge_interval_steps`` actor steps. The actor never waits for any of it.

Example:
    >>> from comprl_gym.trainers import ComplementaryRLTrainer
    >>> ComplementaryRLTrainer.uses_experience, ComplementaryRLTrainer.trains_extractor
    (True, True)
"""

from __future__ import annotations

from comprl_gym.trainers.base import Trainer


class ComplementaryRLTrainer(Trainer):
    """Actor (GRPO, grouped advantages within each half) + extractor (CISPO), co-evolving."""

    algorithm = "complementary"
    uses_experience = True
    trains_actor = True
    trains_extractor = True
