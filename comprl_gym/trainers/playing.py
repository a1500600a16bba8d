"""Playing episodes: the envs a trainer builds, the actor as an agent, one batched rollout call.

Training and evaluation envs are built from an :class:`~comprl_gym.env_factory.EnvSpec` (in
process, on an env server, or on Ray env workers) and reused across iterations; the agent is
the actor's rollout engine behind an :class:`~comprl_gym.agents.llm_agent.LLMAgent`, made
fresh per batch with a seed that a resumed run reproduces; :meth:`Playing.play_jobs` plays a
batch of ``(env, task, group, with_experience)`` jobs through
:func:`~comprl_gym.rollouts.collect_rollouts`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, ClassVar

from comprl_gym.agents.critique import ExperienceCritic
from comprl_gym.agents.llm_agent import LLMAgent, LLMAgentConfig
from comprl_gym.agents.prompts import PromptConfig
from comprl_gym.env_factory import EnvSpec, ExperienceSpec, make_env, require_registered
from comprl_gym.llm.base import LLMBackend
from comprl_gym.rollouts import RolloutConfig, Trajectory, collect_rollouts
from comprl_gym.trainers.background import TimedManager, WaitClock
from comprl_gym.trainers.config import TrainConfig
from comprl_gym.trainers.extractor import ExperienceExtractor
from comprl_gym.trainers.tasks import TaskRef

logger = logging.getLogger(__name__)

#: A job of :meth:`Playing.play_jobs`: the env (or its spec on Ray), the task, its group, and
#: whether it is played with experience.
Job = tuple[Any, TaskRef, int, bool]


class Playing:
    """Envs, agents and batched rollouts (a part of :class:`~comprl_gym.trainers.base.Trainer`)."""

    # Set by Trainer (its class flags and __init__); performance_of is TaskDealer's.
    uses_experience: ClassVar[bool]
    config: TrainConfig
    iteration: int
    actor_backend: LLMBackend
    manager: Any
    extractor: ExperienceExtractor | None
    clock: WaitClock
    env_pool: Any
    _envs: dict[tuple[EnvSpec, int], Any]
    _retrieval: bool
    _play_calls: int
    performance_of: Callable[[str], tuple[float, int]]

    # ------------------------------------------------------------------ envs
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
        ``experience.inject_sample_from`` candidates (salted by ``slot``, in
        ``experience.inject_order``), of the lessons about their own task with
        ``experience.inject_same_task``; evaluation envs show the top ``inject_top_k``.
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
                inject_order="random" if evaluation else settings.inject_order,
                same_task_only=settings.inject_same_task and not evaluation,
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

    # ------------------------------------------------------------------ agents
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
        arms (:mod:`comprl_gym.evaluation.stream`)."""
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
                choose_listed=self.config.choose_listed_action,
                prompt=PromptConfig(
                    conversation=self.config.conversation,
                    max_context_tokens=self.config.max_context_tokens,
                    history_window=self.config.history_turns,
                ),
            ),
            critic=critic,
        )

    # ------------------------------------------------------------------ playing
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
