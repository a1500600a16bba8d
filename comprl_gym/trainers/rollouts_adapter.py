"""Glue between a trainer and the rollout machinery of :mod:`comprl_gym.trainers.rollouts`.

* :func:`make_actor_backend` — the engine that samples the actor's rollouts: a
  :class:`~comprl_gym.llm.TransformersBackend` over the very model being trained (no sync
  needed), or a :class:`~comprl_gym.llm.VLLMBackend` that receives the weights after every
  actor update (:func:`push_weights`).
* :func:`play_episodes` — plays ``(env, task, group, with_experience)`` jobs in one batched
  :func:`~comprl_gym.trainers.rollouts.collect_rollouts` call with an
  :class:`~comprl_gym.agents.llm_agent.LLMAgent` and returns
  :class:`~comprl_gym.trainers.base.PlayedEpisode` records.
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger(__name__)


def make_actor_backend(config: Any, actor: Any) -> Any:
    """The rollout engine of ``config.rollout_backend`` for the ``actor`` PolicyOptimizer."""
    if config.rollout_backend == "vllm":
        from comprl_gym.llm import VLLMBackend
        from comprl_gym.llm.models import resolve_model

        backend = VLLMBackend(str(resolve_model(config.actor.model)), seed=config.seed)
        if actor.settings.lora.enabled or actor.steps:
            backend.update_weights(actor.trainable_state_dict())
        return backend
    from comprl_gym.llm import TransformersBackend

    model = actor.model
    if hasattr(model, "get_base_model"):  # PEFT: generate through the adapter-wrapped model
        model = actor.model
    return TransformersBackend(model_object=model, tokenizer_object=actor.tokenizer)


def push_weights(trainer: Any) -> None:
    """After an actor update: make the rollout engine sample from the new weights."""
    backend = trainer.actor_backend
    if getattr(backend, "name", "") == "vllm":
        backend.update_weights(trainer.actor.trainable_state_dict())
    # transformers: the backend generates with the trained module itself; nothing to copy.


def _agent(trainer: Any, greedy: bool) -> Any:
    """A fresh agent per batch, its sampling seed fixed by (run seed, iteration, batch).

    Seeding per batch rather than per agent lifetime makes a resumed run sample exactly what
    the uninterrupted run sampled.
    """
    from comprl_gym.agents.llm_agent import LLMAgent, LLMAgentConfig
    from comprl_gym.agents.prompts import PromptConfig

    settings = trainer.config.actor
    counter = trainer.__dict__.get("_play_calls", 0)
    trainer._play_calls = counter + 1
    seed = (trainer.config.seed * 100_003 + trainer.iteration * 1_009 + counter) % 2**31
    return LLMAgent(
        trainer.actor_backend,
        LLMAgentConfig(
            temperature=0.0 if greedy else settings.temperature,
            max_tokens=settings.max_new_tokens,
            seed=seed,
            prompt=PromptConfig(history_window=trainer.config.history_turns),
        ),
    )


def play_episodes(
    trainer: Any, jobs: list[tuple[Any, Any, int, bool]], greedy: bool = False
) -> list[Any]:
    """Play every job once, batched; return PlayedEpisode records in job order."""
    from comprl_gym.trainers.base import PlayedEpisode
    from comprl_gym.trainers.rollouts import RolloutConfig, collect_rollouts

    envs = [env for env, _, _, _ in jobs]
    seeds = [task.seed for _, task, _, _ in jobs]
    trajectories = collect_rollouts(
        envs,
        _agent(trainer, greedy),
        seeds,
        # Search steps of the experience wrapper do not count towards the env's step limit.
        config=RolloutConfig(
            max_turns=trainer.config.max_episode_steps
            + trainer.config.experience.search_and_ask_budget
            + 1
        ),
    )
    episodes = []
    for (_, task, group, with_exp), traj in zip(jobs, trajectories):
        if traj.error:
            logger.warning("episode %s failed: %s", traj.episode_id, traj.error)
        episodes.append(
            PlayedEpisode(
                env_id=task.env_id,
                env_family=traj.env_family,
                seed=task.seed,
                group=group,
                with_experience=with_exp,
                task=traj.task,
                task_id=str(traj.task_id),
                won=bool(traj.won),
                score=float(traj.score),
                steps=int(traj.steps),
                invalid_actions=int(traj.invalid_actions),
                turns=[
                    (
                        list(t.prompt_token_ids),
                        list(t.completion_token_ids),
                        None if t.completion_logprobs is None else list(t.completion_logprobs),
                    )
                    for t in traj.turns
                    if t.completion_token_ids
                ],
                transcript=[(t.action, t.observation) for t in traj.turns],
                experience_ids=[int(i) for i in traj.experience_ids],
                search_and_ask_calls=int(traj.search_and_ask_calls),
            )
        )
    return episodes
