"""The experience extractor: writes lessons from finished episodes, learns from their outcomes.

The extractor is a second LLM with its own weights (the reference's "memory model"). It follows
the Complementary RL reference code (github pUmpKin-Co/ComplementaryRL, ``roll/pipeline/
agentic/``; the file names below point into it):

* **What is distilled** (``experience.distill``): by default every trajectory played with
  experience, one extraction each, never the without-experience half (reference
  ``hook_on_episode_end`` -> ``_should_update_trajectory_memory``). ``without_experience``
  reads the other half instead (the actor's own moves, which no lesson steered); ``group``
  keeps the older mode: one episode per task group (a win first).
* **Input** (reference ``async_memory_manager.py::build_memory_model_messages``): the whole
  episode, each action followed by the observation it produced (Environment / Agent / Tool
  Environment), ``Outcome: SUCCESS/FAILURE`` and the lessons the episode was shown
  (``**Memory Entry i**``), see :func:`~comprl_gym.lessons.prompts.format_interaction`.
* **Output**: one of the lesson formats of :mod:`comprl_gym.lessons.formats`
  (``experience.extractor_format``): ``operations`` (the reference's: ``<answer>`` with a JSON
  list of ``add`` / ``update`` / ``return`` operations, memories as
  ``<title>..</title><content>..</content>``; ``return`` writes nothing), ``plain`` (one
  sentence of advice, stored as it is, for tiny models) or ``stem`` (that sentence opened by
  the family's lesson stem, :attr:`~comprl_gym.lessons.core.FamilyLessons.stem`: "In the
  Vault of Marrow the staircase down is at the end of the", then " east branch." or " west
  branch.", so the model writes only the fact, one choice that CISPO's credit can reward or
  punish; refused when the trainer starts for a family without a stem). A lesson whose
  :func:`~comprl_gym.lessons.quality.lesson_quality` score is below
  ``experience.min_quality`` is not written.
* **Reward** (reference ``multi_agentic_pipeline.py::_collect_triggered_interactions_to_buffer``):
  per generation, ``r`` = the mean of +1 (success) / -1 (failure) over the trajectories that
  used the entries it wrote, pooled over those entries: the store's uses/wins tallies, counted
  from when the generation was last trained (``experience.credit_window: since_trained``, the
  reference's buffer, emptied of a generation when it is trained), or from when it wrote them
  (``since_written``). A refinement answer (``search_and_ask``, answered by
  :meth:`ExperienceExtractor.refine`) is a sample whose ``r`` is the asking trajectory's
  outcome; a merge call is a sample whose ``r`` comes from the trajectories that later used the
  entries it produced (reference ``_merge_single_task``: ``triggered_interaction`` = the last
  successful merge call).
* **Actor critique** (reference ``memory_integration_mixin.py::add_memory_metadata_to_rollout``):
  when the actor critiqued the experiences retrieved for an episode, that use counts
  :func:`~comprl_gym.trainers.credit.critiqued_outcome` (reject -1, refine 0.5, accept
  score + 1) instead of +1/-1 for the generations that wrote them
  (:meth:`ExperienceExtractor.credit_critiques`). An unparsed critique hides the lessons and
  counts no use; the reference hides them too but credits their generation with the plain
  outcome (``memory_integration_mixin.py`` lines 108-129, 402-403).
* **Advantage** (reference ``memory_reward_normalization: {grouping: batch, method: mean}``,
  ``memory_adv_estimator: reinforce``): ``A = r - mean(r over the extractor batch)``, times the
  manager's one training-count weight (:meth:`~comprl_gym.experience.ExperienceManager.
  sample_weights`: 0 inside the cooldown, else ``(1 + training_count) ** -train_weight_power``;
  reference ``_build_memory_batch_from_buffer_entries``). The rules are the functions of
  :mod:`comprl_gym.trainers.credit`; the trainer's
  :meth:`~comprl_gym.trainers.complementary.ComplementaryRLTrainer.extractor_advantages` hook
  picks the advantage.
* **Loss**: CISPO (:func:`~comprl_gym.trainers.losses.cispo_loss`), one step per batch with the
  old log-probs recomputed from the current weights (reference ``_start_memory_model_train``
  recomputes them; the sampler's log-probs are never used against a changed model).

Example (the store written by a plain reply, then the batch of samples it makes):
    >>> import tempfile
    >>> from types import SimpleNamespace
    >>> from comprl_gym.experience import ExperienceManager
    >>> from comprl_gym.rollouts import Trajectory
    >>> class Replies:  # a stand-in backend: always the same advice
    ...     def chat(self, messages, params):
    ...         return [SimpleNamespace(text="Walk east first.", prompt_token_ids=[1],
    ...                                 completion_token_ids=[2], completion_logprobs=None)]
    >>> manager = ExperienceManager(tempfile.mkdtemp())
    >>> extractor = ExperienceExtractor(Replies(), None, manager,
    ...                                 ExperienceSettings(extractor_format="plain"))
    >>> episode = Trajectory("e1", "comprl/MiniHack-Room-5x5-v0", "minihack", "0",
    ...                      "Find the stairs.", 0, won=True, meta={"group": 0, "with_experience": True})
    >>> [lesson] = extractor.write(episode, actor_step=1)
    >>> manager.get_one(lesson).content
    'Walk east first.'
    >>> manager.report_outcome([lesson], won=True)  # one episode read it and won: r = 1
    >>> [(round(s.reward, 3), s.weight) for s in extractor.reward_batch(actor_step=5)]
    [(1.0, 1.0)]
    >>> manager.close()
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, Literal, NamedTuple

from comprl_gym.experience import prompts
from comprl_gym.experience.records import Provenance
from comprl_gym.lessons import prompts as lesson_prompts
from comprl_gym.lessons.formats import SEARCH_SYNTAX, LessonFormat, lesson_format
from comprl_gym.lessons.quality import lesson_quality
from comprl_gym.rollouts import Trajectory
from comprl_gym.trainers import credit
from comprl_gym.trainers.config import ExperienceSettings
from comprl_gym.trainers.credit import REJECTED_REWARD
from comprl_gym.trainers.policy import PolicyOptimizer, TrainSample

logger = logging.getLogger(__name__)

#: Where an extractor sample came from (``rejected``: an answer that wrote nothing because it
#: was malformed or failed the quality gate, trained on as a failure).
SampleKind = Literal["extract", "refine", "merge", "rejected"]
#: Refinements not matched to a finished trajectory after this many crediting rounds are
#: forgotten (e.g. answers given during evaluation, which trains nothing).
REFINEMENT_ROUNDS = 2


@dataclass
class ExtractorGeneration:
    """One extractor output worth training on: its tokens, what it wrote and how it is scored.

    ``kind`` is ``extract`` (wrote entries from a trajectory), ``merge`` (produced merged
    entries) or ``refine`` (answered a ``search_and_ask`` question). ``baseline`` is the
    ``(uses, wins)`` of ``written_ids`` when they were written; ``reward`` is fixed for a
    refinement once its trajectory is known. ``critic_adjustment`` corrects ``r`` for the uses
    the actor critiqued (see :func:`~comprl_gym.trainers.credit.generation_reward`).
    ``completion_logprobs`` are the sampler's, kept for diagnostics only: the trainer
    recomputes the old log-probs.
    """

    prompt_token_ids: list[int]
    completion_token_ids: list[int]
    completion_logprobs: list[float] | None
    written_ids: list[int]
    actor_step: int
    times_trained: int = 0
    #: Batches it was in that took no step (no signal): it goes behind fresher samples, and
    #: after ``max_train_count`` such batches (when that is set) it is forgotten.
    times_skipped: int = 0
    kind: str = "extract"
    baseline: tuple[int, int] = (0, 0)
    reward: float | None = None
    question: str = ""
    answer: str = ""
    rounds: int = 0
    critic_adjustment: float = 0.0
    #: The sampling temperature, and the only tokens the sampler could draw (the stem's
    #: choices; ``None``: any): what ``extractor.score: sampled`` scores the sample under.
    temperature: float = 1.0
    allowed_token_ids: list[int] | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExtractorGeneration:
        data = dict(data)
        data["baseline"] = tuple(data.get("baseline", (0, 0)))
        return cls(**data)


def distilled_episodes(
    episodes: list[Trajectory], settings: ExperienceSettings
) -> list[Trajectory]:
    """The episodes lessons are written from (``experience.distill``), in order.

    ``with_experience`` (the reference): every episode played with experience and not cut
    short, none of the others. ``without_experience``: every episode played without
    experience and not cut short. ``group``: per task group, the ``experiences_per_group``
    most informative episodes (a win first when the group has wins and losses). With
    ``experience.distill_per_group: N`` at most N of each group are kept: the first ones, or
    with ``distill_balance: outcome`` each of the outcome picked less often so far where the
    group has one. Otherwise ``experience.distill_balance: outcome`` keeps as many won as lost
    episodes: the last ones of the commoner outcome, in play order.

    Example (six episodes without experience, two of them won):
        >>> from comprl_gym.trainers.config import ExperienceSettings
        >>> runs = [Trajectory(str(i), "e", "f", "0", "t", i, won=i in (1, 4),
        ...                    meta={"with_experience": False}) for i in range(6)]
        >>> kept = distilled_episodes(runs, ExperienceSettings(
        ...     distill="without_experience", distill_balance="outcome"))
        >>> [(e.episode_id, e.won) for e in kept]
        [('1', True), ('3', False), ('4', True), ('5', False)]
    """
    if settings.distill in ("with_experience", "without_experience"):
        wanted = settings.distill == "with_experience"
        chosen = [e for e in episodes if e.with_experience == wanted and not e.error]
    else:
        groups: dict[int, list[Trajectory]] = {}
        for episode in episodes:
            groups.setdefault(episode.group, []).append(episode)
        chosen = []
        for group in groups.values():
            ordered = sorted(group, key=lambda e: (not e.won, e.episode_id))
            chosen += ordered[: max(1, settings.experiences_per_group)]
    if settings.distill_per_group:
        return _per_group(chosen, settings.distill_per_group, settings.distill_balance == "outcome")
    if settings.distill_balance == "outcome":
        won = [e for e in chosen if e.won]
        lost = [e for e in chosen if not e.won]
        n = min(len(won), len(lost))
        keep = {id(e) for e in won[len(won) - n :] + lost[len(lost) - n :]}
        chosen = [e for e in chosen if id(e) in keep]
    return chosen


def _per_group(chosen: list[Trajectory], per_group: int, balance: bool) -> list[Trajectory]:
    """At most ``per_group`` of each group's ``chosen`` episodes, in play order. With
    ``balance`` each pick takes, where its group has one, an episode of the outcome picked
    less often so far (a win first on a tie): as many won as lost as the groups allow, and no
    group left out for it."""
    groups: dict[int, list[Trajectory]] = {}
    for episode in chosen:
        groups.setdefault(episode.group, []).append(episode)
    picked: list[Trajectory] = []
    for group in groups.values():
        left = list(group)
        for _ in range(min(per_group, len(left))):
            episode = left[0]
            if balance:
                wins = sum(e.won for e in picked)
                wanted = wins <= len(picked) - wins
                episode = next((e for e in left if e.won == wanted), left[0])
            left.remove(episode)
            picked.append(episode)
    return sorted(picked, key=chosen.index)


class ScoredGeneration(NamedTuple):
    """A generation ready to train on: its ``r`` and its training-count weight."""

    generation: ExtractorGeneration
    reward: float
    weight: float


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
        output_format: str | LessonFormat | None = None,
        seed: int = 0,
        on_weights_changed: Callable[[], None] | None = None,
    ):
        self.backend = backend
        self.optimizer = optimizer
        self.manager = manager
        self.settings = settings
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        #: What it writes (:mod:`~comprl_gym.lessons.formats`): ``output_format`` (a
        #: format, or its name) when given, else ``settings.extractor_format``.
        self.format: LessonFormat = (
            lesson_format(output_format or settings.extractor_format, settings.max_text_chars)
            if output_format is None or isinstance(output_format, str)
            else output_format
        )
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
        #: One record per sample of every batch :meth:`update` took: the ids it wrote, its
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

    def generate_prompt(
        self, prompt: str, max_tokens: int, allowed_token_ids: tuple[int, ...] | None = None
    ) -> Any:
        """One generation from a raw prompt, sampling only ``allowed_token_ids`` when given
        (the ``stem`` format's choice)."""
        params = self._sampling(max_tokens)
        if allowed_token_ids is not None:
            params = replace(params, allowed_token_ids=allowed_token_ids)
        with self.lock:
            [generation] = self.backend.generate([prompt], params)
        if allowed_token_ids is not None:
            # What the sampler could draw: a ``score: sampled`` update scores the same set.
            generation.extra["allowed_token_ids"] = list(params.allowed_token_ids)
        return generation

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
            temperature=self.temperature,
            allowed_token_ids=getattr(generation, "extra", {}).get("allowed_token_ids"),
            **extra,
        )
        self.pending.append(record)
        return record

    def _good_enough(self, text: str, env_family: str | None, counts: ExtractorCounts) -> bool:
        """The ``min_quality`` gate: whether a lesson may be written (a refusal is counted)."""
        if self.settings.min_quality <= 0:
            return True
        if lesson_quality(text, env_family).score >= self.settings.min_quality:
            return True
        counts.rejected_lessons += 1
        return False

    def shown_experiences(self, episode: Trajectory, manager: Any = None) -> list[Any]:
        """The lessons the episode was shown that are still in the store (``manager``, the
        extractor's own by default; reference: the first turn's retrieved uids,
        ``last_turn_uids``), in the order shown."""
        found = (self.manager if manager is None else manager).get(episode.shown_experience_ids)
        return [e for e in found if e.status == "active"]

    def write(self, episode: Trajectory, actor_step: int, into: Any = None) -> list[int]:
        """Read ``episode`` and write its lessons in the extractor's format through the
        extractor's own manager, or through ``into`` (another
        :class:`~comprl_gym.experience.ExperienceManager`, e.g. a probe's scratch store);
        return the ids written. A write elsewhere keeps no training sample (a lesson's credit is
        read from the extractor's own store) and leaves :attr:`counts` alone; only the sampling
        seed moves on, as for every generation."""
        manager = self.manager if into is None else into
        trains = manager is self.manager
        counts = self.counts if trains else ExtractorCounts()
        counts.extractions += 1
        provenance = Provenance.of_episode(episode, actor_step, f"extractor-update-{self.updates}")
        shown = self.shown_experiences(episode, manager) if self.format.uses_shown else []
        draft = self.format.reply(self, episode, shown, self.settings.extractor_transcript_chars)
        if draft.operations is None:  # unreadable
            counts.malformed += 1
            return self._reject(draft.generation, actor_step) if trains else []
        if not draft.operations:  # ``return``: the extractor declined
            counts.declined += 1
            return []
        passed = [
            op
            for op in draft.operations
            if op.text is None
            or self._good_enough(self.format.gate_text(op), episode.env_family, counts)
        ]
        if not passed:  # every lesson it wrote failed the quality gate
            return self._reject(draft.generation, actor_step) if trains else []
        ids = self.format.store(manager, passed, draft.shown_ids, provenance)
        if ids is None:  # the store refused the operations: nothing was written
            counts.malformed += 1
            ids = []
        counts.written += len(ids)
        if ids and trains:
            self._keep(draft.generation, "extract", ids, actor_step)
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
        """Write experiences from one iteration's finished episodes, those
        :func:`distilled_episodes` picks (``experience.distill``), ``experience.
        extractor_samples`` generations about each."""
        written: list[int] = []
        for episode in distilled_episodes(episodes, self.settings):
            for _ in range(self.settings.extractor_samples):
                written += self.write(episode, actor_step)
        return written

    # ------------------------------------------------------------------ uses
    def credit_uses(self, episodes: list[Trajectory]) -> int:
        """Record each lesson's uses in one iteration's episodes in the store's tallies and in
        :attr:`paired_credit` (:func:`comprl_gym.trainers.credit.credit_uses`). Returns the
        uses recorded."""
        return credit.credit_uses(episodes, self.manager, self.paired_credit)

    def paired_reward(self, written_ids: Iterable[int]) -> float | None:
        """``r`` under ``extractor_baseline: paired`` (:func:`comprl_gym.trainers.credit.
        paired_reward`; ``None`` below ``min_uses`` uses)."""
        return credit.paired_reward(self.paired_credit, written_ids, self.settings.min_uses)

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
                question = SEARCH_SYNTAX.parse(turn.action)
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
                    match.reward = credit.outcome(episode.won)
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
        """Let each critiqued use count :func:`~comprl_gym.trainers.credit.critiqued_outcome`
        instead of the +1/-1 that :class:`~comprl_gym.wrappers.OutcomeReporting` tallied, for
        every pending extract or
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
            delta = credit.critiqued_outcome(
                float(critique["score"]), episode.score
            ) - credit.outcome(episode.won)
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
        generation = self.generate_chat(lesson_prompts.build_merge_messages(texts))
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
        if not limit:
            return True
        return generation.times_trained < limit and generation.times_skipped < limit

    def _still_usable(self, generation: ExtractorGeneration) -> bool:
        """Whether a later use can still credit ``generation``: a fixed reward (refinement,
        rejection) or some lesson it wrote still in the store."""
        if generation.kind in ("refine", "rejected") or not generation.written_ids:
            return True
        return bool(self.manager.get(list(generation.written_ids)))

    def reward_of(
        self, generation: ExtractorGeneration, baseline: str | None = None
    ) -> float | None:
        """``r`` of a generation under ``baseline`` (default ``extractor_baseline``; ``None``:
        not enough uses yet). A refinement's and a rejection's reward is fixed when they are
        made."""
        if generation.kind in ("refine", "rejected"):
            return generation.reward
        if (baseline or self.settings.extractor_baseline) == "paired":
            if self.settings.credit_window == "since_trained" and (
                self.reward_of(generation, "batch") is None
            ):
                return None  # no use since it was last trained: nothing new to credit
            return self.paired_reward(generation.written_ids)
        return credit.generation_reward(
            self.manager,
            generation.written_ids,
            self.settings.min_uses,
            tuple(generation.baseline),  # type: ignore[arg-type]
            generation.critic_adjustment,
        )

    def reward_batch(self, actor_step: int) -> list[ScoredGeneration]:
        """The next extractor batch with each generation's ``r(m)``: the generations with a
        reward and a positive training weight (the manager's one policy), least trained and
        oldest first, at most ``extractor_batch_size``."""
        candidates = [g for g in self.pending if self._trainable_again(g)]
        weights = self.manager.sample_weights([g.written_ids for g in candidates], actor_step)
        scored = []
        for generation, weight in zip(candidates, weights):
            if weight <= 0:
                continue
            reward = self.reward_of(generation)
            if reward is not None:
                scored.append(ScoredGeneration(generation, reward, weight))
        scored.sort(
            key=lambda s: (
                s.generation.times_trained + s.generation.times_skipped,
                s.generation.actor_step,
            )
        )
        return scored[: self.settings.extractor_batch_size]

    def samples(
        self, batch: list[ScoredGeneration], advantages: list[float]
    ) -> list[tuple[ExtractorGeneration, TrainSample]]:
        """The training samples of ``batch``, one advantage each (the trainer's
        ``extractor_advantages``)."""
        return [
            (
                scored.generation,
                # No sampler log-probs: the old log-probs are recomputed by the trainer from
                # the current weights (reference ``_start_memory_model_train``).
                TrainSample.from_generation(
                    scored.generation.prompt_token_ids,
                    scored.generation.completion_token_ids,
                    advantage=advantage,
                    weight=scored.weight,
                    temperature=scored.generation.temperature,
                    allowed_token_ids=None
                    if scored.generation.allowed_token_ids is None
                    else tuple(scored.generation.allowed_token_ids),
                    meta={
                        "reward": scored.reward,
                        "kind": scored.generation.kind,
                        "ids": scored.generation.written_ids,
                    },
                ),
            )
            for scored, advantage in zip(batch, advantages)
        ]

    def ready_samples(
        self,
        actor_step: int,
        advantages: Callable[..., list[float]] | None = None,
    ) -> list[tuple[ExtractorGeneration, TrainSample]]:
        """:meth:`reward_batch` as samples, each generation's ``r(m)`` turned into its advantage
        by ``advantages(rewards, answers)`` (the trainer's ``extractor_advantages`` hook; each
        answer is a generation's completion tokens), called with a third argument, each
        generation's prompt tokens, under ``extractor_baseline: context``; by default ``extractor_baseline``'s
        rule, :func:`~comprl_gym.trainers.credit.rule_advantages`: ``r - mean(r over the
        batch)``, ``r`` for ``paired``, or ``r`` minus the mean over the batch's same answers
        for ``choice``. ``[]`` when none is ready."""
        batch = self.reward_batch(actor_step)
        if not batch:
            return []
        rule = self.settings.extractor_baseline
        if advantages is None:
            advantages = lambda r, answers, contexts=None: credit.rule_advantages(  # noqa: E731
                r, rule, answers, contexts
            )
        rewards = [scored.reward for scored in batch]
        answers = [tuple(scored.generation.completion_token_ids) for scored in batch]
        if rule == "context":
            contexts = [tuple(scored.generation.prompt_token_ids) for scored in batch]
            computed = advantages(rewards, answers, contexts)
        else:
            # Only the context rule reads the contexts: a hook written before it existed,
            # ``extractor_advantages(rewards, answers)``, keeps working under every other.
            computed = advantages(rewards, answers)
        if self.settings.extractor_positive_only:
            computed = [max(0.0, a) for a in computed]
        return self.samples(batch, computed)

    def train_step(self, actor_step: int) -> dict[str, float] | None:
        """One CISPO update on :meth:`ready_samples`, or ``None`` when none is ready."""
        ready = self.ready_samples(actor_step)
        return self.update(ready, actor_step) if ready else None

    def update(
        self, ready: list[tuple[ExtractorGeneration, TrainSample]], actor_step: int
    ) -> dict[str, float]:
        """One CISPO update on ``ready`` (a non-empty batch of :meth:`samples`): the step, each
        generation's training count, the store's training marks, :attr:`batch_log`."""
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
                    "answer": list(generation.completion_token_ids),
                    "advantage": sample.advantage,
                    "stepped": stepped,
                    "r_batch": self.reward_of(generation, "batch"),
                    "r_paired": self.reward_of(generation, "paired"),
                }
            )
        if stepped and self.settings.credit_window == "since_trained":
            for generation, _ in ready:
                # The reference empties a generation's credit once it is trained: the next
                # training reads only the uses that come after this one.
                found = self.manager.get(list(generation.written_ids))
                generation.baseline = (sum(e.uses for e in found), sum(e.wins for e in found))
                generation.critic_adjustment = 0.0
        # Generations that can never be trained again are forgotten.
        self.pending = [
            g for g in self.pending if self._trainable_again(g) and self._still_usable(g)
        ]
        rewards = [s.meta["reward"] for _, s in ready]
        stats["reward_mean"] = sum(rewards) / len(rewards)
        stats["batch"] = len(ready)
        # Samples whose credit equals their baseline move nothing: near 1, no signal is left.
        stats["zero_advantage_fraction"] = sum(s.advantage == 0 for _, s in ready) / len(ready)
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
