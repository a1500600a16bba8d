"""The experience extractor: writes lessons from finished episodes, learns from their outcomes.

The extractor is a second LLM with its own weights. After a task group finishes it reads one
episode (the group's most informative one: a win if the group has wins and losses) and writes
an experience through the :class:`~comprl_gym.experience.ExperienceManager`. Later actor
episodes retrieve that experience; each one that used it reports a win (+1) or a loss (-1).
The extractor's reward for a generation is ``r(m)``, the mean of those +-1 outcomes over the
trajectories that used the experience ``m`` it wrote (averaged over the ids it wrote when it
wrote several). The outcomes are the store's ``uses``/``wins`` tallies (reported by the
experience wrapper), the one record of them. Samples are weighted by the manager's one
training-weight policy (:meth:`~comprl_gym.experience.ExperienceManager.sample_weights`:
cooldown, then ``(1 + training_count) ** -train_weight_power``). The extractor is trained with
CISPO, since by the time a reward is known the extractor has moved on and the sample is
off-policy.

Two formats: ``operations`` asks for the reference ``<answer>[{"function_name": "add", ...}]``
list (for capable models); ``plain`` asks for one short lesson and stores it as is (what a
135M model can write).

Example (reward attribution from the store's tallies, no model needed):
    >>> import tempfile
    >>> from comprl_gym.experience import ExperienceManager
    >>> manager = ExperienceManager(tempfile.mkdtemp())
    >>> a, b = manager.add(["## Title: A\\n## Description: a\\n## Content: go", "## Title: B\\n## Description: b\\n## Content: wait"])
    >>> manager.report_outcome([a, b], won=True)
    >>> manager.report_outcome([a], won=False)
    >>> generation_reward(manager, [a], min_uses=1), generation_reward(manager, [a, b], min_uses=1)
    (0.0, 0.5)
    >>> generation_reward(manager, [a], min_uses=3) is None
    True
    >>> manager.close()
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from comprl_gym.rollouts import Trajectory
from comprl_gym.trainers.config import ExperienceSettings
from comprl_gym.trainers.policy import PolicyOptimizer, TrainSample

logger = logging.getLogger(__name__)


def generation_reward(manager: Any, written_ids: Iterable[int], min_uses: int) -> float | None:
    """Mean ``r(m)`` (the store's ``(wins - losses) / uses``) over the ``written_ids`` used by at
    least ``min_uses`` trajectories; ``None`` when none was."""
    rewards = [e.reward for e in manager.get(list(written_ids)) if e.uses >= min_uses]
    return sum(rewards) / len(rewards) if rewards else None


@dataclass
class ExtractorGeneration:
    """One extractor output that wrote experiences: the tokens to train on and what they wrote."""

    prompt_token_ids: list[int]
    completion_token_ids: list[int]
    completion_logprobs: list[float] | None
    written_ids: list[int]
    actor_step: int
    times_trained: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


PLAIN_SYSTEM = (
    "You write short lessons for a game-playing agent. Read what happened and write ONE "
    "sentence of advice that would help on similar tasks. Write only the advice."
)


def plain_extractor_messages(episode: Trajectory) -> list[dict[str, str]]:
    """The prompt of the ``plain`` format: one episode, one sentence of advice."""
    outcome = "The agent succeeded." if episode.won else "The agent failed."
    return [
        {"role": "system", "content": PLAIN_SYSTEM},
        {
            "role": "user",
            "content": f"Task: {episode.task}\n{outcome}\nWhat happened:\n"
            f"{episode.transcript(600)}\nAdvice:",
        },
    ]


class ExperienceExtractor:
    """Writes experiences through the manager and trains the extractor model with CISPO.

    ``backend`` generates with the extractor's current weights (an
    :class:`~comprl_gym.llm.LLMBackend`); ``optimizer`` holds the same weights for training.
    ``lock`` serialises generation and training of the extractor model, which are called from
    the background loop and from ``search_and_ask`` during actor rollouts.
    """

    def __init__(
        self,
        backend: Any,
        optimizer: PolicyOptimizer,
        manager: Any,
        settings: ExperienceSettings,
        max_new_tokens: int = 48,
        temperature: float = 1.0,
        output_format: Literal["plain", "operations"] = "plain",
        seed: int = 0,
        on_weights_changed: Callable[[], None] | None = None,
    ):
        self.backend = backend
        self.optimizer = optimizer
        self.manager = manager
        self.settings = settings
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.output_format = output_format
        self.seed = seed
        self.on_weights_changed = on_weights_changed
        self.lock = threading.RLock()
        self.pending: list[ExtractorGeneration] = []
        self.updates = 0
        self.generations = 0
        self.failed_writes = 0

    # ------------------------------------------------------------------ generation
    def _sampling(self, max_tokens: int | None = None) -> Any:
        from comprl_gym.llm import SamplingParams

        self.generations += 1
        return SamplingParams(
            max_tokens=max_tokens or self.max_new_tokens,
            temperature=self.temperature,
            seed=self.seed * 1_000_003 + self.generations,
            logprobs=True,
        )

    def generate_chat(self, messages: list[dict[str, str]], max_tokens: int | None = None) -> Any:
        with self.lock:
            [generation] = self.backend.chat([messages], self._sampling(max_tokens))
        return generation

    def write(self, episode: Trajectory, actor_step: int) -> list[int]:
        """Read ``episode``, write experiences through the manager; return the ids written."""
        from comprl_gym.experience import Provenance

        provenance = Provenance(
            task_ids=(episode.task_id,),
            trajectory_ids=(episode.episode_id,),
            actor_step=actor_step,
            policy_version=f"extractor-update-{self.updates}",
            env_family=episode.env_family,
        )
        if self.output_format == "plain":
            generation = self.generate_chat(plain_extractor_messages(episode))
            text = generation.text.replace("<|im_end|>", "").strip()
            if len(text) < 8:
                self.failed_writes += 1
                return []
            title = f"{episode.env_family}: {episode.task[:80]}"
            ids = self.manager.add(
                [{"title": title, "description": episode.task, "content": text}], provenance
            )
        else:
            from comprl_gym.experience import prompts

            shown = [r.experience for r in self.manager.retrieve(episode.task, record=False)]
            messages = prompts.build_extractor_messages(
                episode.task,
                "success" if episode.won else "failure",
                episode.transcript(),
                shown,
                episode.env_family,
            )
            generation = self.generate_chat(messages)
            result = self.manager.apply_extractor_output(
                generation.text, [e.id for e in shown], provenance
            )
            ids = list(result.written_ids) if result.ok else []
            if not result.ok:
                self.failed_writes += 1
        if ids:
            self.pending.append(
                ExtractorGeneration(
                    list(generation.prompt_token_ids),
                    list(generation.completion_token_ids),
                    None
                    if generation.completion_logprobs is None
                    else list(generation.completion_logprobs),
                    [int(i) for i in ids],
                    actor_step,
                )
            )
        return [int(i) for i in ids]

    def write_from_group(self, episodes: list[Trajectory], actor_step: int) -> list[int]:
        """Write experiences from one finished task group.

        The episodes most worth a lesson come first: a win when the group has wins and losses
        (what worked), else the first episode.
        """
        if not episodes:
            return []
        ordered = sorted(episodes, key=lambda e: (not e.won, e.episode_id))
        written: list[int] = []
        for episode in ordered[: max(1, self.settings.experiences_per_group)]:
            written += self.write(episode, actor_step)
        return written

    def refine(self, question: str, experiences: list[Any], context: str | None = None) -> str:
        """Answer ``search_and_ask`` from retrieved experiences (the extractor's refiner)."""
        from comprl_gym.experience import prompts

        messages = prompts.build_refiner_messages(question, experiences, context)
        generation = self.generate_chat(messages, max_tokens=self.max_new_tokens)
        return generation.text.replace("<|im_end|>", "").strip()

    def merge_window(self, window: list[Any]) -> str:
        """Decide keep / merge / drop for a window of entries (the manager applies it)."""
        from comprl_gym.experience import prompts

        generation = self.generate_chat(prompts.build_merge_messages(window))
        return generation.text

    # ------------------------------------------------------------------ rewards and training
    def ready_samples(self, actor_step: int) -> list[tuple[ExtractorGeneration, TrainSample]]:
        """Generations with a reward and a positive weight from the manager's training-weight
        policy (0 inside the cooldown)."""
        candidates = [g for g in self.pending if g.times_trained < self.settings.max_train_count]
        weights = self.manager.sample_weights([g.written_ids for g in candidates], actor_step)
        chosen = []
        for generation, weight in zip(candidates, weights):
            if weight <= 0:
                continue
            reward = generation_reward(self.manager, generation.written_ids, self.settings.min_uses)
            if reward is None:
                continue
            sample = TrainSample.from_generation(
                generation.prompt_token_ids,
                generation.completion_token_ids,
                advantage=reward,
                completion_logprobs=generation.completion_logprobs,
                weight=weight,
                meta={"written_ids": generation.written_ids},
            )
            chosen.append((generation, sample))
        chosen.sort(key=lambda pair: (pair[0].times_trained, pair[0].actor_step))
        return chosen[: self.settings.extractor_batch_size]

    def train_step(self, actor_step: int) -> dict[str, float] | None:
        """One CISPO update on the ready samples, or ``None`` when none is ready."""
        ready = self.ready_samples(actor_step)
        if not ready:
            return None
        with self.lock:
            stats = self.optimizer.update([sample for _, sample in ready])
            self.updates += 1
            for generation, _ in ready:
                generation.times_trained += 1
            ids = sorted({m for g, _ in ready for m in g.written_ids})
            self.manager.mark_trained(ids, actor_step)
            if self.on_weights_changed is not None and not self.optimizer.settings.frozen:
                self.on_weights_changed()
        # Generations that can never be trained again are forgotten.
        self.pending = [g for g in self.pending if g.times_trained < self.settings.max_train_count]
        stats["reward_mean"] = sum(s.advantage for _, s in ready) / len(ready)
        return stats

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        return {
            "optimizer": self.optimizer.state_dict(),
            "pending": [g.to_dict() for g in self.pending],
            "updates": self.updates,
            "generations": self.generations,
            "failed_writes": self.failed_writes,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.pending = [ExtractorGeneration(**g) for g in state["pending"]]
        self.updates = int(state["updates"])
        self.generations = int(state["generations"])
        self.failed_writes = int(state["failed_writes"])
