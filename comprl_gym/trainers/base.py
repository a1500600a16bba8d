"""The infrastructure a trainer's algorithm calls: models, engines, envs, Ray, checkpoints.

:class:`Trainer` owns what is not the algorithm: loading the actor (and, for experience
trainers, the extractor, its generation backend and the experience store), the rollout engine
and its weight push, the envs (built from :class:`~comprl_gym.env_factory.EnvSpec`, in process,
on an env server or on Ray env workers), playing a batch of episodes, the run loop with its
progress bar, evaluation (through :mod:`comprl_gym.evaluation`), checkpoints and exact
resume, metrics and clean-up. The algorithm itself, one iteration of Complementary RL and the
presets that switch its parts off (GRPO, static experience, experience-only), is in
:mod:`comprl_gym.trainers.complementary`.

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

import logging
import random
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from comprl_gym.agents.critique import DECISIONS, ExperienceCritic
from comprl_gym.agents.llm_agent import LLMAgent, LLMAgentConfig
from comprl_gym.agents.prompts import PromptConfig
from comprl_gym.core import ConfigurationError, DataError
from comprl_gym.env_factory import EnvSpec, ExperienceSpec, make_env, require_registered
from comprl_gym.evaluation.eval import (
    WITH_EXPERIENCE,
    WITHOUT_EXPERIENCE,
    EpisodeKey,
    arm_table,
    episode_record,
    summarize,
    write_run,
)
from comprl_gym.evaluation.provenance import (
    PROVENANCE_FILE,
    file_sha256,
    portable_path,
    training_provenance,
)
from comprl_gym.families import family_spec, verdict_counts
from comprl_gym.lessons.formats import lesson_format_for_run
from comprl_gym.lessons.memories import ExemplarMemory, memory_named
from comprl_gym.registration import families_of
from comprl_gym.rollouts import RolloutConfig, Trajectory, collect_rollouts
from comprl_gym.seeding import restore_rng_state, seed_everything
from comprl_gym.trainers.advantages import zero_variance_fraction
from comprl_gym.trainers.background import ExperienceWorker, TimedManager, WaitClock
from comprl_gym.trainers.checkpoint import CheckpointManager
from comprl_gym.trainers.config import TrainConfig
from comprl_gym.trainers.engines import make_actor_backend, policy_backend
from comprl_gym.trainers.extractor import ExperienceExtractor
from comprl_gym.trainers.losses import Loss
from comprl_gym.trainers.metrics import MetricsLogger, warn_on_collapse
from comprl_gym.trainers.policy import PolicyOptimizer
from comprl_gym.trainers.probing import probe_metrics
from comprl_gym.trainers.report import compare_with_before, plot_learning_curve
from comprl_gym.trainers.sensitivity import lesson_sensitivity, measures_sensitivity
from comprl_gym.trainers.tasks import TaskRef
from comprl_gym.trainers.warmup import check_warmup, run_warmup
from comprl_gym.utils import atomic_write_json, jsonable

logger = logging.getLogger(__name__)

#: A job of :meth:`Trainer.play_jobs`: the env (or its spec on Ray), the task, its group, and
#: whether it is played with experience.
Job = tuple[Any, "TaskRef", int, bool]


class Trainer:
    """The infrastructure every trainer shares (see the module docstring).

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

    # ------------------------------------------------------------------ scale-out
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

    # ------------------------------------------------------------------ experience side
    @property
    def store_dir(self) -> Path:
        return Path(self.config.experience.store_dir or self.output_dir / "experience")

    def _open_manager(self) -> Any:
        """The store's manager: in this process, or on Ray the named experience service (its
        client has the manager's methods) that the env workers share."""
        from comprl_gym.experience import ExperienceManager

        settings = self.config.experience
        # ExperienceSettings is an ExperienceConfig: the manager reads its knobs directly.
        config = replace(settings, seed=self.config.seed)
        if self.env_pool is not None:
            from comprl_gym.distributed.experience_service import start_experience_service

            return start_experience_service(
                self.store_dir, config, distributed=self.config.distributed
            )
        return ExperienceManager(str(self.store_dir), config=config)

    def _close_manager(self) -> None:
        """Close the store (and end the experience service on Ray)."""
        if self.env_pool is not None:
            from comprl_gym.distributed.experience_service import stop_experience_service

            stop_experience_service(self.manager)
        else:
            self.manager.close()

    def _build_experience(self) -> None:
        cfg = self.config
        extractor_settings = cfg.extractor
        if cfg.experience.memory == "extractor":
            optimizer = PolicyOptimizer.from_settings(
                extractor_settings,
                "extractor",
                loss=self.extractor_loss(),
                trainable=self.trains_extractor,
            )
            backend = policy_backend(optimizer)
            if cfg.distributed.enabled and self.trains_extractor:
                optimizer = self._data_parallel(optimizer)
        else:
            # A memory without a model: no extractor, no optimiser, nothing to train.
            self.memory = memory_named(cfg.experience.memory)
        self.manager = self._open_manager()
        self._warm_up_embedder()
        if self.memory is None:
            self.extractor = ExperienceExtractor(
                backend,
                optimizer,
                self.manager,
                cfg.experience,
                max_new_tokens=extractor_settings.max_new_tokens,
                temperature=extractor_settings.temperature,
                output_format=self.lesson_format,
                seed=cfg.seed,
            )
        self.worker = ExperienceWorker(self.experience_job, cfg.experience.async_extraction)
        self.extractor_stats: list[dict[str, float]] = []
        self.merges = 0

    def _warm_up_embedder(self) -> None:
        """Load the embedding model now, not inside the first rollout (where it would count as
        actor wait time)."""
        embedder = getattr(getattr(self.manager, "store", None), "embedder", None)
        if embedder is not None and hasattr(embedder, "encode"):
            embedder.encode(["warm up"])

    # ------------------------------------------------------------------ tasks and envs
    def sample_tasks(self) -> list[TaskRef]:
        """This iteration's task groups (``config.task_schedule``)."""
        cfg = self.config
        weights = cfg.env_weights or [1.0] * len(cfg.env_ids)
        if cfg.task_schedule == "random":
            return [
                TaskRef(
                    self.task_rng.choices(cfg.env_ids, weights=weights)[0],
                    self.task_rng.randrange(cfg.task_pool),
                )
                for _ in range(cfg.groups_per_iteration)
            ]
        # revisit: the previous iteration's new tasks again, then new ones dealt from the pool
        revisits = [TaskRef(env_id, seed) for env_id, seed in self.revisit_next]
        fresh = [self._deal_task(weights) for _ in range(cfg.groups_per_iteration - len(revisits))]
        new = fresh[len(fresh) - cfg.groups_per_iteration // 2 :]
        self.revisit_next = [(task.env_id, task.seed) for task in new]
        return revisits + fresh

    def _deal_task(self, weights: list[float]) -> TaskRef:
        """A new task: the env id drawn by ``env_weights``, the reset seed dealt from the pool
        shuffled (every seed once before any twice)."""
        cfg = self.config
        if not self.task_deck:
            self.task_deck = list(range(cfg.task_pool))
            self.task_rng.shuffle(self.task_deck)
        return TaskRef(self.task_rng.choices(cfg.env_ids, weights=weights)[0], self.task_deck.pop())

    def env_spec(
        self, env_id: str, with_experience: bool, evaluation: bool = False, slot: int = 0
    ) -> EnvSpec:
        """The spec of a training or evaluation env: the run's step limit and ``env_kwargs``
        (or its env server), wrapped with experience for the with-experience half.

        No env reports outcomes to the store: the trainer credits the lessons each training
        episode read (``ExperienceExtractor.credit_uses``), and evaluation never does, so
        measuring the store does not change it (reference: validation env managers run with
        ``mode="val"``). Training envs retrieve nothing during warm-up
        (``experience.warmup_iterations``) and draw their lessons from
        ``experience.inject_sample_from`` candidates (salted by ``slot``); evaluation envs show
        the top ``inject_top_k``.
        """
        cfg = self.config
        kwargs = {} if cfg.env_url else {"max_steps": cfg.max_episode_steps}
        kwargs.update(cfg.env_kwargs.get(env_id, {}))
        experience = None
        if with_experience:
            retrieval = self._retrieval or evaluation
            settings = cfg.experience
            experience = ExperienceSpec(
                inject_top_k=settings.inject_top_k if retrieval else 0,
                search_budget=settings.search_and_ask_budget if retrieval else 0,
                report_outcomes=False,
                # The LLMAgent puts info["experiences"] in its system prompt: show them once.
                in_observation=False,
                sample_from=0 if evaluation or not retrieval else settings.inject_sample_from,
                sample_salt=0 if evaluation else slot,
            )
        return EnvSpec.of(env_id, kwargs, url=cfg.env_url, experience=experience)

    def make_env(
        self, env_id: str, with_experience: bool, slot: int, evaluation: bool = False
    ) -> Any:
        """A cached env per (spec, slot): envs are reused across iterations. On Ray, the spec
        itself: :meth:`play_jobs` places it on an env worker, which builds and keeps it."""
        spec = self.env_spec(env_id, with_experience, evaluation, slot)
        if self.env_pool is not None:
            require_registered(env_id)  # here, not inside a remote worker
            return spec
        key = (spec, slot)
        if key not in self._envs:
            self._envs[key] = make_env(
                spec,
                manager=TimedManager(self.manager, self.clock) if with_experience else None,
                refiner=self._timed_refiner if with_experience and self.extractor else None,
            )
        return self._envs[key]

    @property
    def in_warmup(self) -> bool:
        """Whether the next iteration is a warm-up one (see ``experience.warmup_iterations``)."""
        return self.uses_experience and self.iteration < self.config.experience.warmup_iterations

    def _timed_refiner(self, question: str, experiences: list[Any], context: Any = None) -> str:
        """``search_and_ask`` answered by the extractor; the actor's wait is measured."""
        assert self.extractor is not None
        # The answer's whole time is inside the timed manager.search_and_ask; here we measure
        # the part spent waiting for the extractor model (busy writing or training).
        start = time.perf_counter()
        with self.extractor.lock:
            self.clock.add("of_which/extractor_lock_wait", time.perf_counter() - start)
            return self.extractor.refine(question, experiences, context)

    # ------------------------------------------------------------------ playing
    def _agent(self, temperature: float | None = None) -> LLMAgent:
        """A fresh agent per batch, its sampling seed fixed by (run seed, iteration, batch).

        Seeding per batch rather than per agent lifetime makes a resumed run sample exactly what
        the uninterrupted run sampled.
        """
        seed = (self.config.seed * 100_003 + self.iteration * 1_009 + self._play_calls) % 2**31
        self._play_calls += 1
        return self.agent(seed, temperature)

    def agent(self, seed: int | None, temperature: float | None = None) -> LLMAgent:
        """The actor as an agent: its rollout engine (current weights), prompts and sampling
        settings (``temperature`` overrides the rollout temperature), sampling with ``seed``.
        One agent per episode with the episode's seed gives common random numbers across
        arms (:mod:`comprl_gym.evaluation.streaming`)."""
        settings = self.config.actor
        critic = None
        if self.uses_experience and self.config.experience.actor_critique:
            critic = ExperienceCritic(
                self.actor_backend,
                self.config.experience.critique_max_tokens,
                performance=self.performance_of,
            )
        return LLMAgent(
            self.actor_backend,
            LLMAgentConfig(
                temperature=settings.temperature if temperature is None else temperature,
                max_tokens=settings.max_new_tokens,
                seed=seed,
                prompt=PromptConfig(
                    conversation=self.config.conversation,
                    max_context_tokens=self.config.max_context_tokens,
                    history_window=self.config.history_turns,
                ),
            ),
            critic=critic,
        )

    def performance_of(self, family: str) -> tuple[float, int]:
        """The actor's average training score and episode count on ``family`` so far."""
        total, count = self.actor_performance.get(family, (0.0, 0))
        return (total / count if count else 0.0), int(count)

    def record_performance(self, episodes: list[Trajectory]) -> None:
        """Add an iteration's training episodes to :attr:`actor_performance` (reference:
        ``multi_agentic_pipeline.py`` records each tag's score sum and count after the
        rollouts, so a critique sees the iterations before its own) and their task ids to
        :attr:`tasks_played`."""
        for episode in episodes:
            tally = self.actor_performance.setdefault(episode.env_family, [0.0, 0])
            tally[0] += episode.score
            tally[1] += 1
            played = self.tasks_played.setdefault(episode.env_id, {})
            played[episode.task_id] = played.get(episode.task_id, 0) + 1

    def play_jobs(
        self,
        jobs: list[Job],
        temperature: float | None = None,
        progress: str = "",
    ) -> list[Trajectory]:
        """Play ``(env, task, group, with_experience)`` jobs in one batched rollout call.

        Trajectories come back in job order, their ``group`` and ``with_experience`` in ``meta``.
        ``temperature`` overrides the actor's rollout temperature; ``progress`` names a progress
        bar over the episodes (none when empty or when ``config.progress`` is off).
        """
        cfg = self.config
        envs = [env for env, _, _, _ in jobs]
        if self.env_pool is not None:  # specs from make_env, spread over the env workers
            envs = self.env_pool.envs(envs)
        trajectories = collect_rollouts(
            envs,
            self._agent(temperature),
            [task.seed for _, task, _, _ in jobs],
            # Search steps of the experience wrapper do not count towards the env's step limit.
            config=RolloutConfig(
                max_turns=cfg.max_episode_steps + cfg.experience.search_and_ask_budget + 1,
                progress=bool(progress) and cfg.progress,
                progress_label=progress or "episodes",
                max_episode_retries=cfg.distributed.max_episode_retries,
            ),
            meta=[{"group": group, "with_experience": with_exp} for _, _, group, with_exp in jobs],
            stepper=self.env_pool,
        )
        for trajectory in trajectories:
            if trajectory.error:
                logger.warning("episode %s failed: %s", trajectory.episode_id, trajectory.error)
        return trajectories

    def push_weights(self) -> None:
        """After an actor update: make the rollout engine sample from the new weights.

        A backend that shares the trained module (transformers) has nothing to copy.
        """
        if self.actor_backend.supports_weight_sync:
            self.actor_backend.update_weights(self.actor.rollout_weights())

    # ------------------------------------------------------------------ metrics
    def iteration_metrics(
        self,
        episodes: list[Trajectory],
        update: dict[str, Any],
        waits: dict[str, float],
        rollout_s: float,
        rewards: list[float],
    ) -> dict[str, Any]:
        """What an iteration logs: outcomes (per env id and per half), the actor's update, where
        the actor waited, and the extractor's and the store's state."""
        record: dict[str, Any] = {
            "rollouts": self.rollouts_done,
            "success": float(np.mean([e.won for e in episodes])),
            "score": float(np.mean([e.score for e in episodes])),
            "reward": float(np.mean(rewards)),
            "episode_steps": float(np.mean([e.steps for e in episodes])),
            "segments": float(np.mean([e.num_segments for e in episodes])),
            "invalid_actions": float(np.mean([e.invalid_actions for e in episodes])),
            "rollout_time_s": rollout_s,
        }
        if self.env_pool is not None:
            record["rollout/episodes_rerun"] = sum(e.reruns for e in episodes)
        for key, value in update.items():
            record[f"actor/{key}"] = value
        halves = [e.with_experience for e in episodes] if self.uses_experience else None
        record["actor/zero_variance_groups"] = zero_variance_fraction(
            rewards, [e.group for e in episodes], halves
        )
        for env_id in sorted({e.env_id for e in episodes}):
            mine = [e for e in episodes if e.env_id == env_id]
            name = env_id.split("/")[-1]
            record[f"{name}/success"] = float(np.mean([e.won for e in mine]))
            record[f"{name}/episodes"] = len(mine)
        if self.uses_experience:
            for flag, label in ((True, "with_experience"), (False, "without_experience")):
                half = [e for e in episodes if e.with_experience == flag]
                if half:
                    record[f"{label}/success"] = float(np.mean([e.won for e in half]))
            record["search_and_ask_calls"] = float(
                np.mean([e.search_and_ask_calls for e in episodes])
            )
            if self.config.experience.actor_critique:
                decisions = [e.critique["decision"] for e in episodes if e.critique]
                for decision in DECISIONS:
                    record[f"critique/{decision}"] = decisions.count(decision)
        actor_wait = sum(
            v for k, v in waits.items() if k != "weight_push" and not k.startswith("of_which")
        )
        record["actor_wait_s"] = actor_wait
        for key, value in waits.items():
            record[f"wait/{key}"] = value
        if self.extractor is not None:
            record["store_size"] = len(self.manager)
            record.update(self.store_verdicts())
            record.update(self.probe_metrics())
            record["extractor/updates"] = self.extractor.updates
            record["extractor/pending"] = len(self.extractor.pending)
            for key, value in self.extractor.counts.to_dict().items():
                record[f"extractor/{key}"] = value
            record["worker_backlog"] = self.worker.backlog if self.worker else 0
            while self.extractor_stats:
                stats = self.extractor_stats.pop(0)
                for key, value in stats.items():
                    record[f"extractor/{key}"] = value
        record.update(self.sensitivity_metrics())
        warn_on_collapse(record, self.iteration)
        if self.memory is not None:
            record["store_size"] = len(self.manager)
            record.update(self.store_verdicts())
            for key, value in self.memory.state_dict().items():
                record[f"memory/{key}"] = value
        return record

    def store_verdicts(self) -> dict[str, int]:
        """The store's lessons that name the right fact: for each trained family whose spec can
        judge a lesson (``lessons.judge``), its active lessons counted by verdict
        (``store/<family>/right``, ``wrong``, ``both``, ``neither``, ``no_task``)."""
        record: dict[str, int] = {}
        for family in sorted(families_of(self.config.env_ids)):
            spec = family_spec(family)
            if spec is None or spec.lessons.judge is None:
                continue
            texts = [e.text for e in self.manager.experiences(env_family=family)]
            for verdict, count in verdict_counts(spec, texts).items():
                record[f"store/{family}/{verdict}"] = count
        return record

    def probe_metrics(self) -> dict[str, Any]:
        """Every ``experience.probe_every`` iterations, the extractor probe
        (:mod:`comprl_gym.trainers.probing`) of the extractor as this iteration's update left
        it: the experience worker is drained first. ``{}`` when it is not due."""
        every = self.config.experience.probe_every
        if self.extractor is None or not every or self.iteration % every:
            return {}
        if self.worker is not None:
            self.worker.drain()
        return probe_metrics(self.extractor, self.config.env_ids, self.iteration)

    def sensitivity_metrics(self) -> dict[str, Any]:
        """The actor's lesson sensitivity (:mod:`comprl_gym.trainers.sensitivity`) on the first
        ``sensitivity_tasks`` evaluation tasks of each env whose family writes fixed lessons,
        greedy, with the weights this iteration left (``sensitivity/*``, prefixed by the env's
        name when the run has several such envs)."""
        cfg = self.config
        env_ids = [e for e in cfg.env_ids if not cfg.env_url and measures_sensitivity(e)]
        if not cfg.sensitivity_tasks or not env_ids:
            return {}
        seeds = range(cfg.task_pool, cfg.task_pool + cfg.sensitivity_tasks)
        # Greedy, and not self._agent: the rollouts' sampling seeds stay as they were.
        agent = self.agent(seed=0, temperature=0.0)
        record: dict[str, Any] = {}
        for env_id in env_ids:
            kwargs = {"max_steps": cfg.max_episode_steps, **cfg.env_kwargs.get(env_id, {})}
            measured = lesson_sensitivity(agent, env_id, kwargs, seeds)
            prefix = "" if len(env_ids) == 1 else f"{env_id.split('/')[-1]}/"
            record.update({f"{prefix}{key}": value for key, value in measured.items()})
        return record

    def training_tasks(self) -> dict[str, Any]:
        """What training sampled from and played (provenance): per env id its pool (reset
        seeds ``[0, task_pool)`` with the env's arguments) and each task id it played, with its
        episode count."""
        cfg = self.config
        return {
            env_id: {
                "reset_seeds": {"start": 0, "stop": cfg.task_pool},
                "env_kwargs": cfg.env_kwargs.get(env_id, {}),
                "played": dict(sorted(self.tasks_played.get(env_id, {}).items())),
            }
            for env_id in cfg.env_ids
        }

    def write_provenance(self) -> dict[str, Any]:
        """Write ``provenance.json`` into the output folder (atomically) and return it: the
        training tasks and the sha256 of every weight file the models were loaded from
        (:func:`~comprl_gym.evaluation.provenance.training_provenance`)."""
        models: dict[str, Any] = {"actor": self.config.actor}
        if self.extractor is not None:
            models["extractor"] = self.config.extractor
        record = training_provenance(models, self.training_tasks(), self.resumed_from)
        atomic_write_json(self.output_dir / PROVENANCE_FILE, jsonable(record))
        return record

    # ------------------------------------------------------------------ the run
    def train(self) -> dict[str, Any]:
        """Run the remaining iterations, checkpoint, evaluate; return a summary."""
        from tqdm import tqdm

        cfg = self.config
        bar = tqdm(
            total=cfg.iterations,
            initial=self.iteration,
            desc=f"{self.algorithm} iterations",
            disable=not cfg.progress,
        )
        start = time.perf_counter()
        # Where the wall time went (a resumed run reports only what it ran itself).
        times: dict[str, float] = {}
        if cfg.eval_before and cfg.eval_tasks > 0 and self.evaluation_before is None:
            self.evaluation_before = self.evaluate(before_training=True)
            times["evaluation_before_s"] = time.perf_counter() - start
            # On disk at once: the first checkpoint may be iterations away.
            atomic_write_json(self.output_dir / "evaluation_before.json", self.evaluation_before)
        if cfg.warmup.steps and self.iteration == 0 and self.warmup_record is None:
            self.warmup_record = run_warmup(self)
            times["warmup_s"] = self.warmup_record["time_s"]
        last: dict[str, Any] = {}
        while self.iteration < cfg.iterations:
            last = self.train_iteration()
            bar.set_postfix(success=f"{last['success']:.2f}", wait=f"{last['actor_wait_s']:.2f}s")
            bar.update()
        bar.close()
        trained = time.perf_counter()
        times["training_s"] = (
            trained - start - times.get("evaluation_before_s", 0.0) - times.get("warmup_s", 0.0)
        )
        if self.worker is not None:
            with self.clock.measure("final_drain"):
                self.worker.drain()
        self.save_checkpoint()
        evaluation = self.evaluate() if cfg.eval_tasks > 0 else {}
        times["evaluation_s"] = time.perf_counter() - trained
        summary = {
            "algorithm": self.algorithm,
            # The settings the run trained with (comprl-gym table reads its lesson format).
            "config": cfg.to_dict(),
            "iterations": self.iteration,
            "rollouts": self.rollouts_done,
            "train_time_s": time.perf_counter() - start,
            "times": times,
            "eval_temperature": cfg.eval_temperature,
            "last": last,
            "evaluation_before": self.evaluation_before or {},
            "evaluation": evaluation,
            "comparison": compare_with_before(self.evaluation_before or {}, evaluation),
            "warmup": self.warmup_record or {},
            "provenance": self.write_provenance(),
        }
        if self.manager is not None:
            # A capped store drops acknowledged lessons; the run says how many it dropped.
            stats = self.manager.stats()
            summary["experience_store"] = {
                key: stats[key] for key in ("evicted", "max_entries", "eviction_policy")
            }
        atomic_write_json(self.output_dir / "summary.json", summary)
        plot_learning_curve(self.metrics.read(), summary, self.output_dir / "learning_curve.png")
        return summary

    def evaluate(self, before_training: bool = False) -> dict[str, Any]:
        """Evaluation tasks (seeds after the training pool), with and without experience, played
        by the trainer's own agent and measured by :mod:`comprl_gym.evaluation`.

        Each arm of an env id plays its ``eval_tasks`` episodes in one batched rollout call at
        ``eval_temperature`` (0: greedy), both arms with the same sampling seed. The episodes
        and their summary go to ``<output_dir>/eval/after`` (``eval/before`` for the untrained
        actor), a run folder that ``comprl-gym leaderboard`` reads; the returned table is
        :func:`~comprl_gym.evaluation.eval.arm_table`'s. ``before_training`` plays without
        experience only (the store is empty then).
        """
        cfg = self.config
        with_modes = [False, True] if self.manager is not None and not before_training else [False]
        records: list[dict[str, Any]] = []
        agent = f"{self.algorithm}:{cfg.actor.model}@iteration{self.iteration}"
        for env_id in cfg.env_ids:
            for with_exp in with_modes:
                self._play_calls = 0  # common random numbers: each arm samples with one seed
                jobs = [
                    (
                        self.make_env(env_id, with_exp, t, evaluation=True),
                        TaskRef(env_id, cfg.task_pool + t),
                        t,
                        with_exp,
                    )
                    for t in range(cfg.eval_tasks)
                ]
                condition = WITH_EXPERIENCE if with_exp else WITHOUT_EXPERIENCE
                when = "before training" if before_training else f"{condition} experience"
                episodes = self.play_jobs(
                    jobs, temperature=cfg.eval_temperature, progress=f"eval {when}"
                )
                records += [
                    episode_record(
                        episode,
                        EpisodeKey(env_id, t, cfg.seed, condition),
                        agent,
                        self.manager if with_exp else None,
                    )
                    for t, episode in enumerate(episodes)
                ]
        summary = summarize(records, paired=len(with_modes) == 2)
        write_run(
            self.output_dir / "eval" / ("before" if before_training else "after"), records, summary
        )
        if self.worker is not None:
            self.worker.drain()
        return arm_table(records, summary)

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {
            "config": self.config.to_dict(),
            "iteration": self.iteration,
            "rollouts_done": self.rollouts_done,
            "task_rng": self.task_rng.getstate(),
            "task_deck": list(self.task_deck),
            "revisit_next": [list(task) for task in self.revisit_next],
            "actor": self.actor.state_dict(),
            "evaluation_before": self.evaluation_before,
            "warmup": self.warmup_record,
            "actor_performance": self.actor_performance,
            "tasks_played": self.tasks_played,
        }
        if self.extractor is not None:
            state["extractor"] = self.extractor.state_dict()
            state["merges"] = self.merges
        if self.memory is not None:
            state["memory"] = self.memory.state_dict()
        return state

    def save_checkpoint(self) -> Path:
        if self.worker is not None:
            with self.clock.measure("checkpoint_drain"):
                self.worker.drain()
        store = None
        state = self.state_dict()
        if self.manager is not None:
            self.manager.save()
            store = self.store_dir
            # the store revision the actor trained against; resume checks the copy is at it
            state["store_revision"] = self.manager.revision
        return self.checkpoints.save(self.iteration, state, store_dir=store)

    def resume(self, step: int | None = None) -> None:
        """Continue from a checkpoint exactly: weights, optimisers, RNGs, store, counters."""
        data = self.checkpoints.load(step)
        state = data["state"]
        checkpoint = Path(data["path"]) / "trainer.pt"
        # hashed now: a later save prunes this checkpoint; named as another machine can read it
        self.resumed_from[portable_path(checkpoint)] = file_sha256(checkpoint)
        self.tasks_played = {k: dict(v) for k, v in state.get("tasks_played", {}).items()}
        self.iteration = int(state["iteration"])
        self.rollouts_done = int(state["rollouts_done"])
        self.task_rng.setstate(state["task_rng"])
        self.task_deck = list(state.get("task_deck", []))
        self.revisit_next = [(env_id, int(seed)) for env_id, seed in state.get("revisit_next", [])]
        self.evaluation_before = state.get("evaluation_before")
        self.warmup_record = state.get("warmup")
        self.actor_performance = {
            family: list(tally) for family, tally in state.get("actor_performance", {}).items()
        }
        self.actor.load_state_dict(state["actor"])
        if self.manager is not None and ("extractor" in state or "memory" in state):
            self._close_manager()
            self.checkpoints.restore_store(data["step"], self.store_dir)
            self.manager = self._open_manager()
            expected, found = state.get("store_revision"), self.manager.revision
            if expected is not None and found != expected:
                self._close_manager()
                raise DataError(
                    self.store_dir,
                    f"the restored store is at revision {found}, the checkpoint recorded "
                    f"{expected}",
                )
            if self.extractor is not None:
                self.extractor.manager = self.manager
                self.extractor.load_state_dict(state["extractor"])
            if self.memory is not None:
                self.memory.load_state_dict(state["memory"])
            self.merges = int(state.get("merges", 0))
            for key in [k for k in self._envs if k[0].experience is not None]:
                self._envs.pop(key).close()
        self.push_weights()
        restore_rng_state(data["rng"])
        self.metrics.truncate_after(self.iteration)
        logger.info("resumed from %s (iteration %d)", data["path"], self.iteration)

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
