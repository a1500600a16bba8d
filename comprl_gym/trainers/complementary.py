"""Complementary RL (arXiv 2603.17621), one iteration read top to bottom, and its ablations.

A policy actor (trained by GRPO on outcome rewards) and an experience extractor (trained by
CISPO on whether its lessons helped the actor win) co-evolve. One iteration,
:meth:`ComplementaryRLTrainer.train_iteration`, in the reference's order
(``FullyAsyncMemoryActorPipeline.run``, ``roll/pipeline/agentic/multi_agentic_pipeline.py``):

1. **Flush barrier**: wait until at most ``experience.max_pending_iterations`` extraction jobs
   are pending, so the rollouts see what earlier iterations distilled.
2. **Rollouts** (:meth:`~ComplementaryRLTrainer.rollouts`): ``groups_per_iteration`` tasks, K
   episodes each; the first K/2 with experience (injected at reset, ``search_and_ask``
   answered by the extractor), the other K/2 without.
3. **Hand-off**: the episodes go to the background worker, which runs step 6 while the actor
   updates.
4. **Grouped advantages** (:meth:`~ComplementaryRLTrainer.advantages`): the outcome reward
   ``r`` (:meth:`~ComplementaryRLTrainer.reward`) minus its mean within each (task group, half)
   cell, so neither half is credited for the experience rather than for its actions.
5. **Actor update**: ``actor_epochs`` steps of :meth:`~ComplementaryRLTrainer.actor_loss`
   (PPO clipped surrogate by default) on the actor's own tokens, then the weight push to the
   rollout engine.
6. **Experience** (:meth:`~ComplementaryRLTrainer.experience_job`, in the background; the
   credit rules are :mod:`comprl_gym.trainers.credit`):
   a. credit: each lesson gets the outcome (+1/-1) of every episode that read it (only the
      lessons in its prompt: ``Trajectory.shown_experience_ids``); the extractor's
      ``search_and_ask`` answers and the actor's critiques are credited too;
   b. distillation: the extractor writes lessons from the with-experience episodes in its
      lesson format (:mod:`comprl_gym.lessons.formats`), or a memory without a model
      (``experience.memory: exemplar | cases``, :mod:`comprl_gym.lessons.memories`)
      stores them, and the step ends here;
   c. extractor update, after a write fence (``ExperienceManager.fence``: buffered counters
      and writes under way land first): ``r(m)`` of each ready generation (the mean outcome of the episodes
      that used its lessons; answers that wrote nothing train as failures,
      ``experience.train_on_rejected``) -> the extractor's samples, weighted by their training
      count -> their advantages (:meth:`~ComplementaryRLTrainer.extractor_advantages`: ``r -
      mean(r)`` over the batch, or with ``experience.extractor_baseline: paired`` each use's
      outcome minus its group's without-experience episodes, or with ``choice`` ``r`` minus
      the mean over the batch's generations that gave the same answer) -> one CISPO step
      (:meth:`~ComplementaryRLTrainer.extractor_loss`);
   d. merging: every ``merge_interval_steps`` actor steps the extractor merges the store.

The ablations are this loop with parts switched off, one class flag each:

====================================== ============ ============== ==================
trainer (``algorithm``)                experience   actor trained  extractor trained
====================================== ============ ============== ==================
:class:`ComplementaryRLTrainer`        K/2 + K/2    yes            yes (CISPO)
(``complementary``)
:class:`GRPOTrainer` (``grpo``)        no           yes            no extractor
:class:`StaticExperienceTrainer`       K/2 + K/2    yes            no (frozen)
(``static_experience``)
:class:`ExperienceOnlyTrainer`         K/2 + K/2    no (frozen)    yes (CISPO)
(``experience_only``)
====================================== ============ ============== ==================

A variant of your own is one subclass overriding a hook (:meth:`~ComplementaryRLTrainer.
rollouts`, :meth:`~ComplementaryRLTrainer.reward`, :meth:`~ComplementaryRLTrainer.advantages`,
:meth:`~ComplementaryRLTrainer.actor_loss`, :meth:`~ComplementaryRLTrainer.extractor_loss`,
:meth:`~ComplementaryRLTrainer.extractor_advantages`,
:meth:`~ComplementaryRLTrainer.experience_job`) and ``algorithm: your.module:YourTrainer`` in
the config. Everything that is not the algorithm (models, engines, envs, Ray, checkpoints,
metrics, evaluation) is :class:`~comprl_gym.trainers.base.Trainer`'s.

Example:
    >>> from comprl_gym.trainers import ComplementaryRLTrainer, GRPOTrainer
    >>> ComplementaryRLTrainer.uses_experience, ComplementaryRLTrainer.trains_extractor
    (True, True)
    >>> GRPOTrainer.uses_experience, GRPOTrainer.trains_actor
    (False, True)
"""

