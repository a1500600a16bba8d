"""What a trainer logs each iteration: outcomes, the update, waits, the extractor and the store.

:meth:`RunMetrics.iteration_metrics` builds one iteration's record (the line
:class:`~comprl_gym.trainers.metrics.MetricsLogger` writes to ``metrics.jsonl``): outcomes per
env id and per half, the actor's update, where the actor waited, the extractor's counters and
the store's size, and, when due, the measurements that cost model calls: the store's lessons
judged against the right fact (:meth:`~RunMetrics.store_verdicts`), the extractor probe
(:mod:`comprl_gym.trainers.probing`) and the actor's lesson sensitivity
(:mod:`comprl_gym.trainers.sensitivity`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from comprl_gym.agents.critique import DECISIONS
from comprl_gym.agents.llm_agent import LLMAgent
from comprl_gym.families import family_spec, verdict_counts
from comprl_gym.lessons.memories import ExemplarMemory
from comprl_gym.registration import families_of
from comprl_gym.rollouts import Trajectory
from comprl_gym.trainers.advantages import zero_variance_fraction
from comprl_gym.trainers.background import ExperienceWorker
from comprl_gym.trainers.config import TrainConfig
from comprl_gym.trainers.extractor import ExperienceExtractor
from comprl_gym.trainers.metrics import warn_on_collapse
from comprl_gym.trainers.probing import probe_metrics
from comprl_gym.trainers.sensitivity import lesson_sensitivity, measures_sensitivity


class RunMetrics:
    """One iteration's metrics record (a part of :class:`~comprl_gym.trainers.base.Trainer`;
    the algorithm calls :meth:`iteration_metrics` after its update)."""

    # Set by Trainer (its class flags and __init__); agent is Playing's.
    uses_experience: ClassVar[bool]
    config: TrainConfig
    iteration: int
    rollouts_done: int
    env_pool: Any
    manager: Any
    extractor: ExperienceExtractor | None
    memory: ExemplarMemory | None
    worker: ExperienceWorker | None
    extractor_stats: list[dict[str, float]]
    agent: Callable[..., LLMAgent]

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
