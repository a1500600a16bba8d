"""A trainer variant from outside the package: one class and one config, nothing else.

The algorithm's hooks (``advantages``, ``actor_loss``, ...) are the extension points of
:mod:`comprl_gym.trainers.complementary`; ``algorithm: module:Class`` in the config picks the
class. The variant below is defined here, in a test module the package never imports.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from comprl_gym.core import ConfigurationError  # noqa: E402
from comprl_gym.trainers import TrainConfig, make_trainer  # noqa: E402
from comprl_gym.trainers.complementary import ComplementaryRLTrainer  # noqa: E402
from comprl_gym.trainers.losses import aggregate  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@dataclass(frozen=True)
class Reinforce:
    """Plain REINFORCE, ``-A log p`` per token with no ratio and no clip: a new loss."""

    def __call__(self, logp, old_logp, advantages, mask, *, num_tokens=None, num_sequences=None):
        per_token = -advantages.reshape(-1, 1) * logp
        return aggregate(per_token, mask, "sequence", num_tokens, num_sequences), {"calls": 1.0}


class SignTrainer(ComplementaryRLTrainer):
    """GRPO whose advantage is the sign of ``r - mean`` and whose loss is REINFORCE."""

    algorithm = "sign-grpo"
    uses_experience = False
    trains_extractor = False
    #: What each iteration's ``advantages`` hook returned (the test reads it).
    seen: list[tuple[list[float], list[float]]] = []

    def advantages(self, episodes, rewards):
        centred = super().advantages(episodes, rewards)
        signs = [float((a > 0) - (a < 0)) for a in centred]
        self.seen.append((list(rewards), signs))
        return signs

    def actor_loss(self):
        return Reinforce()


def _config(tmp_path, algorithm):
    return TrainConfig.from_dict(
        {
            "algorithm": algorithm,
            "seed": 0,
            "env_ids": ["comprl/MiniHack-Room-5x5-v0"],
            "iterations": 1,
            "groups_per_iteration": 2,
            "group_size": 4,
            "max_episode_steps": 3,
            "task_pool": 8,
            # The random tiny model never wins: invalid actions give the group a signal.
            "invalid_action_penalty": 0.5,
            "actor": {"model": "tiny", "lr": 1e-2, "max_new_tokens": 4},
            "output_dir": str(tmp_path / "run"),
            "eval_tasks": 0,
            "progress": False,
            "tensorboard": False,
        }
    )


def test_a_variant_written_outside_the_package_trains_with_its_own_hooks(tmp_path):
    SignTrainer.seen.clear()
    trainer = make_trainer(_config(tmp_path, f"{__name__}:SignTrainer"))
    try:
        assert type(trainer) is SignTrainer and isinstance(trainer.actor.loss, Reinforce)
        before = {k: v.clone() for k, v in trainer.actor.model.state_dict().items()}
        record = trainer.train_iteration()
        after = trainer.actor.model.state_dict()
    finally:
        trainer.close()
    ((rewards, signs),) = SignTrainer.seen
    # The hook's answer, by hand from the rewards it was given: the sign of r minus its
    # group's mean (two groups of four, in order).
    expected = []
    for group in (rewards[:4], rewards[4:]):
        mean = sum(group) / 4
        expected += [float((r > mean) - (r < mean)) for r in group]
    assert signs == expected and any(signs), "the groups carried no signal"
    # The step ran with those advantages and the new loss: samples with a nonzero sign train,
    # and REINFORCE reports no clipping (it has none), unlike the default surrogate.
    assert record["actor/samples"] == sum(1 for s in signs if s)
    assert record["actor/clip_fraction"] == 0.0
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_an_unknown_or_broken_algorithm_fails_at_start_with_its_name(tmp_path):
    with pytest.raises(ConfigurationError, match="unknown algorithm 'ppo'"):
        make_trainer(_config(tmp_path, "ppo"))
    with pytest.raises(ConfigurationError, match="cannot be loaded"):
        make_trainer(_config(tmp_path, f"{__name__}:NoSuchTrainer"))
    with pytest.raises(ConfigurationError, match="not a Trainer subclass"):
        make_trainer(_config(tmp_path, f"{__name__}:Reinforce"))
