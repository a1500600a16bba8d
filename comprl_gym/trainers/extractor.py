"""The experience extractor: writes lessons from finished episodes, learns from their outcomes.

The extractor is a second LLM with its own weights (the reference's "memory model"). It follows
the Complementary RL reference code (github pUmpKin-Co/ComplementaryRL, ``roll/pipeline/
agentic/``; the file names below point into it):

* **What is distilled** (``experience.distill``): by default every trajectory played with
  experience, one extraction each, never the without-experience half (reference
  ``hook_on_episode_end`` -> ``_should_update_trajectory_memory``). ``group`` keeps the older
  mode: one episode per task group (a win first).
* **Input** (reference ``async_memory_manager.py::build_memory_model_messages``): the whole
  episode, each action followed by the observation it produced (Environment / Agent / Tool
  Environment), ``Outcome: SUCCESS/FAILURE`` and the lessons the episode was shown
  (``**Memory Entry i**``), see :func:`~comprl_gym.experience.prompts.format_interaction`.
* **Output**: ``<answer>`` with a JSON list of ``add`` / ``update`` / ``return`` operations,
  memories as ``<title>..</title><content>..</content>``; ``return`` writes nothing. The
  ``plain`` format (one sentence of advice, stored as it is) stays for tiny models; the
  ``stem`` format starts that sentence with the family's lesson stem
  (:attr:`~comprl_gym.families.FamilySpec.lesson_stem`: "In the Vault of Marrow the staircase
  down is at the end of the", then " east branch." or " west branch.") so the model writes
  only the fact, one choice that CISPO's credit can reward or punish (``plain`` for a family
  without a stem). A lesson
  whose :func:`~comprl_gym.experience.quality.lesson_quality` score is below
  ``experience.min_quality`` is not written.
* **Reward** (reference ``multi_agentic_pipeline.py::_collect_triggered_interactions_to_buffer``):
  per generation, ``r`` = the mean of +1 (success) / -1 (failure) over the trajectories that
  used the entries it wrote, pooled over those entries: the store's uses/wins tallies, counted
  from when the generation wrote them. A refinement answer (``search_and_ask``, answered by
  :meth:`ExperienceExtractor.refine`) is a sample whose ``r`` is the asking trajectory's
  outcome; a merge call is a sample whose ``r`` comes from the trajectories that later used the
  entries it produced (reference ``_merge_single_task``: ``triggered_interaction`` = the last
  successful merge call).
* **Actor critique** (reference ``memory_integration_mixin.py::add_memory_metadata_to_rollout``):
  when the actor critiqued the experiences retrieved for an episode, that use counts
  :func:`critiqued_outcome` (reject -1, refine 0.5, accept score + 1) instead of +1/-1 for the
  generations that wrote them (:meth:`ExperienceExtractor.credit_critiques`); an unparsed
  critique leaves the plain outcome, as in the reference.
* **Advantage** (reference ``memory_reward_normalization: {grouping: batch, method: mean}``,
  ``memory_adv_estimator: reinforce``): ``A = r - mean(r over the extractor batch)``, times the
  manager's one training-count weight (:meth:`~comprl_gym.experience.ExperienceManager.
  sample_weights`: 0 inside the cooldown, else ``(1 + training_count) ** -train_weight_power``;
  reference ``_build_memory_batch_from_buffer_entries``).
* **Loss**: CISPO (:func:`~comprl_gym.trainers.losses.cispo_loss`), one step per batch with the
  old log-probs recomputed from the current weights (reference ``_start_memory_model_train``
  recomputes them; the sampler's log-probs are never used against a changed model).

Example (reward attribution from the store's tallies, no model needed):
    >>> import tempfile
    >>> from comprl_gym.experience import ExperienceManager
    >>> manager = ExperienceManager(tempfile.mkdtemp())
    >>> a, b = manager.add(["<title>A</title><content>go</content>", "<title>B</title><content>wait</content>"])
    >>> manager.report_outcome([a, b], won=True)
    >>> manager.report_outcome([a], won=False)
    >>> generation_reward(manager, [a]), generation_reward(manager, [a, b])  # (1-1)/2, (2-1)/3
    (0.0, 0.3333333333333333)
    >>> generation_reward(manager, [a], min_uses=3) is None
    True
    >>> batch_advantages([1.0, -1.0, 1 / 3])  # r - mean(r): mean = 1/9
    [0.8888888888888888, -1.1111111111111112, 0.2222222222222222]
    >>> generation_reward(manager, [a], adjustment=critiqued_outcome(-1.0, 1.0) - 1)  # (-1-1)/2
    -1.0
    >>> manager.close()
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, Literal

from comprl_gym.core import ConfigurationError
from comprl_gym.experience import prompts
from comprl_gym.experience.exemplar import exemplar_lesson
from comprl_gym.experience.operations import ExtractorOutputError, parse_extractor_output
from comprl_gym.experience.quality import lesson_quality
from comprl_gym.experience.records import Provenance
from comprl_gym.experience.search_and_ask import SearchAndAskSyntax
from comprl_gym.families import LessonStem, family_spec
from comprl_gym.rollouts import Trajectory
from comprl_gym.trainers.config import ExperienceSettings
from comprl_gym.trainers.policy import PolicyOptimizer, TrainSample

logger = logging.getLogger(__name__)

OutputFormat = Literal["plain", "stem", "operations", "exemplar"]
#: Where an extractor sample came from (``rejected``: an answer that wrote nothing because it
#: was malformed or failed the quality gate, trained on as a failure).
SampleKind = Literal["extract", "refine", "merge", "rejected"]
#: The fixed reward of a rejected answer: a failed use's outcome.
REJECTED_REWARD = -1.0
#: Refinements not matched to a finished trajectory after this many crediting rounds are
#: forgotten (e.g. answers given during evaluation, which trains nothing).
REFINEMENT_ROUNDS = 2


def generation_reward(
    manager: Any,
    written_ids: Iterable[int],
    min_uses: int = 1,
    baseline: tuple[int, int] = (0, 0),
    adjustment: float = 0.0,
) -> float | None:
    """``r`` of a generation: the mean of +1 (win) / -1 (loss) over the trajectories that used
    the entries it wrote, pooled over those entries (the store's uses/wins), minus the
    ``baseline`` ``(uses, wins)`` those entries already had when it wrote them (a merged entry
    inherits tallies); ``None`` while fewer than ``min_uses`` uses were reported.
    ``adjustment`` is the sum, over the uses the actor critiqued, of the critiqued outcome
    minus the +1/-1 the store counted (:meth:`ExperienceExtractor.credit_critiques`)."""
    found = manager.get(list(written_ids))
    uses = sum(e.uses for e in found) - baseline[0]
    wins = sum(e.wins for e in found) - baseline[1]
    if uses < max(1, min_uses):
        return None
    return (2 * wins - uses + adjustment) / uses


def critiqued_outcome(critic_score: float, episode_score: float) -> float:
    """The outcome one critiqued use gives the generation that wrote the experience: the critic
    score itself when below 1 (reject -1, refine 0.5), else the episode's score plus it
    (accept: score + 1); an outcome of exactly 0 counts -1 as every failure does (reference
    ``add_memory_metadata_to_rollout``, then ``_collect_triggered_interactions_to_buffer``).

    Example:
        >>> critiqued_outcome(-1.0, 1.0), critiqued_outcome(0.5, 0.0), critiqued_outcome(1.0, 0.0)
        (-1.0, 0.5, 1.0)
        >>> critiqued_outcome(1.0, 1.0)
        2.0
    """
    outcome = critic_score if critic_score < 1 else episode_score + critic_score
    return -1.0 if outcome == 0 else float(outcome)


def batch_advantages(rewards: list[float]) -> list[float]:
    """``r - mean(r)`` over the extractor batch (reference ``grouped_reward_norm`` with
    ``grouping: batch, method: mean``; no division by the std)."""
    mean = sum(rewards) / len(rewards) if rewards else 0.0
    return [r - mean for r in rewards]


@dataclass
class ExtractorGeneration:
    """One extractor output worth training on: its tokens, what it wrote and how it is scored.

    ``kind`` is ``extract`` (wrote entries from a trajectory), ``merge`` (produced merged
    entries) or ``refine`` (answered a ``search_and_ask`` question). ``baseline`` is the
    ``(uses, wins)`` of ``written_ids`` when they were written; ``reward`` is fixed for a
    refinement once its trajectory is known. ``critic_adjustment`` corrects ``r`` for the uses
    the actor critiqued (see :func:`generation_reward`). ``completion_logprobs`` are the
    sampler's, kept for diagnostics only: the trainer recomputes the old log-probs.
    """

    prompt_token_ids: list[int]
    completion_token_ids: list[int]
    completion_logprobs: list[float] | None
    written_ids: list[int]
    actor_step: int
    times_trained: int = 0
    #: Batches it was in that took no step (no signal): it goes behind fresher samples, and
    #: after ``max_train_count`` such batches it is forgotten.
    times_skipped: int = 0
    kind: str = "extract"
    baseline: tuple[int, int] = (0, 0)
    reward: float | None = None
    question: str = ""
    answer: str = ""
    rounds: int = 0
    critic_adjustment: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExtractorGeneration:
        data = dict(data)
        data["baseline"] = tuple(data.get("baseline", (0, 0)))
        return cls(**data)


def plain_extractor_messages(episode: Trajectory) -> list[dict[str, str]]:
    """The prompt of the ``plain`` format: one episode, one sentence of advice."""
    return prompts.build_plain_extractor_messages(
        episode.task, episode.won, episode.transcript(600)
    )


def plain_lesson(text: str) -> str | None:
    """The lesson of a ``plain`` answer: its first line, or ``None`` when under 8 characters."""
    lines = [line.strip() for line in text.replace("<|im_end|>", "").strip().splitlines()]
    lesson = next((line for line in lines if line), "")
    return lesson if len(lesson) >= 8 else None


def operations_messages(
    episode: Trajectory, shown: list[Any], max_chars: int | None = None
) -> list[dict[str, str]]:
    """The prompt of the ``operations`` format (the reference's extractor input)."""
    interaction = prompts.format_interaction(
        episode.task, episode.turns, max_chars, is_tool_call=_is_tool_call
    )
    return prompts.build_extractor_messages(interaction, episode.won, shown, episode.env_family)


_SEARCH = SearchAndAskSyntax()


def _is_tool_call(action: str) -> bool:
    return _SEARCH.parse(action) is not None


@dataclass
class ExtractorCounts:
    """What the extractor did with its generations (logged as ``extractor/*``)."""

    extractions: int = 0
    malformed: int = 0
    declined: int = 0
    rejected_lessons: int = 0
    written: int = 0
    refinements: int = 0
    merge_calls: int = 0
    critiqued_uses: int = 0

    def to_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


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
        output_format: OutputFormat | None = None,
        seed: int = 0,
        on_weights_changed: Callable[[], None] | None = None,
    ):
        self.backend = backend
        self.optimizer = optimizer
        self.manager = manager
        self.settings = settings
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        #: ``operations``, ``plain``, ``stem`` or ``exemplar``; ``settings.extractor_format``
        #: unless given.
        self.output_format = output_format or settings.extractor_format
        self.seed = seed
        self.on_weights_changed = on_weights_changed
        self.lock = threading.RLock()
        self.pending: list[ExtractorGeneration] = []
        self.updates = 0
        self.generations = 0
        self.counts = ExtractorCounts()
        self._merge_calls: list[Any] = []
        #: Per lesson id: (sum, count) of its uses' paired outcomes (:meth:`credit_uses`).
        self.paired_credit: dict[int, tuple[float, int]] = {}
        #: One record per sample of every batch :meth:`train_step` saw: the ids it wrote, its
        #: advantage, whether the batch stepped, and its r under both baselines (``batch`` and
        #: ``paired``), so the rules can be compared on the same samples.
        self.batch_log: list[dict[str, Any]] = []

    @property
    def failed_writes(self) -> int:
        """Extractions that wrote nothing because the answer was malformed."""
        return self.counts.malformed

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

    def fill_stem(self, messages: list[dict[str, str]], stem: LessonStem) -> tuple[Any, str | None]:
        """Generate a reply to ``messages`` that starts with the stem's opening, which is part
        of the prompt, so the sample's completion is only the model's choice: one token, the
        first of one of the stem's choices. Returns the generation and the lesson, the opening
        and the chosen choice (``None`` if the backend sampled another token). Needs a backend
        that takes raw prompts and ``allowed_token_ids`` (transformers, vLLM)."""
        if not getattr(self.backend, "supports_raw_prompts", False):
            raise ConfigurationError(
                f"extractor_format 'stem' needs a backend that takes raw prompts; "
                f"{getattr(self.backend, 'name', 'this backend')} does not (use 'plain')"
            )
        prompt = self.backend.apply_chat_template(messages) + stem.opening
        firsts = [self._first_token(choice) for choice in stem.choices]
        if len(set(firsts)) != len(firsts):
            raise ConfigurationError(
                f"the lesson stem's choices {stem.choices} do not start with distinct tokens: "
                "the extractor could not tell which one it chose"
            )
        params = replace(self._sampling(1), allowed_token_ids=tuple(firsts))
        with self.lock:
            [generation] = self.backend.generate([prompt], params)
        chosen = generation.completion_token_ids[:1]
        if not chosen or chosen[0] not in firsts:
            return generation, None
        return generation, stem.opening + stem.choices[firsts.index(chosen[0])]

    def _first_token(self, text: str) -> int:
        ids = self.backend.tokenizer(text, add_special_tokens=False)["input_ids"]
        return int(ids[0])

    def _keep(self, generation: Any, kind: str, ids: list[int], actor_step: int, **extra: Any):
        record = ExtractorGeneration(
            list(generation.prompt_token_ids),
            list(generation.completion_token_ids),
            None
            if generation.completion_logprobs is None
            else list(generation.completion_logprobs),
            [int(i) for i in ids],
            actor_step,
            kind=kind,
            **extra,
        )
        self.pending.append(record)
        return record

    def _good_enough(self, text: str, env_family: str | None) -> bool:
        """The ``min_quality`` gate: whether a lesson may be written."""
        if self.settings.min_quality <= 0:
            return True
        if lesson_quality(text, env_family).score >= self.settings.min_quality:
            return True
        self.counts.rejected_lessons += 1
        return False

    def shown_experiences(self, episode: Trajectory) -> list[Any]:
        """The lessons the episode was shown that are still in the store (reference: the
        first turn's retrieved uids, ``last_turn_uids``), in the order shown."""
        return [e for e in self.manager.get(episode.shown_experience_ids) if e.status == "active"]

    def write(self, episode: Trajectory, actor_step: int) -> list[int]:
        """Read ``episode``, write experiences through the manager; return the ids written."""
        self.counts.extractions += 1
        provenance = Provenance(
            task_ids=(episode.task_id,),
            trajectory_ids=(episode.episode_id,),
            actor_step=actor_step,
            policy_version=f"extractor-update-{self.updates}",
            env_family=episode.env_family,
        )
        if self.output_format == "exemplar":
            # No model: a won episode's task and actions, verbatim (no sample to train on).
            lesson = exemplar_lesson(episode.task, [t.action for t in episode.turns], episode.won)
            if lesson is None:
                self.counts.declined += 1
                return []
            ids = self.manager.add(
                [{"title": f"{episode.env_family}: won", "description": "", "content": lesson}],
                provenance,
            )
            self.counts.written += len(ids)
            return [int(i) for i in ids]
        if self.output_format in ("plain", "stem"):
            spec = family_spec(episode.env_family) if self.output_format == "stem" else None
            stem = spec.stem_for(episode.task_id) if spec is not None else None
            if stem is None:
                generation = self.generate_chat(plain_extractor_messages(episode))
                lesson = plain_lesson(generation.text)
            else:
                generation, lesson = self.fill_stem(plain_extractor_messages(episode), stem)
            if lesson is None:
                self.counts.malformed += 1
                return self._reject(generation, actor_step)
            if not self._good_enough(lesson, episode.env_family):
                return self._reject(generation, actor_step)
            title = f"{episode.env_family}: {episode.task[:80]}"
            ids = self.manager.add(
                [{"title": title, "description": "", "content": lesson}], provenance
            )
        else:
            shown = self.shown_experiences(episode)
            generation = self.generate_chat(
                operations_messages(episode, shown, self.settings.extractor_transcript_chars)
            )
            try:
                operations = parse_extractor_output(
                    generation.text, len(shown), self.settings.max_text_chars
                )
            except ExtractorOutputError as exc:
                # The reference skips the whole generation: nothing written, never trained
                # (here a failure sample with ``train_on_rejected``).
                logger.info("extractor answer ignored: %s", exc)
                self.counts.malformed += 1
                return self._reject(generation, actor_step)
            if not operations:
                self.counts.declined += 1
                return []
            passed = [
                op
                for op in operations
                if op.text is None
                or self._good_enough(f"{op.text.title}. {op.text.content}", episode.env_family)
            ]
            if not passed:  # every lesson it wrote failed the quality gate
                return self._reject(generation, actor_step)
            operations = passed
            result = self.manager.apply_operations(operations, [e.id for e in shown], provenance)
            ids = list(result.written_ids) if result.ok else []
            if not result.ok:
                self.counts.malformed += 1
        self.counts.written += len(ids)
        if ids:
            self._keep(generation, "extract", ids, actor_step)
        return [int(i) for i in ids]

    def _reject(self, generation: Any, actor_step: int) -> list[int]:
        """An answer that wrote nothing (malformed, or every lesson below ``min_quality``):
        with ``experience.train_on_rejected`` a sample with the reward of a failed use
        (:data:`REJECTED_REWARD`), so the extractor learns what not to write; the reference
        drops it. Returns the ids written: none."""
        if self.settings.train_on_rejected:
            self._keep(generation, "rejected", [], actor_step, reward=REJECTED_REWARD)
        return []

    def distill(self, episodes: list[Trajectory], actor_step: int) -> list[int]:
        """Write experiences from one iteration's finished episodes (``experience.distill``).

        ``with_experience`` (the reference): every episode played with experience, none of the
        others. ``group``: per task group, the ``experiences_per_group`` most informative
        episodes (a win first when the group has wins and losses).
        """
        written: list[int] = []
        if self.settings.distill == "with_experience":
            for episode in episodes:
                if episode.with_experience and not episode.error:
                    written += self.write(episode, actor_step)
            return written
        groups: dict[int, list[Trajectory]] = {}
        for episode in episodes:
            groups.setdefault(episode.group, []).append(episode)
        for group in groups.values():
            ordered = sorted(group, key=lambda e: (not e.won, e.episode_id))
            for episode in ordered[: max(1, self.settings.experiences_per_group)]:
                written += self.write(episode, actor_step)
        return written

    # ------------------------------------------------------------------ uses
    def credit_uses(self, episodes: list[Trajectory]) -> int:
        """Record each lesson's uses in one iteration's episodes: every with-experience episode
        (not cut short) used the lessons it read (:attr:`~comprl_gym.rollouts.Trajectory.
        shown_experience_ids`), won or lost. The store's uses/wins tallies get them (the
        reference rule reads those); for ``extractor_baseline: paired`` each use's outcome
        (+1/-1) minus the mean outcome of its task group's without-experience episodes is
        added to :attr:`paired_credit`. Returns the uses recorded."""
        by_group: dict[int, list[float]] = {}
        for episode in episodes:
            if not episode.with_experience and not episode.error:
                by_group.setdefault(episode.group, []).append(1.0 if episode.won else -1.0)
        uses = 0
        for episode in episodes:
            ids = episode.shown_experience_ids
            if not episode.with_experience or episode.error or not ids:
                continue
            self.manager.report_outcome(ids, won=episode.won)
            without = by_group.get(episode.group)
            paired = (1.0 if episode.won else -1.0) - (
                sum(without) / len(without) if without else 0.0
            )
            for lesson in ids:
                total, count = self.paired_credit.get(lesson, (0.0, 0))
                self.paired_credit[lesson] = (total + paired, count + 1)
            uses += len(ids)
        return uses

    def paired_reward(self, written_ids: Iterable[int]) -> float | None:
        """``r`` under ``extractor_baseline: paired``: the mean paired outcome over the uses of
        the lessons a generation wrote (``None`` below ``min_uses`` uses).

        Example (a use won while the group's without-half won 1 of 2: 1 - 0 = 1; a use lost
        while it lost both: -1 - (-1) = 0):
            >>> extractor = ExperienceExtractor.__new__(ExperienceExtractor)
            >>> extractor.settings = ExperienceSettings(min_uses=1)
            >>> extractor.paired_credit = {3: (1.0, 1), 4: (0.0, 1)}
            >>> extractor.paired_reward([3, 4]), extractor.paired_reward([5]) is None
            (0.5, True)
        """
        total = count = 0.0
        for lesson in written_ids:
            t, c = self.paired_credit.get(int(lesson), (0.0, 0))
            total, count = total + t, count + c
        if count < max(1, self.settings.min_uses):
            return None
        return total / count

    # ------------------------------------------------------------------ refinements
    def refine(
        self, question: str, experiences: list[Any], context: dict[str, Any] | None = None
    ) -> str:
        """Answer ``search_and_ask`` from retrieved experiences (the extractor's refiner).

        The answer is kept as a training sample until :meth:`credit_refinements` finds the
        trajectory that asked and gives it that trajectory's outcome.
        """
        messages = prompts.build_refiner_messages(question, experiences, context)
        generation = self.generate_chat(messages, max_tokens=self.max_new_tokens)
        answer = prompts.extract_answer(generation.text.replace("<|im_end|>", ""))
        self.counts.refinements += 1
        self._keep(generation, "refine", [], -1, question=question, answer=answer)
        return answer

    def credit_refinements(self, episodes: list[Trajectory], actor_step: int) -> int:
        """Give each refinement the outcome (+1 won, -1 lost) of the with-experience trajectory
        whose ``search_and_ask`` turn it answered (reference ``add_memory_metadata_to_rollout``:
        the asking trajectory's score, 0 -> -1). Returns how many were credited."""
        open_ = [g for g in self.pending if g.kind == "refine" and g.reward is None]
        credited = 0
        for episode in episodes:
            if not episode.with_experience:
                continue
            for turn in episode.turns:
                question = _SEARCH.parse(turn.action)
                if question is None:
                    continue
                match = next(
                    (
                        g
                        for g in open_
                        if g.reward is None
                        and g.question == question
                        and g.answer in turn.next_observation
                    ),
                    None,
                )
                if match is not None:
                    match.reward = 1.0 if episode.won else -1.0
                    match.actor_step = actor_step
                    credited += 1
        for g in open_:
            g.rounds += 1
        self.pending = [
            g
            for g in self.pending
            if not (g.kind == "refine" and g.reward is None and g.rounds >= REFINEMENT_ROUNDS)
        ]
        return credited

    # ------------------------------------------------------------------ actor critiques
    def credit_critiques(self, episodes: list[Trajectory]) -> int:
        """Let each critiqued use count :func:`critiqued_outcome` instead of the +1/-1 that
        :class:`~comprl_gym.wrappers.OutcomeReporting` tallied, for every pending extract or
        merge generation that wrote one of the critiqued experiences (reference
        ``add_memory_metadata_to_rollout``: the critic score overrides the episode score of
        the first turn's triggered interactions). An unparsed critique (score ``None``) and an
        episode cut short (its outcome was never reported) change nothing. Returns the uses
        corrected.
        """
        corrected = 0
        for episode in episodes:
            critique = episode.critique
            if critique is None or critique.get("score") is None or episode.error:
                continue
            ids = {int(i) for i in critique.get("ids", [])} & {
                int(i) for i in episode.experience_ids
            }
            delta = critiqued_outcome(float(critique["score"]), episode.score) - (
                1.0 if episode.won else -1.0
            )
            for generation in self.pending:
                if generation.kind == "refine":
                    continue
                uses = len(ids.intersection(generation.written_ids))
                generation.critic_adjustment += uses * delta
                corrected += uses
        self.counts.critiqued_uses += corrected
        return corrected

    # ------------------------------------------------------------------ merging
    def merge_chunk(self, texts: list[str]) -> str:
        """One merge call: ``<<<KNOWLEDGE_ITEM>>>`` blocks or ``return`` for a chunk of items."""
        generation = self.generate_chat(prompts.build_merge_messages(texts))
        self._merge_calls.append(generation)
        self.counts.merge_calls += 1
        return generation.text

    def maybe_merge(self, actor_step: int) -> Any:
        """Let the manager merge on its schedule; each family's answering call becomes a sample
        scored by the trajectories that later use the entries it produced."""
        self._merge_calls = []
        report = self.manager.maybe_merge(
            actor_step, self.merge_chunk, policy_version=f"extractor-update-{self.updates}"
        )
        if report is not None:
            for scope in report.scopes:
                if scope.answer_call is None or not scope.new_ids:
                    continue
                found = self.manager.get(scope.new_ids)
                baseline = (sum(e.uses for e in found), sum(e.wins for e in found))
                self._keep(
                    self._merge_calls[scope.answer_call],
                    "merge",
                    scope.new_ids,
                    actor_step,
                    baseline=baseline,
                )
        self._merge_calls = []
        return report

    # ------------------------------------------------------------------ rewards and training
    def _max_train_count(self, generation: ExtractorGeneration) -> int:
        # A refinement's or a rejection's reward never changes: training on it again would
        # only repeat it.
        fixed = generation.kind in ("refine", "rejected")
        return 1 if fixed else self.settings.max_train_count

    def _trainable_again(self, generation: ExtractorGeneration) -> bool:
        limit = self._max_train_count(generation)
        return generation.times_trained < limit and generation.times_skipped < limit

    def reward_of(
        self, generation: ExtractorGeneration, baseline: str | None = None
    ) -> float | None:
        """``r`` of a generation under ``baseline`` (default ``extractor_baseline``; ``None``:
        not enough uses yet). A refinement's and a rejection's reward is fixed when they are
        made."""
        if generation.kind in ("refine", "rejected"):
            return generation.reward
        if (baseline or self.settings.extractor_baseline) == "paired":
            return self.paired_reward(generation.written_ids)
        return generation_reward(
            self.manager,
            generation.written_ids,
            self.settings.min_uses,
            tuple(generation.baseline),  # type: ignore[arg-type]
            generation.critic_adjustment,
        )

    def ready_samples(self, actor_step: int) -> list[tuple[ExtractorGeneration, TrainSample]]:
        """The next extractor batch: generations with a reward and a positive training weight,
        least trained and oldest first, at most ``extractor_batch_size``; advantages
        ``r - mean(r over the batch)``, weights from the manager's one policy."""
        candidates = [g for g in self.pending if self._trainable_again(g)]
        weights = self.manager.sample_weights([g.written_ids for g in candidates], actor_step)
        scored = []
        for generation, weight in zip(candidates, weights):
            if weight <= 0:
                continue
            reward = self.reward_of(generation)
            if reward is not None:
                scored.append((generation, reward, weight))
        scored.sort(
            key=lambda item: (item[0].times_trained + item[0].times_skipped, item[0].actor_step)
        )
        batch = scored[: self.settings.extractor_batch_size]
        rewards = [reward for _, reward, _ in batch]
        # paired: r is already a difference against the episodes played without the lesson.
        paired = self.settings.extractor_baseline == "paired"
        advantages = rewards if paired else batch_advantages(rewards)
        return [
            (
                generation,
                # No sampler log-probs: the old log-probs are recomputed by the trainer from
                # the current weights (reference ``_start_memory_model_train``).
                TrainSample.from_generation(
                    generation.prompt_token_ids,
                    generation.completion_token_ids,
                    advantage=advantage,
                    weight=weight,
                    meta={"reward": reward, "kind": generation.kind, "ids": generation.written_ids},
                ),
            )
            for (generation, reward, weight), advantage in zip(batch, advantages)
        ]

    def train_step(self, actor_step: int) -> dict[str, float] | None:
        """One CISPO update on the ready samples, or ``None`` when none is ready."""
        ready = self.ready_samples(actor_step)
        if not ready:
            return None
        with self.lock:
            stats = self.optimizer.update([sample for _, sample in ready])
            # ``updates`` counts optimiser steps: a batch whose advantages are all 0 (every r
            # equal, e.g. no win yet) takes none, as the reference's would change nothing.
            stepped = stats["samples"] > 0 and self.optimizer.trainable
            self.updates += int(stepped)
            for generation, _ in ready:
                # Only a step uses a sample up: a batch that moved no weight (every advantage
                # 0, or a frozen extractor) leaves its samples untrained, behind fresher ones.
                if stepped:
                    generation.times_trained += 1
                else:
                    generation.times_skipped += 1
            if stepped:
                ids = sorted({m for g, _ in ready for m in g.written_ids})
                if ids:
                    self.manager.mark_trained(ids, actor_step)
                if self.on_weights_changed is not None:
                    self.on_weights_changed()
        for generation, sample in ready:
            self.batch_log.append(
                {
                    "actor_step": actor_step,
                    "kind": generation.kind,
                    "ids": list(generation.written_ids),
                    "advantage": sample.advantage,
                    "stepped": stepped,
                    "r_batch": self.reward_of(generation, "batch"),
                    "r_paired": self.reward_of(generation, "paired"),
                }
            )
        # Generations that can never be trained again are forgotten.
        self.pending = [g for g in self.pending if self._trainable_again(g)]
        rewards = [s.meta["reward"] for _, s in ready]
        stats["reward_mean"] = sum(rewards) / len(rewards)
        stats["batch"] = len(ready)
        for kind in ("extract", "refine", "merge", "rejected"):
            stats[f"samples_{kind}"] = sum(s.meta["kind"] == kind for _, s in ready)
        return stats

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        return {
            "optimizer": self.optimizer.state_dict(),
            "pending": [g.to_dict() for g in self.pending],
            "updates": self.updates,
            "generations": self.generations,
            "counts": self.counts.to_dict(),
            "paired_credit": {str(k): list(v) for k, v in self.paired_credit.items()},
            "batch_log": self.batch_log,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.pending = [ExtractorGeneration.from_dict(g) for g in state["pending"]]
        self.updates = int(state["updates"])
        self.generations = int(state["generations"])
        self.counts = ExtractorCounts(**state.get("counts", {}))
        self.paired_credit = {
            int(k): (float(v[0]), int(v[1])) for k, v in state.get("paired_credit", {}).items()
        }
        self.batch_log = list(state.get("batch_log", []))
