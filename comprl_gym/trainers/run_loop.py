"""The run: evaluation before, warm-up, the iterations, the last checkpoint, evaluation after.

:meth:`RunLoop.train` runs what is left of a run (a resumed one starts where its checkpoint
stopped) and writes its ``summary.json``, ``provenance.json`` and learning curve;
:meth:`RunLoop.evaluate` plays the held-out tasks with and without experience through
:mod:`comprl_gym.evaluation`, so ``comprl-gym leaderboard`` reads a trainer's evaluation like
any other run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from comprl_gym.evaluation.eval import (
    WITH_EXPERIENCE,
    WITHOUT_EXPERIENCE,
    EpisodeKey,
    arm_table,
    episode_record,
    summarize,
    write_run,
)
from comprl_gym.evaluation.provenance import PROVENANCE_FILE, training_provenance
from comprl_gym.rollouts import Trajectory
from comprl_gym.trainers.background import ExperienceWorker, WaitClock
from comprl_gym.trainers.config import TrainConfig
from comprl_gym.trainers.extractor import ExperienceExtractor
from comprl_gym.trainers.metrics import MetricsLogger
from comprl_gym.trainers.report import compare_with_before, plot_learning_curve
from comprl_gym.trainers.tasks import TaskRef
from comprl_gym.trainers.warmup import run_warmup
from comprl_gym.utils import atomic_write_json, jsonable


class RunLoop:
    """The run from start to summary (a part of :class:`~comprl_gym.trainers.base.Trainer`;
    each iteration is the algorithm's ``train_iteration``)."""

    # Set by Trainer (its class flags and __init__); the methods are its other parts'.
    algorithm: ClassVar[str]
    config: TrainConfig
    output_dir: Path
    iteration: int
    rollouts_done: int
    evaluation_before: dict[str, Any] | None
    warmup_record: dict[str, Any] | None
    resumed_from: dict[str, str]
    manager: Any
    extractor: ExperienceExtractor | None
    worker: ExperienceWorker | None
    clock: WaitClock
    metrics: MetricsLogger
    _play_calls: int
    train_iteration: Callable[[], dict[str, Any]]
    save_checkpoint: Callable[[], Path]
    training_tasks: Callable[[], dict[str, Any]]
    make_env: Callable[..., Any]
    play_jobs: Callable[..., list[Trajectory]]

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
