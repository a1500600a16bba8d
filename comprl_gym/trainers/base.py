"""What every trainer shares: tasks, rollouts, advantages, the actor step, checkpoints, metrics.

A trainer subclass only says which parts of the Complementary RL loop are on:

====================== ============== ================= ==================
trainer                experience     actor trained     extractor trained
====================== ============== ================= ==================
GRPOTrainer            no             yes               no extractor
ComplementaryRLTrainer K/2 + K/2      yes               yes (CISPO)
StaticExperience...    K/2 + K/2      yes               no (frozen)
ExperienceOnly...      K/2 + K/2      no (frozen)       yes (CISPO)
====================== ============== ================= ==================

One iteration: draw ``groups_per_iteration`` tasks from the env mixture; play K rollouts of
each (the first K/2 with experience when experience is on); compute advantages within each
(group, half); take one actor step on the actor's own tokens; push the weights to the rollout
engine; hand the finished episodes to the background experience worker; log metrics.

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
import os
import random
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

import comprl_gym  # noqa: F401  (registers the comprl/* ids)
from comprl_gym.agents.critique import DECISIONS, ExperienceCritic
from comprl_gym.agents.llm_agent import LLMAgent, LLMAgentConfig
from comprl_gym.agents.prompts import PromptConfig
from comprl_gym.core import ConfigurationError
from comprl_gym.evaluation.stats import paired_difference_interval, proportion_ci
from comprl_gym.llm.base import LLMBackend
from comprl_gym.llm.models import resolve_model
from comprl_gym.llm.transformers_backend import TransformersBackend
from comprl_gym.llm.vllm_backend import VLLMBackend
from comprl_gym.registration import REMOTE_ENV_ID
from comprl_gym.rollouts import RolloutConfig, Trajectory, collect_rollouts
from comprl_gym.seeding import restore_rng_state, seed_everything
from comprl_gym.trainers.advantages import grouped_advantages
from comprl_gym.trainers.background import ExperienceWorker, TimedManager, WaitClock
from comprl_gym.trainers.checkpoint import CheckpointManager
from comprl_gym.trainers.config import TrainConfig
from comprl_gym.trainers.extractor import ExperienceExtractor
from comprl_gym.trainers.metrics import MetricsLogger
from comprl_gym.trainers.policy import PolicyOptimizer, TrainSample
from comprl_gym.trainers.report import compare_with_before, plot_learning_curve
from comprl_gym.utils import atomic_write_json

logger = logging.getLogger(__name__)


@dataclass
class TaskRef:
    """One task of the mixture: an env id and the reset seed that fixes the task."""

    env_id: str
    seed: int


def make_actor_backend(config: TrainConfig, actor: PolicyOptimizer) -> LLMBackend:
    """The engine that samples the actor's rollouts (``config.rollout_backend``).

    ``transformers`` generates with the very module being trained (nothing to sync); ``vllm``
    holds its own copy of the weights, which :meth:`Trainer.push_weights` refreshes after
    every actor update. With ``distributed.inference_engines > 0`` the copies are that many
    vLLM engine actors on the Ray cluster (:class:`~comprl_gym.distributed.engines.EngineGroup`),
    every one refreshed by the push.
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
            backend = VLLMBackend(model, seed=config.seed, max_model_len=max_model_len)
        if actor.settings.lora.enabled or actor.steps:
            backend.update_weights(actor.trainable_state_dict())
        return backend
    # With LoRA the model is PEFT-wrapped: generation goes through the adapters.
    return TransformersBackend(model_object=actor.model, tokenizer_object=actor.tokenizer)


