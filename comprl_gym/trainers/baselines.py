"""The paper's ablations behind the same interface as Complementary RL.

* :class:`StaticExperienceTrainer` — the extractor writes experiences but is never trained
  (frozen weights); the actor learns with them (paper: 0.59 on the 3-task mix).
* :class:`ExperienceOnlyTrainer` — the actor is frozen; only the extractor learns, from the
  outcomes of the fixed actor (paper: 0.33).

Example:
    >>> from comprl_gym.trainers import ExperienceOnlyTrainer, StaticExperienceTrainer
    >>> StaticExperienceTrainer.trains_extractor, ExperienceOnlyTrainer.trains_actor
    (False, False)
"""

from __future__ import annotations

from comprl_gym.trainers.base import Trainer


class StaticExperienceTrainer(Trainer):
    """Actor trained with experience from a frozen extractor."""

    algorithm = "static_experience"
    uses_experience = True
    trains_actor = True
    trains_extractor = False


class ExperienceOnlyTrainer(Trainer):
    """Extractor trained on the outcomes of a frozen actor."""

    algorithm = "experience_only"
    uses_experience = True
    trains_actor = False
    trains_extractor = True
