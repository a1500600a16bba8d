"""Losses, advantages and reward attribution of the trainers, against closed forms."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from comprl_gym.experience import ExperienceManager
from comprl_gym.trainers.advantages import group_advantages, grouped_advantages
from comprl_gym.trainers.config import ExperienceSettings, TrainConfig
from comprl_gym.trainers.credit import generation_reward
from comprl_gym.trainers.extractor import ExperienceExtractor, ExtractorGeneration
from comprl_gym.trainers.losses import ClippedPG, aggregate, cispo_loss, clipped_pg_loss
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


def _three_ratio_case():
    """Sequence 1: ratios 0.5, 1.0, 2.0 (below, inside, above the clip), A = 2; sequence 2:
    ratio 2.0 on its one active token, A = -1. Every current probability is 0.5."""
    logp = torch.log(torch.full((2, 3), 0.5)).requires_grad_()
    old = torch.log(torch.tensor([[1.0, 0.5, 0.25], [0.25, 0.5, 0.5]]))
    adv = torch.tensor([2.0, -1.0])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    return logp, old, adv, mask


def test_cispo_clip_gradients_by_hand_below_inside_and_above_the_clip():
    logp, old, adv, mask = _three_ratio_case()
    # Reference defaults: eps_low = eps_high = 0.1, seq-mean-token-mean.
    loss = cispo_loss(logp, old, adv, mask)
    loss.backward()
    # w = clip(r, 0.9, 1.1) = 0.9, 1.0, 1.1 | 1.1. d loss / d logp = -w A / (tokens of the
    # sequence) / (sequences): -0.9*2/3/2, -1*2/3/2, -1.1*2/3/2 | -1.1*(-1)/1/2.
    expected = torch.tensor([[-0.3, -1 / 3, -1.1 / 3], [0.55, 0.0, 0.0]])
    torch.testing.assert_close(logp.grad, expected)
    # value: log 0.5 = -0.693147; (2 * 3 * 0.693147 / 3 - 1.1 * 0.693147) / 2
    log2 = 0.6931471805599453
    assert loss.item() == pytest.approx((2 * log2 - 1.1 * log2) / 2)


def test_cispo_trl_variant_caps_the_ratio_from_above_only():
    logp, old, adv, mask = _three_ratio_case()
    # TRL: w = min(r, epsilon_high) with epsilon_high = 5, i.e. eps_high = 4 here.
    cispo_loss(logp, old, adv, mask, eps_high=4.0, variant="trl").backward()
    expected = torch.tensor([[-0.5 * 2 / 6, -2 / 6, -2 * 2 / 6], [1.0, 0.0, 0.0]])
    torch.testing.assert_close(logp.grad, expected)
    logp.grad = None
    # a cap below 2 clips the ratio-2 tokens; the ratio-0.5 token keeps 0.5 (no lower clip)
    cispo_loss(logp, old, adv, mask, eps_high=0.5, variant="trl").backward()
    expected = torch.tensor([[-0.5 * 2 / 6, -2 / 6, -1.5 * 2 / 6], [0.75, 0.0, 0.0]])
    torch.testing.assert_close(logp.grad, expected)
    with pytest.raises(ValueError):
        cispo_loss(logp, old, adv, mask, variant="ppo")


def test_cispo_token_normalisation_by_hand():
    logp, old, adv, mask = _three_ratio_case()
    cispo_loss(logp, old, adv, mask, normalization="token").backward()
    # four active tokens: -w A / 4
    expected = torch.tensor([[-0.9 * 2 / 4, -2 / 4, -1.1 * 2 / 4], [1.1 / 4, 0.0, 0.0]])
    torch.testing.assert_close(logp.grad, expected)


def test_cispo_loss_and_gradient_match_closed_form_on_random_ratios():
    logp, old, adv, mask = _random_case()
    loss = cispo_loss(logp, old, adv, mask, eps_low=0.2, eps_high=0.3)
    loss.backward()
    w = torch.clamp(torch.exp(logp.detach() - old), 0.8, 1.3)
    per_seq = mask.sum(-1, keepdim=True)
    expected_grad = -w * adv[:, None] * mask / per_seq / 3
    torch.testing.assert_close(logp.grad, expected_grad)
    # Clipped tokens (both sides) still have a gradient, unlike PPO clipping.
    ratio = torch.exp(logp.detach() - old)
    clipped = ((ratio > 1.3) | (ratio < 0.8)) & (mask > 0)
    assert clipped.any() and (logp.grad[clipped] != 0).all()


def test_cispo_on_policy_is_reinforce():
    logp, _, adv, mask = _random_case(seed=1)
    cispo_loss(logp, logp.detach(), adv, mask, normalization="token").backward()
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
    # r = (wins - losses) / uses, worked by hand: one 1 win 2 losses, two 1 win, three 1 loss.
    assert generation_reward(manager, [one], min_uses=1) == pytest.approx(-1 / 3)
    assert generation_reward(manager, [two], min_uses=1) == 1.0
    assert generation_reward(manager, [three], min_uses=1) == -1.0
    # A generation that wrote two entries: pooled over its (trajectory, entry) uses, as the
    # reference sums per request_id: 2 wins, 2 losses -> 0.
    assert generation_reward(manager, [one, two], min_uses=1) == 0.0
    assert generation_reward(manager, [99], min_uses=1) is None  # unknown id: no reward
    assert generation_reward(manager, [one, two], min_uses=5) is None  # 4 uses so far
    # Counted from a baseline (a merged entry's inherited tallies): one (3 uses, 1 win) -> none.
    assert generation_reward(manager, [one, two], baseline=(3, 1)) == 1.0
    assert generation_reward(manager, [one], baseline=(3, 1)) is None
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


def test_extractor_advantage_is_r_minus_the_batch_mean_times_the_weight(tmp_path):
    # the training-count weight the reference's config describes: power 0.5, cooldown 1 step
    # (its launched pipeline never records a training, so the default here is 0 and 0)
    settings = ExperienceSettings(
        min_uses=1, extractor_batch_size=8, train_weight_power=0.5, train_cooldown_steps=1
    )
    manager = ExperienceManager(tmp_path / "store", config=settings)
    a, b, c = manager.add(_lessons(3), vectors=_unit_vectors(3, 2))
    manager.report_outcome([a], won=True)  # r = +1
    manager.report_outcome([b], won=False)  # r = -1
    for won in (True, True, False):
        manager.report_outcome([c], won=won)  # r = (2 - 1) / 3 = 1/3
    extractor = ExperienceExtractor(None, None, manager, settings)
    extractor.pending = [
        ExtractorGeneration([1], [2], [-0.5], [a], actor_step=1),
        ExtractorGeneration([1], [3], [-0.5], [b], actor_step=1),
        ExtractorGeneration([1], [4], [-0.5], [c], actor_step=1),
    ]
    ready = extractor.ready_samples(2)
    # mean r = (1 - 1 + 1/3) / 3 = 1/9: A = 8/9, -10/9, 2/9
    assert [s.advantage for _, s in ready] == pytest.approx([8 / 9, -10 / 9, 2 / 9])
    assert [s.weight for _, s in ready] == [1.0, 1.0, 1.0]
    assert [s.meta["reward"] for _, s in ready] == pytest.approx([1, -1, 1 / 3])
    # the sampler's log-probs are not used as old log-probs: the trainer recomputes them
    assert all(s.old_logprobs is None for _, s in ready)
    manager.mark_trained([c], actor_step=2)
    # inside c's cooldown (2 - 2 < 1) c has weight 0 and leaves the batch: mean r = 0
    assert [s.advantage for _, s in extractor.ready_samples(2)] == [1.0, -1.0]
    # after it, c weighs (1 + 1) ** -0.5 and is back in the batch (A unchanged)
    ready = extractor.ready_samples(3)
    assert [s.weight for _, s in ready] == pytest.approx([1.0, 1.0, 2**-0.5])
    assert [s.advantage for _, s in ready] == pytest.approx([8 / 9, -10 / 9, 2 / 9])
    # a batch of one has no baseline to compare with: advantage 0
    extractor.settings = ExperienceSettings(min_uses=1, extractor_batch_size=1)
    assert [s.advantage for _, s in extractor.ready_samples(3)] == [0.0]
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
    from comprl_gym.trainers import make_trainer

    # The trainer refuses at start, before any model loads: its halves need an even K.
    with pytest.raises(ConfigurationError, match="group_size must be even"):
        make_trainer(TrainConfig.from_dict({"algorithm": "complementary", "group_size": 3}))
    with pytest.raises(ConfigurationError, match="unknown algorithm 'ppo'"):
        make_trainer(TrainConfig.from_dict({"algorithm": "ppo"}))
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
        opt = PolicyOptimizer.from_settings(settings, loss=ClippedPG(normalization="token"))
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


def test_lora_top_layers_adapts_only_the_last_blocks_and_the_gradient_stops_there():
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(1)
    from comprl_gym.core import ConfigurationError
    from comprl_gym.trainers.config import LoraSettings, ModelSettings
    from comprl_gym.trainers.policy import PolicyOptimizer

    settings = ModelSettings(
        model="tiny", lr=1e-2, lora=LoraSettings(enabled=True, r=4, top_layers=1)
    )
    opt = PolicyOptimizer.from_settings(settings, loss=ClippedPG(normalization="token"))
    blocks = opt.model.config.num_hidden_layers  # the tiny model has 2
    adapted = {n for n, p in opt.model.named_parameters() if p.requires_grad}
    assert adapted and all(f"layers.{blocks - 1}." in n and "lora_" in n for n in adapted)
    # Every linear map of the last block is adapted ("all-linear"), none of the others.
    assert {n.split(f"layers.{blocks - 1}.")[1].split(".lora_")[0] for n in adapted} >= {
        "self_attn.q_proj",
        "mlp.down_proj",
    }
    assert opt.update([TrainSample([5, 6, 7, 8, 9], [0, 0, 1, 1, 1], advantage=1.0)])["samples"]
    assert all(p.grad is None for p in opt.model.parameters())  # zeroed after the step
    with pytest.raises(ConfigurationError, match="top_layers"):
        PolicyOptimizer.from_settings(
            ModelSettings(model="tiny", lora=LoraSettings(enabled=True, top_layers=blocks + 1))
        )


# ------------------------------------------------------------------------------ actor samples
def _episode(n_turns: int, reward: float, group: int = 0, with_experience: bool = False):
    """A hand-made multi-turn episode: each turn adds 2 prompt tokens and samples 2 tokens."""
    from comprl_gym.rollouts import Trajectory, Turn

    ids: list[int] = []
    turns = []
    for step in range(n_turns):
        prompt = ids + [900 + step, 901]
        completion = [10 + step, 11 + step]
        turns.append(
            Turn(
                step,
                "",
                "a",
                prompt_token_ids=prompt,
                completion_token_ids=completion,
                completion_logprobs=[-1.0, -2.0],
                segment=0,
            )
        )
        ids = prompt + completion
    meta = {"group": group, "with_experience": with_experience}
    return Trajectory("e", "id", "f", "0", "", 0, turns=turns, score=reward, meta=meta)


def _actor_samples(episodes, uses_experience: bool, **overrides):
    """The algorithm's steps 4-5 (reward, grouped advantages, actor samples) without loading
    models: they read only the config and the episodes."""
    from types import SimpleNamespace

    from comprl_gym.trainers.complementary import ComplementaryRLTrainer as Algorithm

    cfg = TrainConfig.from_dict({"reward": "score", **overrides})
    stub = SimpleNamespace(config=cfg, uses_experience=uses_experience)
    rewards = [Algorithm.reward(stub, e) for e in episodes]
    return Algorithm.actor_samples(stub, episodes, Algorithm.advantages(stub, episodes, rewards))


def test_actor_advantages_are_r_minus_mean_within_each_group_half_by_default():
    # One task group, K=8: rollouts 0-3 without experience, 4-7 with (the reference's K/2).
    rewards = [1, 0, 0, 0, 1, 1, 0, 1]
    episodes = [_episode(1, r, with_experience=i >= 4) for i, r in enumerate(rewards)]
    samples = _actor_samples(episodes, uses_experience=True)
    # By hand: without-half mean 1/4 -> 3/4, -1/4, -1/4, -1/4; with-half mean 3/4 ->
    # 1/4, 1/4, -3/4, 1/4. No division by the std (reference method "mean").
    assert [s.advantage for s in samples] == [0.75, -0.25, -0.25, -0.25, 0.25, 0.25, -0.75, 0.25]
    scaled = _actor_samples(episodes, uses_experience=True, scale_advantages=True)
    a = 0.75 / (0.5 + 1e-4)  # std (ddof 1) of [1, 0, 0, 0] is 1/2
    assert scaled[0].advantage == pytest.approx(a)
    # positive_advantages_only: the same by hand, each negative one set to 0.
    positive = _actor_samples(episodes, uses_experience=True, positive_advantages_only=True)
    assert [s.advantage for s in positive] == [0.75, 0, 0, 0, 0.25, 0.25, 0, 0.25]
    config = TrainConfig()
    assert (config.clip_eps_low, config.clip_eps_high) == (0.2, 0.2)
    assert (config.sample_mode, config.loss_normalization) == ("trajectory", "sequence")


def test_an_actor_that_chose_among_listed_numbers_is_scored_over_them():
    """The actor's samples carry the tokens its replies were restricted to (choose_listed)
    and its sampling temperature, which ``score: sampled`` and ``choices`` read; a
    sequence whose turns chose among different sets is scored over their union, and one
    with a free reply over every token."""
    episodes = [_episode(2, 1.0), _episode(2, 0.0), _episode(1, 1.0)]
    for turn in episodes[0].turns + episodes[1].turns[:1]:
        turn.allowed_token_ids = [19, 20]
    episodes[1].turns[1].allowed_token_ids = [19, 20, 21]
    samples = _actor_samples(
        episodes, uses_experience=False, choose_listed_action=True, actor={"temperature": 10.0}
    )
    assert [s.allowed_token_ids for s in samples] == [(19, 20), (19, 20, 21), None]
    assert {s.temperature for s in samples} == {10.0}


def test_a_short_win_and_a_long_loss_weigh_the_same_per_trajectory():
    """seq-mean-token-mean: a win in 3 turns at +A and a loss in 8 turns at -A net zero."""
    episodes = [_episode(3, 1.0), _episode(8, 0.0)]  # one group: A = +1/2 and -1/2
    samples = _actor_samples(episodes, uses_experience=False)
    assert len(samples) == 2 and [s.num_action_tokens for s in samples] == [6, 16]
    assert [s.advantage for s in samples] == [0.5, -0.5]
    # The trained ids are the sampled ones.
    assert [i for i, m in zip(samples[0].input_ids, samples[0].action_mask) if m] == [
        10,
        11,
        11,
        12,
        12,
        13,
    ]

    def loss_and_grads(batch):
        width = max(len(s.input_ids) for s in batch)
        mask = torch.tensor(
            [s.action_mask + [0] * (width - len(s.action_mask)) for s in batch], dtype=torch.float32
        )
        logp = torch.full((len(batch), width), -1.0, requires_grad=True)
        adv = torch.tensor([s.advantage * s.weight for s in batch])
        loss, _ = clipped_pg_loss(logp, logp.detach(), adv, mask, normalization="sequence")
        loss.backward()
        return loss.item(), logp.grad.sum(dim=1)

    loss, grads = loss_and_grads(samples)
    # Ratio 1: loss = -(1/2)(+1/2 + -1/2) = 0; each trajectory's gradient mass is -A/2.
    assert loss == pytest.approx(0.0)
    assert grads.tolist() == pytest.approx([-0.25, 0.25])
    # Per-turn samples (the old way): 3 at +1/2 and 8 at -1/2 over 11 sequences:
    # loss = -(3 * 0.5 - 8 * 0.5) / 11 = 2.5 / 11, the long loss outweighs the short win.
    per_turn = _actor_samples(episodes, uses_experience=False, sample_mode="turn")
    assert len(per_turn) == 11
    loss, grads = loss_and_grads(per_turn)
    assert loss == pytest.approx(2.5 / 11)
    assert grads[:3].sum().item() == pytest.approx(-3 * 0.5 / 11)


def test_a_folded_trajectory_still_weighs_one():
    from comprl_gym.rollouts import Trajectory

    folded = _episode(4, 1.0)
    for turn in folded.turns[2:]:  # turns 2-3 in a new segment whose prompt restarts
        turn.segment = 1
        turn.prompt_token_ids = turn.prompt_token_ids[-6:]
    second = folded.turns[3]
    second.prompt_token_ids = folded.turns[2].prompt_token_ids + [12, 13, 903, 901]
    plain = _episode(2, 0.0)
    assert isinstance(folded, Trajectory) and folded.num_segments == 2
    samples = _actor_samples([folded, plain], uses_experience=False)
    assert [s.weight for s in samples] == [0.5, 0.5, 1.0]
    assert sum(s.num_action_tokens for s in samples[:2]) == 8  # every sampled token, once


def test_old_logprobs_for_a_reused_batch_are_the_trainers_own_before_the_first_step():
    """Several epochs on one batch clip against the policy before the update (the reference
    recomputes old log-probs with the trainer); on the first epoch the ratio is exactly 1."""
    from conftest import teacher_forced_logprobs

    from comprl_gym.trainers.config import ModelSettings
    from comprl_gym.trainers.policy import PolicyOptimizer

    torch.manual_seed(0)
    opt = PolicyOptimizer.from_settings(
        ModelSettings(model="tiny", lr=1e-2), loss=ClippedPG(eps_high=0.28)
    )
    samples = [
        TrainSample([5, 6, 7, 8, 9], [0, 0, 1, 1, 1], advantage=1.0),
        TrainSample([5, 6, 7], [0, 1, 1], advantage=-1.0),
    ]
    filled = opt.fill_old_logprobs(samples)
    for sample in filled:
        ids = sample.input_ids
        expected = teacher_forced_logprobs(opt.model, ids[:1], ids[1:])
        assert sample.old_logprobs[0] == 0.0
        assert sample.old_logprobs[1:] == pytest.approx(expected, abs=1e-5)
    first = opt.update(filled)
    assert first["clip_fraction"] == 0.0
    second = opt.update(filled)  # the policy moved (lr 1e-2): the ratio now leaves 1 +- 0.2
    assert second["clip_fraction"] > 0.0


def test_token_logprobs_at_chosen_positions_match_teacher_forcing():
    from conftest import teacher_forced_logprobs

    from comprl_gym.trainers.config import ModelSettings
    from comprl_gym.trainers.losses import token_logprobs
    from comprl_gym.trainers.policy import load_causal_lm

    model, _ = load_causal_lm(ModelSettings(model="tiny"))
    ids = [5, 6, 7, 8, 9, 10, 11]
    expected = teacher_forced_logprobs(model, ids[:1], ids[1:])  # log p(ids[t+1] | ids[:t+1])
    with torch.no_grad():
        got = token_logprobs(
            model,
            torch.tensor([ids]),
            torch.ones(1, len(ids), dtype=torch.long),
            positions=torch.tensor([1, 4, 5]),
        )
    assert got[0].tolist() == pytest.approx([expected[1], expected[4], expected[5]], abs=1e-5)


def _restricted(model, prompt_ids, tokens, temperature):
    """Independent truth: the model's distribution over ``tokens`` at the prompt's end."""
    with torch.no_grad():
        ids = torch.tensor([prompt_ids])
        logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits[0, -1]
    return torch.softmax(logits[list(tokens)].double() / temperature, -1)


def test_score_sampled_scores_the_distribution_the_sampler_drew_from():
    """``score: sampled``: the update's entropy is that of the temperature-T distribution over
    the allowed tokens, and punishing one of two choices moves probability to the other."""
    from comprl_gym.trainers.config import ModelSettings
    from comprl_gym.trainers.policy import PolicyOptimizer

    settings = ModelSettings(model="tiny", lr=1e-2, score="sampled", temperature=1.5)
    optimizer = PolicyOptimizer.from_settings(settings, "extractor")
    prompt, choices = [5, 9, 13, 17], (40, 41)
    before = _restricted(optimizer.model, prompt, choices, 1.5)
    sample = TrainSample.from_generation(
        prompt, [choices[0]], -1.0, temperature=1.5, allowed_token_ids=choices
    )
    stats = optimizer.update([sample])
    expected_entropy = float(-(before * before.log()).sum())
    assert stats["entropy"] == pytest.approx(expected_entropy, rel=1e-4)
    after = _restricted(optimizer.model, prompt, choices, 1.5)
    assert after[1] > before[1] + 0.01  # the punished choice's mass went to the other one


def test_score_choices_scores_the_models_own_choice_at_temperature_one():
    """``score: choices``: sampled at 3, the update scores the choice at temperature 1 over
    the allowed tokens (its entropy is that distribution's), and a rewarded choice gains."""
    from comprl_gym.trainers.config import ModelSettings
    from comprl_gym.trainers.policy import PolicyOptimizer

    settings = ModelSettings(model="tiny", lr=1e-2, score="choices", temperature=3.0)
    optimizer = PolicyOptimizer.from_settings(settings, "extractor")
    prompt, choices = [5, 9, 13, 17], (40, 41)
    before = _restricted(optimizer.model, prompt, choices, 1.0)
    sample = TrainSample.from_generation(
        prompt, [choices[1]], 1.0, temperature=3.0, allowed_token_ids=choices
    )
    stats = optimizer.update([sample])
    assert stats["entropy"] == pytest.approx(float(-(before * before.log()).sum()), rel=1e-4)
    after = _restricted(optimizer.model, prompt, choices, 1.0)
    assert after[1] > before[1] + 0.01


def test_lr_warm_up_scales_the_first_steps_linearly():
    """With ``lr_warmup_steps: 4`` the first step runs at a quarter of the rate: Adam's first
    step moves each trained weight by about its rate (``lr * g / |g|``), so by at most lr/4."""
    from comprl_gym.trainers.config import ModelSettings
    from comprl_gym.trainers.policy import PolicyOptimizer

    optimizer = PolicyOptimizer.from_settings(
        ModelSettings(model="tiny", lr=1e-2, lr_warmup_steps=4, max_grad_norm=0), "actor"
    )
    trained = [p for p in optimizer.model.parameters() if p.requires_grad]
    before = [p.detach().clone() for p in trained]
    optimizer.update([TrainSample.from_generation([5, 9, 13, 17], [40], 1.0)])
    moved = max(float((p - b).abs().max()) for p, b in zip(trained, before))
    assert 0.9 * 2.5e-3 < moved <= 2.5e-3 * 1.001
    assert [g["lr"] for g in optimizer.optimizer.param_groups] == [2.5e-3]
    for _ in range(4):
        optimizer.update([TrainSample.from_generation([5, 9, 13, 17], [40], 1.0)])
    assert [g["lr"] for g in optimizer.optimizer.param_groups] == [1e-2]


def test_score_raw_entropy_is_over_the_whole_vocabulary_at_temperature_one():
    from comprl_gym.trainers.config import ModelSettings
    from comprl_gym.trainers.policy import PolicyOptimizer

    optimizer = PolicyOptimizer.from_settings(ModelSettings(model="tiny", lr=0.0), "actor")
    prompt = [5, 9, 13, 17]
    with torch.no_grad():
        ids = torch.tensor([prompt])
        logits = optimizer.model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits[0, -1]
    probs = torch.softmax(logits.double(), -1)
    sample = TrainSample.from_generation(
        prompt, [40], 1.0, temperature=1.5, allowed_token_ids=(40, 41)
    )
    stats = optimizer.update([sample])
    assert stats["entropy"] == pytest.approx(float(-(probs * probs.log()).sum()), rel=1e-4)


def test_score_sampled_restricts_only_each_rows_own_trained_tokens():
    """Two samples whose trained tokens sit at different positions: at one row's trained
    position the other row holds a prompt token outside its allowed set. The loss stays
    finite (a restricted score there would be -inf, and -inf times a 0 mask is NaN)."""
    from comprl_gym.trainers.config import ModelSettings
    from comprl_gym.trainers.policy import PolicyOptimizer

    settings = ModelSettings(model="tiny", lr=1e-2, score="sampled", temperature=1.5)
    optimizer = PolicyOptimizer.from_settings(settings, "extractor")
    samples = [
        TrainSample.from_generation(
            prompt, [40], advantage, temperature=1.5, allowed_token_ids=(40, 41)
        )
        for prompt, advantage in (([5, 9, 13], 1.0), ([5, 9, 13, 17, 21], -1.0))
    ]
    stats = optimizer.update(samples)
    assert np.isfinite(stats["loss"]) and np.isfinite(stats["grad_norm"]) and stats["grad_norm"] > 0