class Trainer:
    """Base class of the four trainers (see the module docstring)."""

    algorithm: ClassVar[str] = ""
    #: Split each group into K/2 rollouts with experience and K/2 without.
    uses_experience: ClassVar[bool] = False
    #: Take actor optimiser steps.
    trains_actor: ClassVar[bool] = True
    #: Take extractor optimiser steps.
    trains_extractor: ClassVar[bool] = False

    def __init__(self, config: TrainConfig):
        config.validate()
        self.config = config
        self.output_dir = Path(config.output_dir)
        self.output_dir.mkdir(parents=True, exist_ok=True)
        seed_everything(config.seed)
        if config.torch_threads > 0:
            import torch

            torch.set_num_threads(config.torch_threads)
        self.task_rng = random.Random(config.seed)
        #: The actor's running ``[score sum, episodes]`` per env family over training rollouts,
        #: shown to it when it critiques experiences (reference ``record_actor_performance``).
        self.actor_performance: dict[str, list[float]] = {}
        self.iteration = 0
        self.rollouts_done = 0
        #: The untrained actor's held-out results (``eval_before``), kept in checkpoints.
        self.evaluation_before: dict[str, Any] | None = None
        #: Agents made in this iteration: part of each batch's sampling seed.
        self._play_calls = 0
        self.clock = WaitClock()
        #: The Ray side when ``config.distributed.enabled`` (see :meth:`_start_distributed`).
        self.cluster: Any = None
        self.env_pool: Any = None
        if config.distributed.enabled:
            self._start_distributed()
        actor_settings = config.actor
        if not self.trains_actor:
            actor_settings.frozen = True
        self.actor = PolicyOptimizer.from_settings(
            actor_settings,
            loss="clipped",
            clip_eps_low=config.clip_eps_low,
            clip_eps_high=config.clip_eps_high,
            normalization=config.loss_normalization,
        )
        self.actor_backend = make_actor_backend(config, self.actor)
        if config.distributed.enabled and self.trains_actor:
            # The backend keeps the driver's optimiser (its model serves the rollouts); the
            # update runs over the trainer ranks, which copy rank 0's weights back into it.
            self.actor = self._data_parallel(self.actor)
        self.manager: Any = None
        self.extractor: ExperienceExtractor | None = None
        self.worker: ExperienceWorker | None = None
        if self.uses_experience:
            self._build_experience()
        self._envs: dict[tuple[str, bool, int, bool], Any] = {}
        #: Whether training envs retrieve experience (off during warm-up).
        self._retrieval = True
        self.metrics = MetricsLogger(self.output_dir, tensorboard=config.tensorboard)
        self.checkpoints = CheckpointManager(self.output_dir)
        if config.resume and self.checkpoints.latest_step() is not None:
            self.resume()

    # ------------------------------------------------------------------ scale-out
    def _start_distributed(self) -> None:
        """Join or start the Ray cluster and start the env workers (``docs/distributed.md``).

        The one place where the trainer turns remote: :meth:`make_env` then names envs by
        :class:`~comprl_gym.distributed.env_pool.EnvKey` and :meth:`play_jobs` plays them on
        the pool's workers; the agent and its model stay in this process.
        """
        # Ray is a heavy optional dependency (the ``distributed`` extra): imported only here.
        from comprl_gym.distributed.cluster import RayCluster
        from comprl_gym.distributed.env_pool import EnvPool, ExperienceEnvFactory, GymEnvFactory

        cfg = self.config
        if cfg.env_url:
            raise ConfigurationError("env_url and distributed.enabled: choose one way to env")
        env_kwargs = ({"max_steps": cfg.max_episode_steps}, dict(cfg.env_kwargs))
        factory: GymEnvFactory = GymEnvFactory(*env_kwargs)
        if self.uses_experience:
            self._check_distributed_experience()
            factory = ExperienceEnvFactory(
                *env_kwargs,
                service_name=cfg.distributed.experience_service_name,
                inject_top_k=cfg.experience.inject_top_k,
                search_budget=cfg.experience.search_and_ask_budget,
            )
        self.cluster = RayCluster(cfg.distributed).start()
        try:
            self.env_pool = EnvPool(cfg.distributed, factory)
        except Exception:
            self.cluster.shutdown()
            raise

    def _data_parallel(self, optimizer: PolicyOptimizer) -> Any:
        """``optimizer``'s updates over ``distributed.trainer_ranks`` Ray actors (itself for
        one rank); the cluster is up (:meth:`_start_distributed` ran first)."""
        from comprl_gym.distributed.data_parallel import data_parallel

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
        if not self.trains_extractor:
            extractor_settings.frozen = True
        optimizer = PolicyOptimizer.from_settings(
            extractor_settings,
            loss="cispo",
            cispo_eps_low=cfg.experience.cispo_eps_low,
            cispo_eps_high=cfg.experience.cispo_eps_high,
            cispo_variant=cfg.experience.cispo_variant,
            normalization=cfg.experience.cispo_normalization,
        )
        backend = TransformersBackend(
            model_object=optimizer.model, tokenizer_object=optimizer.tokenizer
        )
        if cfg.distributed.enabled and self.trains_extractor:
            optimizer = self._data_parallel(optimizer)
        self.manager = self._open_manager()
        self._warm_up_embedder()
        self.extractor = ExperienceExtractor(
            backend,
            optimizer,
            self.manager,
            cfg.experience,
            max_new_tokens=extractor_settings.max_new_tokens,
            temperature=extractor_settings.temperature,
            seed=cfg.seed,
        )
        self.worker = ExperienceWorker(self._experience_job, cfg.experience.async_extraction)
        self.extractor_stats: list[dict[str, float]] = []
        self.merges = 0

    def _warm_up_embedder(self) -> None:
        """Load the embedding model now, not inside the first rollout (where it would count as
        actor wait time)."""
        embedder = getattr(getattr(self.manager, "store", None), "embedder", None)
        if embedder is not None and hasattr(embedder, "encode"):
            embedder.encode(["warm up"])

    def _experience_job(self, job: dict[str, Any]) -> None:
        """Background work for one actor iteration (runs in the worker thread)."""
        assert self.extractor is not None
        episodes: list[Trajectory] = job["episodes"]
        step = job["step"]
        self.extractor.distill(episodes, step)
        self.extractor.credit_refinements(episodes, step)
        self.extractor.credit_critiques(episodes)
        # Warm-up builds the store only: no extractor update (reference: buffer collection and
        # training wait for ``_warmup_complete``).
        train = self.trains_extractor and not job.get("warmup", False)
        stats = self.extractor.train_step(step) if train else None
        if stats is not None:
            self.extractor_stats.append(stats)
        if len(self.manager) >= 2:
            try:  # the manager owns the schedule (merge_interval_steps)
                if self.extractor.maybe_merge(step) is not None:
                    self.merges += 1
            except Exception:  # a bad merge answer must not stop training
                logger.exception("merging the experience store failed; the store is unchanged")

    # ------------------------------------------------------------------ tasks and envs
    def sample_tasks(self) -> list[TaskRef]:
        cfg = self.config
        weights = cfg.env_weights or [1.0] * len(cfg.env_ids)
        return [
            TaskRef(
                self.task_rng.choices(cfg.env_ids, weights=weights)[0],
                self.task_rng.randrange(cfg.task_pool),
            )
            for _ in range(cfg.groups_per_iteration)
        ]

    def make_env(
        self, env_id: str, with_experience: bool, slot: int, evaluation: bool = False
    ) -> Any:
        """A cached env per (id, experience, slot, purpose): envs are reused across iterations.

        Evaluation envs are separate: their experience wrapper reads the store but never
        reports outcomes, so measuring the store does not change it (reference: validation env
        managers run with ``mode="val"``, which never writes).
        """
        key = (env_id, with_experience, slot, evaluation)
        if key not in self._envs:
            if env_id not in gym.registry:
                raise ConfigurationError(f"unknown env id {env_id!r}; `comprl-gym envs` lists them")
            if self.env_pool is not None:
                # Its key only: play_jobs places it on an env worker, which builds and keeps it.
                return self._env_key(env_id, with_experience, evaluation)
            if self.config.env_url:
                env = gym.make(
                    REMOTE_ENV_ID,
                    url=self.config.env_url,
                    env_id=env_id,
                    token=os.environ.get("COMPRL_GYM_SERVE_TOKEN"),
                    disable_env_checker=True,
                )
            else:
                kwargs = {"max_steps": self.config.max_episode_steps}
                kwargs.update(self.config.env_kwargs.get(env_id, {}))
                env = gym.make(env_id, disable_env_checker=True, **kwargs)
            if with_experience:
                env = self._wrap_with_experience(env, report_outcomes=not evaluation)
                if not evaluation:
                    self._apply_retrieval(env)
            self._envs[key] = env
        return self._envs[key]

    def _env_key(self, env_id: str, with_experience: bool, evaluation: bool) -> Any:
        from comprl_gym.distributed.env_pool import EnvKey

        # Training envs carry the warm-up switch (Trainer._set_retrieval) in their key: the
        # workers build one env per setting, as _apply_retrieval sets a local one.
        retrieval = self._retrieval or not with_experience or evaluation
        return EnvKey(env_id, with_experience, evaluation, retrieval)

    def _wrap_with_experience(self, env: Any, report_outcomes: bool) -> Any:
        from comprl_gym.wrappers import ExperienceAugmentedEnv

        settings = self.config.experience
        return ExperienceAugmentedEnv(
            env,
            TimedManager(self.manager, self.clock),
            inject_top_k=settings.inject_top_k,
            search_budget=settings.search_and_ask_budget,
            refiner=self._timed_refiner,
            report_outcomes=report_outcomes,
            # The LLMAgent puts info["experiences"] in its system prompt: show them once.
            experiences_in_observation=False,
        )

    @property
    def in_warmup(self) -> bool:
        """Whether the next iteration is a warm-up one (see ``experience.warmup_iterations``)."""
        return self.uses_experience and self.iteration < self.config.experience.warmup_iterations

    def _set_retrieval(self, enabled: bool) -> None:
        """Turn injection and ``search_and_ask`` on or off in the training envs, cached or new."""
        self._retrieval = enabled
        for (_, with_exp, _, evaluation), env in self._envs.items():
            if with_exp and not evaluation:
                self._apply_retrieval(env)

    def _apply_retrieval(self, env: Any) -> None:
        settings = self.config.experience
        env.injection.top_k = settings.inject_top_k if self._retrieval else 0
        env.search.budget = settings.search_and_ask_budget if self._retrieval else 0

    def _timed_refiner(self, question: str, experiences: list[Any], context: Any = None) -> str:
        """``search_and_ask`` answered by the extractor; the actor's wait is measured."""
        assert self.extractor is not None
        # The answer's whole time is inside the timed manager.search_and_ask; here we measure
        # the part spent waiting for the extractor model (busy writing or training).
        start = time.perf_counter()
        with self.extractor.lock:
            self.clock.add("of_which/extractor_lock_wait", time.perf_counter() - start)
            return self.extractor.refine(question, experiences, context)

    # ------------------------------------------------------------------ one iteration
    def play(self, tasks: list[TaskRef]) -> list[Trajectory]:
        """K rollouts of every task (the first K/2 with experience when it is on)."""
        k = self.config.group_size
        jobs = []
        slots: dict[tuple[str, bool], int] = {}
        for group, task in enumerate(tasks):
            for i in range(k):
                with_exp = self.uses_experience and i < k // 2
                slot = slots.get((task.env_id, with_exp), 0)
                slots[(task.env_id, with_exp)] = slot + 1
                env = self.make_env(task.env_id, with_exp, slot)
                jobs.append((env, task, group, with_exp))
        return self.play_jobs(jobs)

    def _agent(self, temperature: float | None = None) -> LLMAgent:
        """A fresh agent per batch, its sampling seed fixed by (run seed, iteration, batch).

        Seeding per batch rather than per agent lifetime makes a resumed run sample exactly what
        the uninterrupted run sampled.
        """
        settings = self.config.actor
        seed = (self.config.seed * 100_003 + self.iteration * 1_009 + self._play_calls) % 2**31
        self._play_calls += 1
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
        rollouts, so a critique sees the iterations before its own)."""
        for episode in episodes:
            tally = self.actor_performance.setdefault(episode.env_family, [0.0, 0])
            tally[0] += episode.score
            tally[1] += 1

    def play_jobs(
        self,
        jobs: list[tuple[Any, TaskRef, int, bool]],
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
        if self.env_pool is not None:  # keys from make_env, spread over the env workers
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
            self.actor_backend.update_weights(self.actor.trainable_state_dict())

    def episode_reward(self, episode: Trajectory) -> float:
        """The outcome reward (``config.reward``) minus the invalid-action penalty."""
        outcome = episode.score if self.config.reward == "score" else float(episode.won)
        return outcome - self.config.invalid_action_penalty * episode.invalid_actions

    def actor_samples(self, episodes: list[Trajectory]) -> list[TrainSample]:
        """The actor's training sequences, each with its episode's grouped advantage.

        Advantages are ``r - mean`` within each (task group, half) cell (reference
        ``reward_normalization: {grouping: traj_group_id_w_or_wo_memory, method: mean}``;
        ``scale_advantages`` divides by the cell's std). ``sample_mode="trajectory"``: one
        sequence per episode (per context segment when the budget folded it, each weighted
        ``1 / segments`` so that every episode weighs the same under the ``sequence``
        normalisation, the reference's ``seq-mean-token-mean``); ``"turn"``: one per model call.
        System, user, tool and env tokens are masked; only the tokens the actor sampled train.
        """
        cfg = self.config
        rewards = [self.episode_reward(e) for e in episodes]
        groups = [e.group for e in episodes]
        halves = [e.with_experience for e in episodes] if self.uses_experience else None
        advantages = grouped_advantages(rewards, groups, halves, scale=cfg.scale_advantages)
        samples = []
        for episode, advantage in zip(episodes, advantages):
            sequences = episode.training_sequences(cfg.sample_mode)
            weight = 1.0 / len(sequences) if cfg.sample_mode == "trajectory" and sequences else 1.0
            for sequence in sequences:
                samples.append(
                    TrainSample(
                        sequence.input_ids,
                        sequence.loss_mask,
                        float(advantage),
                        old_logprobs=sequence.logprobs if cfg.old_logprobs == "sampler" else None,
                        weight=weight,
                        meta={"env_id": episode.env_id, "group": episode.group},
                    )
                )
        return samples

    def update_actor(self, episodes: list[Trajectory]) -> dict[str, Any]:
        """``actor_epochs`` optimiser steps on the episodes' actor samples.

        One epoch with ``old_logprobs="trainer"`` is the reference's step (ratio 1 against the
        trainer's own log-probs); with more epochs the old log-probs are computed once, before
        the first step, so later epochs are clipped against the policy that was sampled.
        """
        samples = self.actor_samples(episodes)
        epochs = self.config.actor_epochs
        if epochs > 1 and self.config.old_logprobs == "trainer":
            samples = self.actor.fill_old_logprobs(samples)
        update: dict[str, Any] = {}
        for _ in range(epochs):
            update = self.actor.update(samples)
        return update

    def train_iteration(self) -> dict[str, Any]:
        """One iteration of the dual loop, in the reference's order
        (``FullyAsyncMemoryActorPipeline.run`` in ``roll/pipeline/agentic/multi_agentic_pipeline.py``):

        1. flush barrier: wait until at most ``experience.max_pending_iterations`` extraction
           jobs are pending, so the rollouts see what earlier iterations distilled;
        2. rollouts, K per task group, K/2 with experience (none retrieved during warm-up);
        3. hand the trajectories to the background worker (extraction, extractor CISPO update,
           merging), which runs while the actor updates;
        4. the actor's update (skipped during warm-up) and the weight push to the rollout engine.
        """
        started = time.perf_counter()
        self._play_calls = 0  # per-iteration sampling seeds (see _agent)
        warmup = self.in_warmup
        if self.worker is not None:
            with self.clock.measure("flush_barrier"):
                self.worker.wait_pending(self.config.experience.max_pending_iterations)
        tasks = self.sample_tasks()
        rollout_start = time.perf_counter()
        if self.uses_experience:
            self._set_retrieval(not warmup)
        episodes = self.play(tasks)
        rollout_s = time.perf_counter() - rollout_start
        self.iteration += 1
        for i, e in enumerate(episodes):
            # Deterministic ids, so a resumed run writes the same provenance.
            e.episode_id = f"it{self.iteration}-{i}"
        self.rollouts_done += len(episodes)
        self.record_performance(episodes)
        if self.worker is not None:
            submit_start = time.perf_counter()
            self.worker.submit({"episodes": episodes, "step": self.iteration, "warmup": warmup})
            self.clock.add("actor_blocked_on_worker", time.perf_counter() - submit_start)
        train_actor = self.trains_actor and not warmup
        update = self.update_actor(episodes) if train_actor else {}
        if train_actor and update.get("samples"):
            with self.clock.measure("weight_push"):
                self.push_weights()
        self.actor.model.eval()
        waits = self.clock.take()
        record = self._iteration_metrics(episodes, update, waits, rollout_s)
        record["warmup"] = int(warmup)
        record["iteration_time_s"] = time.perf_counter() - started
        self.metrics.log(self.iteration, record)
        every = self.config.checkpoint_every
        if every and self.iteration % every == 0:
            self.save_checkpoint()
        return record

    def _iteration_metrics(
        self,
        episodes: list[Trajectory],
        update: dict[str, Any],
        waits: dict[str, float],
        rollout_s: float,
    ) -> dict[str, Any]:
        record: dict[str, Any] = {
            "rollouts": self.rollouts_done,
            "success": float(np.mean([e.won for e in episodes])),
            "score": float(np.mean([e.score for e in episodes])),
            "reward": float(np.mean([self.episode_reward(e) for e in episodes])),
            "episode_steps": float(np.mean([e.steps for e in episodes])),
            "segments": float(np.mean([e.num_segments for e in episodes])),
            "invalid_actions": float(np.mean([e.invalid_actions for e in episodes])),
            "rollout_time_s": rollout_s,
        }
        if self.env_pool is not None:
            record["rollout/episodes_rerun"] = sum(e.reruns for e in episodes)
        for key, value in update.items():
            record[f"actor/{key}"] = value
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
            record["extractor/updates"] = self.extractor.updates
            record["extractor/pending"] = len(self.extractor.pending)
            for key, value in self.extractor.counts.to_dict().items():
                record[f"extractor/{key}"] = value
            record["worker_backlog"] = self.worker.backlog if self.worker else 0
            while self.extractor_stats:
                stats = self.extractor_stats.pop(0)
                for key, value in stats.items():
                    record[f"extractor/{key}"] = value
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
        last: dict[str, Any] = {}
        while self.iteration < cfg.iterations:
            last = self.train_iteration()
            bar.set_postfix(success=f"{last['success']:.2f}", wait=f"{last['actor_wait_s']:.2f}s")
            bar.update()
        bar.close()
        trained = time.perf_counter()
        times["training_s"] = trained - start - times.get("evaluation_before_s", 0.0)
        if self.worker is not None:
            with self.clock.measure("final_drain"):
                self.worker.drain()
        self.save_checkpoint()
        evaluation = self.evaluate() if cfg.eval_tasks > 0 else {}
        times["evaluation_s"] = time.perf_counter() - trained
        summary = {
            "algorithm": self.algorithm,
            "iterations": self.iteration,
            "rollouts": self.rollouts_done,
            "train_time_s": time.perf_counter() - start,
            "times": times,
            "eval_temperature": cfg.eval_temperature,
            "last": last,
            "evaluation_before": self.evaluation_before or {},
            "evaluation": evaluation,
            "comparison": compare_with_before(self.evaluation_before or {}, evaluation),
        }
        atomic_write_json(self.output_dir / "summary.json", summary)
        plot_learning_curve(self.metrics.read(), summary, self.output_dir / "learning_curve.png")
        return summary

    def evaluate(self, before_training: bool = False) -> dict[str, Any]:
        """Held-out tasks (seeds after the training pool), with and without experience.

        Episodes are sampled at ``eval_temperature`` (0: greedy); each (env id, mode) plays its
        ``eval_tasks`` episodes in one batched rollout call. ``success`` is the rate and
        ``success_ci`` its Wilson interval; with both modes, ``with_experience.difference`` is
        the paired difference with - without over the same tasks, with Newcombe's interval.
        ``before_training`` plays without experience only (the store is empty then) and keeps
        each episode's outcome in ``won`` for the before/after comparison.
        """
        cfg = self.config
        self._play_calls = 0
        with_modes = [False, True] if self.manager is not None and not before_training else [False]
        table: dict[str, Any] = {}
        for env_id in cfg.env_ids:
            row: dict[str, Any] = {}
            won: dict[bool, list[float]] = {}
            for with_exp in with_modes:
                jobs = [
                    (
                        self.make_env(env_id, with_exp, t, evaluation=True),
                        TaskRef(env_id, cfg.task_pool + t),
                        t,
                        with_exp,
                    )
                    for t in range(cfg.eval_tasks)
                ]
                label = "with_experience" if with_exp else "without_experience"
                when = "before training" if before_training else label.replace("_", " ")
                episodes = self.play_jobs(
                    jobs, temperature=cfg.eval_temperature, progress=f"eval {when}"
                )
                won[with_exp] = [float(e.won) for e in episodes]
                row[label] = {
                    "success": float(np.mean(won[with_exp])),
                    "success_ci": proportion_ci(won[with_exp]).to_dict(),
                    "score": float(np.mean([e.score for e in episodes])),
                    "steps": float(np.mean([e.steps for e in episodes])),
                    "episodes": len(episodes),
                    "won": won[with_exp],
                }
            if len(with_modes) == 2:  # the same held-out tasks in both modes, in job order: pairs
                row["with_experience"]["difference"] = paired_difference_interval(
                    won[True], won[False]
                ).to_dict()
            table[env_id] = row
        if self.worker is not None:
            self.worker.drain()
        return table

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {
            "config": self.config.to_dict(),
            "iteration": self.iteration,
            "rollouts_done": self.rollouts_done,
            "task_rng": self.task_rng.getstate(),
            "actor": self.actor.state_dict(),
            "evaluation_before": self.evaluation_before,
            "actor_performance": self.actor_performance,
        }
        if self.extractor is not None:
            state["extractor"] = self.extractor.state_dict()
            state["merges"] = self.merges
        return state

    def save_checkpoint(self) -> Path:
        if self.worker is not None:
            with self.clock.measure("checkpoint_drain"):
                self.worker.drain()
        store = None
        if self.manager is not None:
            self.manager.save()
            store = self.store_dir
        return self.checkpoints.save(self.iteration, self.state_dict(), store_dir=store)

    def resume(self, step: int | None = None) -> None:
        """Continue from a checkpoint exactly: weights, optimisers, RNGs, store, counters."""
        data = self.checkpoints.load(step)
        state = data["state"]
        self.iteration = int(state["iteration"])
        self.rollouts_done = int(state["rollouts_done"])
        self.task_rng.setstate(state["task_rng"])
        self.evaluation_before = state.get("evaluation_before")
        self.actor_performance = {
            family: list(tally) for family, tally in state.get("actor_performance", {}).items()
        }
        self.actor.load_state_dict(state["actor"])
        if self.extractor is not None and "extractor" in state:
            self._close_manager()
            self.checkpoints.restore_store(data["step"], self.store_dir)
            self.manager = self._open_manager()
            self.extractor.manager = self.manager
            self.extractor.load_state_dict(state["extractor"])
            self.merges = int(state.get("merges", 0))
            for key in [k for k in self._envs if k[1]]:
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
