"""Which tasks a trainer plays, and the tally of what it played.

A task is an env id and a reset seed (:class:`TaskRef`) from the run's pool (seeds
``[0, task_pool)``; evaluation plays the seeds after it). :meth:`TaskDealer.sample_tasks` deals
an iteration's task groups by ``config.task_schedule``: ``random`` draws each one, ``revisit``
deals the pool shuffled (every seed once before any twice) and gives half the groups to the
previous iteration's new tasks again. The tally (:meth:`TaskDealer.record_performance`) is what the
actor's critiques see and what the run's provenance says it trained on.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from comprl_gym.rollouts import Trajectory
from comprl_gym.trainers.config import TrainConfig


@dataclass
class TaskRef:
    """One task of the mixture: an env id and the reset seed that fixes the task."""

    env_id: str
    seed: int


class TaskDealer:
    """Deals the tasks and keeps the tally (a part of :class:`~comprl_gym.trainers.base.
    Trainer`, whose ``__init__`` seeds :attr:`task_rng` and checkpoints save all of it)."""

    # Set by Trainer.__init__.
    config: TrainConfig
    task_rng: random.Random
    task_deck: list[int]
    revisit_next: list[tuple[str, int]]
    actor_performance: dict[str, list[float]]
    tasks_played: dict[str, dict[str, int]]

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
