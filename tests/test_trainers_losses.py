"""Losses, advantages and reward attribution of the trainers, against closed forms."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from comprl_gym.experience import ExperienceManager
from comprl_gym.trainers.advantages import group_advantages, grouped_advantages
from comprl_gym.trainers.config import ExperienceSettings, TrainConfig
from comprl_gym.trainers.extractor import (
    ExperienceExtractor,
    ExtractorGeneration,
    generation_reward,
)
from comprl_gym.trainers.losses import aggregate, cispo_loss, clipped_pg_loss
from comprl_gym.trainers.policy import TrainSample


# ------------------------------------------------------------------------------ advantages
def test_grpo_group_advantages_match_hand_computation():
    rewards = [1.0, 0.0, 0.0, 0.0]
    mean, std = 0.25, np.std(rewards, ddof=1)
    expected = [(r - mean) / (std + 1e-4) for r in rewards]
    np.testing.assert_allclose(group_advantages(rewards), expected)
    # Equal rewards carry no signal; a lone rollout neither.
    assert group_advantages([1.0, 1.0, 1.0]).tolist() == [0.0, 0.0, 0.0]
    assert group_advantages([1.0]).tolist() == [0.0]
    # Dr. GRPO: mean-centred only.
    assert group_advantages([1.0, 0.0], scale=False).tolist() == [0.5, -0.5]


def test_grouped_advantages_normalise_within_each_half_and_group():
    # Two task groups of K=4; in each, rollouts 0-1 had experience, 2-3 did not.
    rewards = [1, 1, 0, 1, 0, 1, 0, 0]
    groups = [0, 0, 0, 0, 1, 1, 1, 1]
    halves = [True, True, False, False] * 2
    adv = grouped_advantages(rewards, groups, halves)
    a = 0.5 / (np.sqrt(0.5) + 1e-4)
    np.testing.assert_allclose(adv, [0, 0, -a, a, -a, a, 0, 0])
    # One pool instead would credit the with-experience half for the experience.
    pooled = grouped_advantages(rewards, groups)
    assert pooled[0] > 0 and adv[0] == 0
    # Each half's advantages sum to zero.
    for g in (0, 1):
        for h in (True, False):
            cell = [adv[i] for i in range(8) if groups[i] == g and halves[i] == h]
            assert abs(sum(cell)) < 1e-9
    with pytest.raises(ValueError):
        grouped_advantages([1, 0], [0])


# ------------------------------------------------------------------------------ CISPO
def _random_case(seed=0, batch=3, tokens=5):
    g = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(batch, tokens, generator=g) * 3).requires_grad_()
    old = logp.detach() + torch.randn(batch, tokens, generator=g) * 1.5
    adv = torch.tensor([1.0, -0.5, 2.0])
    mask = torch.tensor([[0, 1, 1, 1, 0], [1, 1, 0, 0, 0], [0, 0, 1, 1, 1]], dtype=torch.float32)
    return logp, old, adv, mask


def test_cispo_loss_and_gradient_match_closed_form():
    logp, old, adv, mask = _random_case()
    eps_high = 2.0
    loss = cispo_loss(logp, old, adv, mask, eps_high=eps_high)
    loss.backward()
    w = torch.clamp(torch.exp(logp.detach() - old), max=eps_high)
    n = mask.sum()
    expected_loss = (-(w * adv[:, None] * logp.detach()) * mask).sum() / n
    torch.testing.assert_close(loss.detach(), expected_loss)
    # d loss / d logp = -w * A * mask / n: the weight is a constant (stop-gradient).
    expected_grad = -w * adv[:, None] * mask / n
    torch.testing.assert_close(logp.grad, expected_grad)
    # Some ratios were clipped, and those tokens still have a gradient (unlike PPO clipping).
    clipped = (torch.exp(logp.detach() - old) > eps_high) & (mask > 0)
    assert clipped.any()
    assert (logp.grad[clipped] != 0).all()
    torch.testing.assert_close(
        logp.grad[clipped], (-eps_high * adv[:, None].expand_as(mask) * mask / n)[clipped]
    )


def test_cispo_on_policy_is_reinforce():
    logp, _, adv, mask = _random_case(seed=1)
    cispo_loss(logp, logp.detach(), adv, mask).backward()
    torch.testing.assert_close(logp.grad, -adv[:, None] * mask / mask.sum())


def test_clipped_pg_zeroes_gradient_outside_the_trust_region():
    logp = torch.log(torch.tensor([[0.5, 0.5, 0.5]])).requires_grad_()
    # ratios 2.0 (clipped for A>0), 1.0, 0.5
    old = torch.log(torch.tensor([[0.25, 0.5, 1.0]]))
    mask = torch.ones(1, 3)
    loss, stats = clipped_pg_loss(logp, old, torch.tensor([1.0]), mask, 0.2, 0.28, "token")
    loss.backward()
    ratio = torch.exp(logp.detach() - old)
    assert logp.grad[0, 0] == 0  # ratio 2 > 1.28 with A>0: no gradient
    torch.testing.assert_close(logp.grad[0, 1:], -ratio[0, 1:] / 3)
    assert stats["clip_fraction"] == pytest.approx(1 / 3)


def test_masked_tokens_never_contribute():
    logp, old, adv, mask = _random_case(seed=2)
    poisoned = old.clone()
    poisoned[mask == 0] = 1e6  # env tokens with absurd values change nothing
    for fn in (cispo_loss, lambda *a: clipped_pg_loss(*a)[0]):
        a = fn(logp, old, adv, mask)
        b = fn(logp, poisoned, adv, mask)
        torch.testing.assert_close(a, b)
    loss = cispo_loss(logp, old, adv, mask)
    (grad,) = torch.autograd.grad(loss, logp)
    assert (grad[mask == 0] == 0).all()


def test_sequence_and_token_normalisation():
    per_token = torch.tensor([[1.0, 1.0, 1.0, 1.0], [4.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 0.0, 0.0]])
    assert aggregate(per_token, mask, "token").item() == pytest.approx(8 / 5)
    assert aggregate(per_token, mask, "sequence").item() == pytest.approx((1 + 4) / 2)


def test_train_sample_masks_the_prompt_and_env_text():
    sample = TrainSample.from_generation([1, 2, 3], [4, 5], advantage=1.0)
    assert sample.action_mask == [0, 0, 0, 1, 1]
    assert sample.num_action_tokens == 2


# ------------------------------------------------------------------------------ attribution
def _unit_vectors(n: int, seed: int) -> np.ndarray:
    vectors = np.random.default_rng(seed).normal(size=(n, 384)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _lessons(n: int) -> list[str]:
    return [f"## Title: lesson {i}\n## Description: d{i}\n## Content: c{i}" for i in range(n)]


def test_extractor_reward_is_mean_outcome_over_trajectories_that_used_it(tmp_path):
    manager = ExperienceManager(tmp_path / "store")
    one, two, three = manager.add(_lessons(3), vectors=_unit_vectors(3, 0))
    manager.report_outcome([one, two], won=True)
    manager.report_outcome([one], won=False)
    manager.report_outcome([one, one, three], won=False)  # shown twice in one trajectory: once
    manager.report_outcome([], won=True)
    # r(m) = (wins - losses) / uses, worked by hand: one 1 win 2 losses, two 1 win, three 1 loss.
    assert generation_reward(manager, [one], min_uses=1) == pytest.approx(-1 / 3)
    assert generation_reward(manager, [two], min_uses=1) == 1.0
    assert generation_reward(manager, [three], min_uses=1) == -1.0
    assert generation_reward(manager, [one, two], min_uses=1) == pytest.approx((-1 / 3 + 1) / 2)
    assert generation_reward(manager, [99], min_uses=1) is None  # unknown id: no reward
    assert generation_reward(manager, [one, two], min_uses=2) == pytest.approx(-1 / 3)
    manager.close()
    reopened = ExperienceManager(tmp_path / "store")  # the tallies are the store's: durable
    assert generation_reward(reopened, [one], min_uses=1) == pytest.approx(-1 / 3)
    reopened.close()


def test_extractor_training_weights_come_from_the_managers_one_policy(tmp_path):
    settings = ExperienceSettings(
        train_weight_power=1.0, train_cooldown_steps=2, min_uses=1, max_train_count=5
    )
    manager = ExperienceManager(tmp_path / "store", config=settings)
    a, b = manager.add(_lessons(2), vectors=_unit_vectors(2, 1))
    manager.report_outcome([a, b], won=True)
    extractor = ExperienceExtractor(None, None, manager, settings)
    extractor.pending = [
        ExtractorGeneration([1, 2], [3], None, [a], actor_step=1),
        ExtractorGeneration([1, 2], [4], None, [a, b], actor_step=1),
    ]

    def weights(step):
        return [sample.weight for _, sample in extractor.ready_samples(step)]

    # Never trained: (1 + 0) ** -1 = 1 for both.
    assert weights(5) == [1.0, 1.0]
    manager.mark_trained([a], actor_step=5)
    # Inside the cooldown (6 - 5 < 2) a has weight 0, and so has every sample that wrote it.
    assert weights(6) == []
    # After it: a was trained once, (1 + 1) ** -1 = 0.5; the pair takes its smallest weight.
    assert weights(7) == [0.5, 0.5]
    manager.mark_trained([a], actor_step=7)
    manager.mark_trained([b], actor_step=7)
    manager.mark_trained([b], actor_step=8)
    # a: (1 + 2) ** -1 = 1/3; b: (1 + 2) ** -1 = 1/3 but b is cooling down at step 9 (9 - 8 < 2).
    assert weights(9) == [pytest.approx(1 / 3)]
    assert weights(10) == [pytest.approx(1 / 3), pytest.approx(1 / 3)]
    manager.close()


# ------------------------------------------------------------------------------ config
def test_config_round_trips_through_yaml(tmp_path):
    import yaml

    cfg = TrainConfig.from_dict({"algorithm": "grpo", "actor": {"lr": 3e-6, "lora": {"r": 4}}})
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg.to_dict()))
    again = TrainConfig.from_yaml(path)
    assert again == cfg and again.actor.lora.r == 4
    from comprl_gym.core import ConfigurationError, DataError

    with pytest.raises(ConfigurationError, match="group_size must be even"):
        TrainConfig.from_dict({"algorithm": "complementary", "group_size": 3})
    with pytest.raises(ConfigurationError, match="actor.lr"):
        TrainConfig.from_dict({"actor": {"lr": "fast"}})
    with pytest.raises(DataError):
        TrainConfig.from_yaml(tmp_path / "missing.yaml")


# ------------------------------------------------------------------------------ policy step
def test_update_moves_probability_towards_positive_advantage_and_lora_trains_adapters_only():
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(1)
    from comprl_gym.trainers.config import LoraSettings, ModelSettings
    from comprl_gym.trainers.losses import token_logprobs
    from comprl_gym.trainers.policy import PolicyOptimizer

    for lora in (False, True):
        torch.manual_seed(0)
        settings = ModelSettings(
            model="tiny", lr=1e-2, max_grad_norm=0, lora=LoraSettings(enabled=lora, r=4)
        )
        opt = PolicyOptimizer.from_settings(settings, loss="clipped", normalization="token")
        sample = TrainSample([5, 6, 7, 8, 9], [0, 0, 1, 1, 1], advantage=1.0)
        ids = torch.tensor([sample.input_ids])

        def completion_logp(opt=opt, ids=ids):
            with torch.no_grad():
                return token_logprobs(opt.model, ids, torch.ones_like(ids), logits_to_keep=3).sum()

        frozen = {k: v.clone() for k, v in opt.model.named_parameters() if not v.requires_grad}
        before = completion_logp()
        stats = opt.update([sample])
        assert stats["tokens"] == 3 and stats["samples"] == 1
        assert completion_logp() > before
        if lora:
            assert frozen and all(
                torch.equal(frozen[k], v) for k, v in opt.model.named_parameters() if k in frozen
            )
            merged = opt.trainable_state_dict()
            assert "model.embed_tokens.weight" in merged and not any("lora" in k for k in merged)
        # A zero advantage is no signal: no step is taken at all.
        state = {k: v.clone() for k, v in opt.model.state_dict().items()}
        assert opt.update([TrainSample([5, 6, 7], [0, 1, 1], advantage=0.0)])["samples"] == 0
        assert all(torch.equal(state[k], v) for k, v in opt.model.state_dict().items())
