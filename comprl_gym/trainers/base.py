"""The trainer: its parts put together, built in order, and closed.

:class:`Trainer` is what every trainer shares; the algorithm, one iteration of Complementary RL
and the presets that switch its parts off (GRPO, static experience, experience-only), is a
subclass in :mod:`comprl_gym.trainers.complementary`. The rest is one concern per file, each a
part :class:`Trainer` inherits:

- ``engines.py``: the actor's rollout engine and its weight push; Ray (cluster, env workers,
  data-parallel ranks)
- ``experience_setup.py``: the extractor (or a memory), the experience store, the worker
- ``tasks.py``: which tasks an iteration plays (``task_schedule``) and the tally of what it played
- ``playing.py``: the envs, the actor as an agent, one batched rollout call
- ``run_metrics.py``: what an iteration logs (outcomes, waits, store, probe, sensitivity)
- ``run_loop.py``: the run (:meth:`~Trainer.train`), evaluation, provenance
- ``checkpoint.py``: checkpoints and exact resume

This file holds what ties them: the class flags an algorithm sets, construction (what loads in
which order: Ray, the actor and its engine, the experience half, metrics, resume), the
algorithm's hooks and :meth:`~Trainer.close`. A part is a plain class whose methods use the
attributes ``__init__`` sets (it declares those it reads), not an object of its own: every
method stays a method of the trainer, which a subclass overrides by name.

Example:
    >>> from comprl_gym.trainers import GRPOTrainer, TrainConfig
    >>> cfg = TrainConfig.from_dict({"algorithm": "grpo", "iterations": 1, "group_size": 2,
    ...     "groups_per_iteration": 1, "max_episode_steps": 2, "actor": {"model": "tiny"},
    ...     "output_dir": __import__("tempfile").mkdtemp(), "progress": False,
    ...     "tensorboard": False, "eval_tasks": 0})
    >>> summary = GRPOTrainer(cfg).train()
    >>> summary["iterations"]
    1
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, ClassVar

from comprl_gym.core import ConfigurationError
from comprl_gym.env_factory import EnvSpec
from comprl_gym.lessons.formats import lesson_format_for_run
from comprl_gym.lessons.memories import ExemplarMemory
from comprl_gym.seeding import seed_everything
from comprl_gym.trainers.background import ExperienceWorker, WaitClock
from comprl_gym.trainers.checkpoint import Checkpointing, CheckpointManager
from comprl_gym.trainers.config import TrainConfig
from comprl_gym.trainers.engines import EngineSetup, make_actor_backend
from comprl_gym.trainers.experience_setup import ExperienceSetup
from comprl_gym.trainers.extractor import ExperienceExtractor
from comprl_gym.trainers.losses import Loss
from comprl_gym.trainers.metrics import MetricsLogger
from comprl_gym.trainers.playing import Playing
from comprl_gym.trainers.policy import PolicyOptimizer
from comprl_gym.trainers.run_loop import RunLoop
from comprl_gym.trainers.run_metrics import RunMetrics
from comprl_gym.trainers.tasks import TaskDealer
from comprl_gym.trainers.warmup import check_warmup
from comprl_gym.utils import return_freed_memory


class Trainer(
    EngineSetup, ExperienceSetup, TaskDealer, Playing, RunMetrics, Checkpointing, RunLoop
):
    """What every trainer shares (see the module docstring for where each part lives).

    A subclass is the algorithm: it says which parts are on (the three class flags) and
    implements :meth:`train_iteration`; :class:`~comprl_gym.trainers.complementary.
    ComplementaryRLTrainer` is the one in this package.
    """

    algorithm: ClassVar[str] = ""
    #: Split each group into K/2 rollouts with experience and K/2 without (and build the
    #: extractor and the store).
    uses_experience: ClassVar[bool] = False
    #: Take actor optimiser steps (the one train/freeze switch of the actor).
    trains_actor: ClassVar[bool] = True
    #: Take extractor optimiser steps (the one train/freeze switch of the extractor).
    trains_extractor: ClassVar[bool] = False

    def __init__(self, config: TrainConfig):
        config.validate()
        if self.uses_experience and config.group_size % 2:
            raise ConfigurationError(
                f"{self.algorithm} splits each group in halves: group_size must be even, "
                f"got {config.group_size}"
            )
        if config.warmup.steps:
            check_warmup(config, self.trains_actor)  # before any model loads
        #: What the extractor writes: refused here, before any model loads, when a family of
        #: the run cannot be written in it (``None`` without an extractor).
        self.lesson_format = (
            lesson_format_for_run(
                config.experience.extractor_format,
                config.env_ids,
                config.experience.max_text_chars,
            )
            if self.uses_experience and config.experience.memory == "extractor"
            else None
        )
        self.config = config
        self.output_dir = Path(config.output_dir)
        self.output_dir.mkdir(parents=True, exist_ok=True)
        seed_everything(config.seed)
        # A training step's freed tensors go back to the system, not into a growing heap.
        return_freed_memory()
        if config.torch_threads > 0:
            import torch

            torch.set_num_threads(config.torch_threads)
        self.task_rng = random.Random(config.seed)
        #: ``task_schedule: revisit``: the pool's reset seeds not dealt yet, and the tasks the
        #: next iteration plays again.
        self.task_deck: list[int] = []
        self.revisit_next: list[tuple[str, int]] = []
        #: The actor's running ``[score sum, episodes]`` per env family over training rollouts,
        #: shown to it when it critiques experiences (reference ``record_actor_performance``).
        self.actor_performance: dict[str, list[float]] = {}
        #: Per env id, each task id its training episodes played and how often (provenance).
        self.tasks_played: dict[str, dict[str, int]] = {}
        #: The checkpoint files this run resumed from and their sha256 (its provenance).
        self.resumed_from: dict[str, str] = {}
        self.iteration = 0
        self.rollouts_done = 0
        #: The untrained actor's evaluation results (``eval_before``), kept in checkpoints.
        self.evaluation_before: dict[str, Any] | None = None
        #: The reading warm-up's record (``warmup``; :func:`~comprl_gym.trainers.warmup.
        #: run_warmup`), kept in checkpoints: a resumed run does not warm up again.
        self.warmup_record: dict[str, Any] | None = None
        #: Agents made in this iteration: part of each batch's sampling seed.
        self._play_calls = 0
        self.clock = WaitClock()
        #: The Ray side when ``config.distributed.enabled`` (see :meth:`_start_distributed`).
        self.cluster: Any = None
        self.env_pool: Any = None
        if config.distributed.enabled:
            self._start_distributed()
        self.actor = PolicyOptimizer.from_settings(
            config.actor, "actor", loss=self.actor_loss(), trainable=self.trains_actor
        )
        self.actor_backend = make_actor_backend(config, self.actor)
        if config.distributed.enabled and self.trains_actor:
            # The backend keeps the driver's optimiser (its model serves the rollouts); the
            # update runs over the trainer ranks, which copy rank 0's weights back into it.
            self.actor = self._data_parallel(self.actor)
        self.manager: Any = None
        self.extractor: ExperienceExtractor | None = None
        #: The no-model memory that writes the lessons instead (``experience.memory``).
        self.memory: ExemplarMemory | None = None
        self.worker: ExperienceWorker | None = None
        if self.uses_experience:
            self._build_experience()
        #: Envs by (spec, slot): reused across iterations (a spec is also a Ray env's key).
        self._envs: dict[tuple[EnvSpec, int], Any] = {}
        #: Whether training envs retrieve experience (off during warm-up).
        self._retrieval = True
        self.metrics = MetricsLogger(self.output_dir, tensorboard=config.tensorboard)
        self.checkpoints = CheckpointManager(self.output_dir)
        if config.resume and self.checkpoints.latest_step() is not None:
            self.resume()

    # ------------------------------------------------------------------ the algorithm's part
    def train_iteration(self) -> dict[str, Any]:
        """One iteration of the algorithm; returns its metrics record."""
        raise NotImplementedError

    def actor_loss(self) -> Loss:
        """The actor's loss (the algorithm's hook; built once, before the actor loads)."""
        raise NotImplementedError

    def extractor_loss(self) -> Loss:
        """The extractor's loss (the algorithm's hook)."""
        raise NotImplementedError

    def experience_job(self, job: dict[str, Any]) -> None:
        """The background half of an iteration (runs in the experience worker)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ teardown
    def close(self) -> None:
        if self.worker is not None:
            self.worker.drain()
            self.worker.close()
        for env in self._envs.values():
            env.close()
        self._envs.clear()
        if self.manager is not None:
            self._close_manager()
        for optimizer in (self.actor, getattr(self.extractor, "optimizer", None)):
            if hasattr(optimizer, "close"):  # data-parallel ranks (Ray actors)
                optimizer.close()
        self.metrics.close()
        # An engine with its own copy of the weights (vLLM) holds memory of its own; the
        # transformers backend shares the actor's module, which outlives the trainer.
        if self.actor_backend.supports_weight_sync:
            self.actor_backend.close()
        if self.env_pool is not None:
            self.env_pool.close()
        if self.cluster is not None:
            self.cluster.shutdown()
