"""The engines a trainer generates with.

:func:`make_actor_backend` picks the engine that samples the actor's rollouts (the trained
module itself, an in-process vLLM copy, or vLLM engine actors on Ray).
:func:`policy_backend` is the generation backend of any :class:`~comprl_gym.trainers.policy.
PolicyOptimizer` (the extractor's writing, the doctor, the probe, the ladder).
"""

from __future__ import annotations

from comprl_gym.llm.base import LLMBackend
from comprl_gym.llm.models import resolve_model
from comprl_gym.llm.transformers_backend import TransformersBackend
from comprl_gym.llm.vllm_backend import VLLMBackend
from comprl_gym.trainers.config import TrainConfig
from comprl_gym.trainers.policy import PolicyOptimizer


def make_actor_backend(config: TrainConfig, actor: PolicyOptimizer) -> LLMBackend:
    """The engine that samples the actor's rollouts (``config.rollout_backend``).

    ``transformers`` generates with the very module being trained (nothing to sync); ``vllm``
    holds its own copy of the weights, which :meth:`Trainer.push_weights` refreshes after
    every actor update. With ``distributed.inference_engines > 0`` the copies are that many
    vLLM engine actors on the Ray cluster (:class:`~comprl_gym.distributed.engines.EngineGroup`),
    every one refreshed by the push.

    Both follow the actor's device decision: the transformers backend holds the actor's own
    device object and compute dtype; the in-process vLLM engine computes in the actor's dtype
    and, on CUDA, shares its GPU (``actor.gpu_memory_utilization``, ``actor.vllm_sleep``).
    """
    engines = config.distributed.inference_engines if config.distributed.enabled else 0
    if config.rollout_backend == "vllm" or engines:
        # A multi-turn prompt plus its reply fits max_context_tokens (folding sees to it).
        max_model_len = max(2048, config.max_context_tokens)
        model = str(resolve_model(config.actor.model))
        backend: LLMBackend
        if engines:  # vLLM engine actors on the Ray cluster (Trainer._start_distributed)
            from comprl_gym.distributed.engines import EngineGroup

            backend = EngineGroup(
                config.distributed, model, seed=config.seed, max_model_len=max_model_len
            )
        else:
            settings = actor.settings
            on_cuda = actor.device.type == "cuda"
            backend = VLLMBackend(
                model,
                seed=config.seed,
                max_model_len=max_model_len,
                gpu_memory_utilization=settings.gpu_memory_utilization,
                sleep=settings.vllm_sleep,
                **({"dtype": str(actor.compute_dtype).removeprefix("torch.")} if on_cuda else {}),
            )
            if backend.sleep_mode:  # free the GPU for the update; the push wakes it
                actor.before_step = backend.sleep
        if actor.settings.lora.enabled or actor.steps or actor.settings.init_weights:
            backend.update_weights(actor.rollout_weights())
        return backend
    # With LoRA the model is PEFT-wrapped: generation goes through the adapters.
    return policy_backend(actor)


def policy_backend(optimizer: PolicyOptimizer) -> TransformersBackend:
    """A transformers backend that generates with ``optimizer``'s own module, on its device
    object and in its compute dtype (the actor's rollouts, the extractor's writing)."""
    return TransformersBackend(
        model_object=optimizer.model,
        tokenizer_object=optimizer.tokenizer,
        device=optimizer.device,
        dtype=str(optimizer.compute_dtype).removeprefix("torch."),
    )