from __future__ import annotations

import logging
import time
from typing import Any

from comprl_gym.rollouts import Trajectory
from comprl_gym.trainers import credit
from comprl_gym.trainers.advantages import grouped_advantages
from comprl_gym.trainers.base import Trainer
from comprl_gym.trainers.extractor import distilled_episodes
from comprl_gym.trainers.losses import CISPO, ClippedPG, Loss
from comprl_gym.trainers.policy import TrainSample
from comprl_gym.trainers.tasks import TaskRef

logger = logging.getLogger(__name__)


class ComplementaryRLTrainer(Trainer):
    """Actor (GRPO, grouped advantages within each half) + extractor (CISPO), co-evolving.

    Its hooks, in the order an iteration calls them: :meth:`rollouts` (step 2), :meth:`reward`
    and :meth:`advantages` (step 4), :meth:`actor_loss` (step 5), and in the background
    :meth:`experience_job` (step 6), which calls :meth:`extractor_advantages` and
    :meth:`extractor_loss`.
    """

    algorithm = "complementary"
    uses_experience = True
    trains_actor = True
    trains_extractor = True

    # ------------------------------------------------------------------ one iteration
    def train_iteration(self) -> dict[str, Any]:
        """One iteration of the dual loop (the module docstring's steps 1-6)."""
        cfg = self.config
        started = time.perf_counter()
        self._play_calls = 0  # per-iteration sampling seeds (see Trainer._agent)
        warmup = self.in_warmup  # warm-up: retrieve nothing, train nothing, fill the store

        # 1. Flush barrier.
        if self.worker is not None:
            with self.clock.measure("flush_barrier"):
                self.worker.wait_pending(cfg.experience.max_pending_iterations)

        # 2. Rollouts, K per task group, K/2 with experience.
        tasks = self.sample_tasks()
        rollout_start = time.perf_counter()
        self._retrieval = not warmup
        episodes = self.rollouts(tasks)
        rollout_s = time.perf_counter() - rollout_start
        self.iteration += 1
        for i, episode in enumerate(episodes):
            # Deterministic ids, so a resumed run writes the same provenance.
            episode.episode_id = f"it{self.iteration}-{i}"
        self.rollouts_done += len(episodes)
        self.record_performance(episodes)

        # 3. Hand the episodes to the experience worker (step 6 runs beside the actor's update).
        if self.worker is not None:
            submit_start = time.perf_counter()
            self.worker.submit({"episodes": episodes, "step": self.iteration, "warmup": warmup})
            self.clock.add("actor_blocked_on_worker", time.perf_counter() - submit_start)

        # 4. Rewards and grouped advantages.
        rewards = [self.reward(e) for e in episodes]
        advantages = self.advantages(episodes, rewards)

        # 5. Actor update and weight push.
        update: dict[str, Any] = {}
        if self.trains_actor and not warmup:
            update = self.update_actor(episodes, advantages)
            if update.get("samples"):
                with self.clock.measure("weight_push"):
                    self.push_weights()
        self.actor.model.eval()

        record = self.iteration_metrics(episodes, update, self.clock.take(), rollout_s, rewards)
        record["warmup"] = int(warmup)
        record["iteration_time_s"] = time.perf_counter() - started
        self.metrics.log(self.iteration, record)
        if cfg.checkpoint_every and self.iteration % cfg.checkpoint_every == 0:
            self.save_checkpoint()
        return record

    # ------------------------------------------------------------------ step 2: rollouts
    def rollouts(self, tasks: list[TaskRef]) -> list[Trajectory]:
        """K episodes of every task, the first K/2 with experience when the trainer uses it."""
        k = self.config.group_size
        jobs = []
        slots: dict[tuple[str, bool], int] = {}
        for group, task in enumerate(tasks):
            for i in range(k):
                with_exp = self.uses_experience and i < k // 2
                slot = slots.get((task.env_id, with_exp), 0)
                slots[(task.env_id, with_exp)] = slot + 1
                jobs.append((self.make_env(task.env_id, with_exp, slot), task, group, with_exp))
        return self.play_jobs(jobs)

    # ------------------------------------------------------------------ step 4: advantages
    def reward(self, episode: Trajectory) -> float:
        """The outcome reward (``config.reward``: score or win) minus the invalid-action
        penalty per invalid action."""
        outcome = episode.score if self.config.reward == "score" else float(episode.won)
        return outcome - self.config.invalid_action_penalty * episode.invalid_actions

    def advantages(self, episodes: list[Trajectory], rewards: list[float]) -> list[float]:
        """``r - mean`` within each (task group, half) cell (reference ``reward_normalization:
        {grouping: traj_group_id_w_or_wo_memory, method: mean}``); ``scale_advantages``
        divides by the cell's std; ``positive_advantages_only`` sets the negative ones to 0.
        Without experience the cell is the group (plain GRPO)."""
        groups = [e.group for e in episodes]
        halves = [e.with_experience for e in episodes] if self.uses_experience else None
        scale = self.config.scale_advantages
        advantages = [float(a) for a in grouped_advantages(rewards, groups, halves, scale=scale)]
        if self.config.positive_advantages_only:
            return [max(0.0, a) for a in advantages]
        return advantages

    # ------------------------------------------------------------------ step 5: actor update
    def actor_loss(self) -> Loss:
        """``config.actor_loss``: the PPO/GRPO clipped surrogate ``-min(rho A, clip(rho, 1 -
        eps_low, 1 + eps_high) A)`` per trained token (reference ``pg_clip: 0.2``), or CISPO's
        ``-sg(clip(rho)) A log p``; ``loss_normalization`` averages over each sequence's tokens
        then over sequences (``sequence``) or over all tokens (``token``)."""
        cfg = self.config
        if cfg.actor_loss == "cispo":
            return CISPO(cfg.clip_eps_low, cfg.clip_eps_high, normalization=cfg.loss_normalization)
        return ClippedPG(cfg.clip_eps_low, cfg.clip_eps_high, cfg.loss_normalization)

    def actor_samples(
        self, episodes: list[Trajectory], advantages: list[float]
    ) -> list[TrainSample]:
        """The actor's training sequences, each with its episode's advantage.

        ``sample_mode="trajectory"``: one sequence per episode (per context segment when the
        budget folded it, each weighted ``1 / segments`` so that every episode weighs the same
        under the ``sequence`` normalisation, the reference's ``seq-mean-token-mean``);
        ``"turn"``: one per model call. System, user, tool and env tokens are masked; only the
        tokens the actor sampled train.
        """
        cfg = self.config
        samples = []
        for episode, advantage in zip(episodes, advantages):
            sequences = episode.training_sequences(cfg.sample_mode)
            weight = 1.0 / len(sequences) if cfg.sample_mode == "trajectory" and sequences else 1.0
            for sequence in sequences:
                samples.append(
                    TrainSample(
                        sequence.input_ids,
                        sequence.loss_mask,
                        advantage,
                        old_logprobs=sequence.logprobs if cfg.old_logprobs == "sampler" else None,
                        weight=weight,
                        meta={"env_id": episode.env_id, "group": episode.group},
                        temperature=cfg.actor.temperature,
                        allowed_token_ids=sequence.allowed_token_ids,
                    )
                )
        return samples

    def update_actor(self, episodes: list[Trajectory], advantages: list[float]) -> dict[str, Any]:
        """``actor_epochs`` optimiser steps of :meth:`actor_loss` on the actor's samples.

        One epoch with ``old_logprobs="trainer"`` is the reference's step (ratio 1 against the
        trainer's own log-probs); with more epochs the old log-probs are computed once, before
        the first step, so later epochs are clipped against the policy that was sampled.
        """
        samples = self.actor_samples(episodes, advantages)
        epochs = self.config.actor_epochs
        if epochs > 1 and self.config.old_logprobs == "trainer":
            samples = self.actor.fill_old_logprobs(samples)
        update: dict[str, Any] = {}
        for _ in range(epochs):
            update = self.actor.update(samples)
        return update

    # ------------------------------------------------------------------ step 6: experience
    def extractor_loss(self) -> Loss:
        """CISPO with the ``experience.cispo_*`` settings: ``w = clip(rho, 1 - eps_low, 1 +
        eps_high)`` detached, loss ``-w A log p`` (reference ``memory_cispo_epsilon_*`` 0.1)."""
        return CISPO.of_extractor(self.config.experience)

    def extractor_advantages(
        self,
        rewards: list[float],
        answers: list[tuple[int, ...]] | None = None,
        contexts: list[tuple[int, ...]] | None = None,
    ) -> list[float]:
        """The advantages of one extractor batch from its rewards ``r(m)`` and its answers
        (each generation's completion tokens) (``experience.extractor_baseline``,
        :func:`~comprl_gym.trainers.credit.rule_advantages`): ``r - mean(r)`` over the batch
        (reference ``memory_reward_normalization: {grouping: batch, method: mean}``),
        ``paired``'s ``r`` itself (already a difference against the episodes played without
        the lesson), ``choice``'s ``r`` minus the mean over the batch's same answers, or
        ``context``'s minus the mean over the lessons about the same episode (each
        generation's prompt tokens are its context)."""
        return credit.rule_advantages(
            rewards, self.config.experience.extractor_baseline, answers, contexts
        )

    def experience_job(self, job: dict[str, Any]) -> None:
        """Credit, distillation, the extractor's update and merging for one iteration's
        episodes (in the background worker; in line with ``async_extraction: false``)."""
        episodes: list[Trajectory] = job["episodes"]
        step = job["step"]
        extractor = self.extractor
        # a. credit: each lesson's uses (the episodes that read it, won or lost), then the
        # extractor's search_and_ask answers and the actor's critiques
        if extractor is None:
            credit.credit_uses(episodes, self.manager)
        else:
            extractor.credit_uses(episodes)
            extractor.credit_refinements(episodes, step)
            extractor.credit_critiques(episodes)
        # b. distillation
        if self.memory is not None:  # a memory without a model: nothing to train or merge
            for episode in distilled_episodes(episodes, self.config.experience):
                self.memory.learn(episode, self.manager, actor_step=step)
            return
        assert extractor is not None
        extractor.distill(episodes, step)
        # c. extractor update: r(m) -> the extractor's samples -> their advantages -> one
        # CISPO step; warm-up only fills the store (reference: buffer collection and training
        # wait for ``_warmup_complete``)
        if self.trains_extractor and not job.get("warmup", False):
            # The write fence (reference: pending bank writes are flushed before the extractor
            # trains): r(m) reads every outcome and counter written so far. The actor waits
            # only while the fence holds the store's write lock.
            fence_start = time.perf_counter()
            revision = self.manager.fence()
            fence_s = time.perf_counter() - fence_start
            ready = extractor.ready_samples(step, self.extractor_advantages)
            if ready:
                stats = extractor.update(ready, step)
                stats.update(store_revision=revision, fence_s=fence_s)
                self.extractor_stats.append(stats)
        # d. merging, on the manager's schedule (merge_interval_steps)
        if len(self.manager) >= 2:
            try:
                if extractor.maybe_merge(step) is not None:
                    self.merges += 1
            except Exception:  # a bad merge answer must not stop training
                logger.exception("merging the experience store failed; the store is unchanged")


class GRPOTrainer(ComplementaryRLTrainer):
    """Group Relative Policy Optimization on outcome rewards: no experience, no extractor."""

    algorithm = "grpo"
    uses_experience = False
    trains_actor = True
    trains_extractor = False


class StaticExperienceTrainer(ComplementaryRLTrainer):
    """The actor learns with experience written by a frozen extractor (paper: 0.59)."""

    algorithm = "static_experience"
    uses_experience = True
    trains_actor = True
    trains_extractor = False


class ExperienceOnlyTrainer(ComplementaryRLTrainer):
    """The extractor learns from the outcomes of a frozen actor (paper: 0.33)."""

    algorithm = "experience_only"
    uses_experience = True
    trains_actor = False
    trains_extractor = True
