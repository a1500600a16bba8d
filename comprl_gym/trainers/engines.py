"""The engines a trainer runs on: the actor's rollout engine, its weight push, and Ray.

:func:`make_actor_backend` picks the engine that samples the actor's rollouts (the trained
module itself, an in-process vLLM copy, or vLLM engine actors on Ray) and
:meth:`EngineSetup.push_weights` keeps a copy in step after each update. On Ray
(``config.distributed.enabled``, ``docs/distributed.md``) :class:`EngineSetup` also joins the
cluster, starts the env workers and spreads an optimiser's updates over data-parallel ranks.
:func:`policy_backend` is the generation backend of any :class:`~comprl_gym.trainers.policy.
PolicyOptimizer` (the extractor's writing, the doctor, the probe, the ladder).
"""

from __future__ import annotations

from typing import Any, ClassVar

from comprl_gym.core import ConfigurationError
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


class EngineSetup:
    """The trainer's weight push and its Ray side (a part of :class:`~comprl_gym.trainers.
    base.Trainer`, which builds the actor and calls :meth:`_start_distributed` first)."""

    # Set by Trainer (its class flags and __init__).
    algorithm: ClassVar[str]
    uses_experience: ClassVar[bool]
    config: TrainConfig
    actor: PolicyOptimizer  # or its data-parallel ranks (_data_parallel)
    actor_backend: LLMBackend
    cluster: Any
    env_pool: Any

    def push_weights(self) -> None:
        """After an actor update: make the rollout engine sample from the new weights.

        A backend that shares the trained module (transformers) has nothing to copy.
        """
        if self.actor_backend.supports_weight_sync:
            self.actor_backend.update_weights(self.actor.rollout_weights())

    def _start_distributed(self) -> None:
        """Join or start the Ray cluster and start the env workers (``docs/distributed.md``).

        The one place where the trainer turns remote: :meth:`make_env` then hands out env
        specs, which :meth:`play_jobs` plays on the pool's workers (each builds the spec's env
        with :func:`~comprl_gym.env_factory.make_env`, reaching the store through the
        experience service); the agent and its model stay in this process.
        """
        # Ray is a heavy optional dependency (the ``distributed`` extra): imported only here.
        from comprl_gym.distributed.cluster import RayCluster
        from comprl_gym.distributed.env_pool import EnvPool, ServiceEnvFactory

        cfg = self.config
        if cfg.env_url:
            raise ConfigurationError("env_url and distributed.enabled: choose one way to env")
        if self.uses_experience:
            self._check_distributed_experience()
        factory = ServiceEnvFactory(cfg.distributed.experience_service_name)
        self.cluster = RayCluster(cfg.distributed).start()
        try:
            self.env_pool = EnvPool(cfg.distributed, factory)
        except Exception:
            self.cluster.shutdown()
            raise

    def _data_parallel(self, optimizer: PolicyOptimizer) -> Any:
        """``optimizer``'s updates over ``distributed.trainer_ranks`` Ray actors (itself for
        one rank); the cluster is up (:meth:`_start_distributed` ran first)."""
        from comprl_gym.trainers.data_parallel import data_parallel

        return data_parallel(optimizer, self.config.distributed)

    def _check_distributed_experience(self) -> None:
        """What an experience trainer needs on Ray: the shared experience service, and no
        ``search_and_ask`` (its refiner is the extractor model, which lives in the driver; an
        env worker cannot call it)."""
        cfg = self.config
        if not cfg.distributed.experience_service:
            raise ConfigurationError(
                f"{self.algorithm} with distributed.enabled needs distributed.experience_service"
                ": true (the env workers and the extractor share the store through it)"
            )
        if cfg.experience.search_and_ask_budget > 0:
            raise ConfigurationError(
                f"{self.algorithm} with distributed.enabled: set "
                "experience.search_and_ask_budget: 0 (search_and_ask is answered by the "
                "extractor model in the trainer process, which the env workers cannot reach)"
            )
