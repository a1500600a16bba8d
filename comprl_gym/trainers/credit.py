"""The extractor's credit rules, in one place: what a lesson earned and the advantage it gets.

Step 6 of the algorithm (:mod:`comprl_gym.trainers.complementary`) credits the extractor's
generations with what their lessons did for the actor. Every rule is a plain function here,
used by the trainer (:class:`~comprl_gym.trainers.extractor.ExperienceExtractor`,
:meth:`~comprl_gym.trainers.complementary.ComplementaryRLTrainer.extractor_advantages`) and by
the benchmarks that compare the rules (``benchmarks/extractor_credit/run.py``,
``benchmarks/experience_transfer/run.py``):

* a use's outcome: +1 for a won episode, -1 for a lost one (:func:`outcome`); a use the actor
  critiqued counts :func:`critiqued_outcome` instead;
* ``batch`` (the reference, ``memory_reward_normalization: {grouping: batch, method: mean}``):
  ``r(m)`` = the mean outcome of the episodes that used what a generation wrote
  (:func:`generation_reward`, from the store's uses/wins tallies), advantage ``r - mean(r)``
  over the extractor batch (:func:`batch_advantages`);
* ``paired``: each use's outcome minus the mean outcome of its task group's episodes played
  without experience (:func:`paired_outcome`), averaged over the uses (:func:`paired_reward`);
  the advantage is that ``r`` itself;
* ``choice``: the ``batch`` rule's ``r``, centred within the batch's generations that gave the
  same answer (a stem lesson's side) instead of over the whole batch
  (:func:`rule_advantages`): which answer was worth more on average no longer moves the
  extractor, only which contexts it was worth more in;
* an answer that wrote nothing is a sample with :data:`REJECTED_REWARD`;
* :func:`credit_agreement`, a diagnostic: how often each rule's advantage has the sign the
  lesson deserves, where the truth about lessons is known.

Example (reward attribution from the store's tallies, no model needed):
    >>> import tempfile
    >>> from comprl_gym.experience import ExperienceManager
    >>> manager = ExperienceManager(tempfile.mkdtemp())
    >>> a, b = manager.add(["<title>A</title><content>go</content>",
    ...                     "<title>B</title><content>wait</content>"])
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

import re
from collections.abc import Hashable, Iterable, Mapping, MutableMapping, Sequence
from typing import Any

from comprl_gym.trainers.advantages import grouped_advantages

#: The rewards ``r`` of an extractor generation (a batch log's ``r_batch`` and ``r_paired``).
CREDIT_RULES: tuple[str, ...] = ("batch", "paired")
#: The baselines of the extractor's advantage (``experience.extractor_baseline``): the two
#: credit rules, ``choice`` (the ``batch`` rule's ``r`` centred per answer) and ``context``
#: (centred per episode written about).
BASELINES: tuple[str, ...] = (*CREDIT_RULES, "choice", "context")
#: The fixed reward of a rejected answer (malformed, or below the quality gate): a failed
#: use's outcome.
REJECTED_REWARD = -1.0
#: An advantage smaller than this in magnitude carries no sign.
_ZERO = 1e-9


def outcome(won: bool) -> float:
    """One use's outcome: +1 for a won episode, -1 for a lost one."""
    return 1.0 if won else -1.0


def generation_reward(
    manager: Any,
    written_ids: Iterable[int],
    min_uses: int = 1,
    baseline: tuple[int, int] = (0, 0),
    adjustment: float = 0.0,
) -> float | None:
    """``r`` of a generation under the ``batch`` rule: the mean of +1 (win) / -1 (loss) over
    the trajectories that used the entries it wrote, pooled over those entries (the store's
    uses/wins), minus the ``baseline`` ``(uses, wins)`` those entries already had when it wrote
    them (a merged entry inherits tallies); ``None`` while fewer than ``min_uses`` uses were
    reported. ``adjustment`` is the sum, over the uses the actor critiqued, of the critiqued
    outcome minus the +1/-1 the store counted
    (:meth:`~comprl_gym.trainers.extractor.ExperienceExtractor.credit_critiques`)."""
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
    value = critic_score if critic_score < 1 else episode_score + critic_score
    return -1.0 if value == 0 else float(value)


def paired_outcome(won: bool, without: Sequence[float]) -> float:
    """One use's outcome under the ``paired`` rule: +1/-1 minus the mean outcome of the same
    task's episodes played without the lesson (``without``; 0 when there are none).

    Example:
        >>> paired_outcome(True, [1.0, -1.0]), paired_outcome(False, [-1.0])
        (1.0, 0.0)
        >>> paired_outcome(True, [])  # no episode without the lesson: the outcome itself
        1.0
    """
    return outcome(won) - (sum(without) / len(without) if without else 0.0)


def paired_reward(
    tallies: Mapping[int, tuple[float, int]], written_ids: Iterable[int], min_uses: int = 1
) -> float | None:
    """``r`` of a generation under the ``paired`` rule: the mean paired outcome over the uses
    of the lessons it wrote (``tallies``: lesson id -> (sum, count) of its uses' paired
    outcomes, :func:`credit_uses`); ``None`` below ``min_uses`` uses.

    Example (a use won while the group's without-half won 1 of 2: 1 - 0 = 1; a use lost
    while it lost both: -1 - (-1) = 0):
        >>> paired_reward({3: (1.0, 1), 4: (0.0, 1)}, [3, 4]), paired_reward({}, [5]) is None
        (0.5, True)
    """
    total = count = 0.0
    for lesson in written_ids:
        t, c = tallies.get(int(lesson), (0.0, 0))
        total, count = total + t, count + c
    if count < max(1, min_uses):
        return None
    return total / count


def batch_advantages(rewards: Sequence[float]) -> list[float]:
    """``r - mean(r)`` over the extractor batch (reference ``grouped_reward_norm`` with
    ``grouping: batch, method: mean``; no division by the std)."""
    mean = sum(rewards) / len(rewards) if rewards else 0.0
    return [r - mean for r in rewards]


def rule_advantages(
    rewards: Sequence[float],
    rule: str,
    answers: Sequence[Hashable] | None = None,
    contexts: Sequence[Hashable] | None = None,
) -> list[float]:
    """The advantages of one extractor batch under ``rule``: ``batch`` subtracts the batch's
    mean; ``paired`` keeps ``r`` (it is already a difference against the episodes played
    without the lesson); ``choice`` subtracts the mean ``r`` of the generations whose answer
    (``answers[i]``, e.g. a stem lesson's chosen token) is the same, so an answer given once in
    the batch gets 0; ``context`` subtracts the mean ``r`` of the generations with the same
    context (``contexts[i]``, e.g. the prompt: the episode written about), GRPO's group mean.

    ``choice`` is for answers that are one of a few choices (``extractor_format: stem``).
    Why: under the reference rule, an answer that earned more than the batch's mean is pushed
    up in every context it was given in, and small stem extractors trained by it settled on
    one side (docs/results/memory-paper-table.md, docs/results/extractor-learning.md).
    Centred per answer, the advantage only says in which contexts an answer did better than
    it does on average. That
    drops what the answers are worth on average, which is nothing where the training tasks
    are balanced between them, and biases the gradient where they are not.

    Example:
        >>> rule_advantages([1.0, 0.0], "batch"), rule_advantages([1.0, 0.0], "paired")
        ([0.5, -0.5], [1.0, 0.0])
        >>> rule_advantages([1.0, -1.0, -1.0, -1.0, 1.0], "choice", ["e", "e", "w", "w", "x"])
        [1.0, -1.0, 0.0, 0.0, 0.0]
        >>> rule_advantages([1.0, -1.0, -1.0, -1.0], "context", contexts=["a", "a", "b", "b"])
        [1.0, -1.0, 0.0, 0.0]
    """
    if rule == "paired":
        return [float(r) for r in rewards]
    if rule == "batch":
        return batch_advantages(rewards)
    if rule == "choice":
        if answers is None or len(answers) != len(rewards):
            raise ValueError("the choice rule needs one answer per reward")
        return [float(a) for a in grouped_advantages(rewards, list(answers), scale=False)]
    if rule == "context":
        if contexts is None or len(contexts) != len(rewards):
            raise ValueError("the context rule needs one context per reward")
        return [float(a) for a in grouped_advantages(rewards, list(contexts), scale=False)]
    raise ValueError(f"unknown credit rule {rule!r}; known: {', '.join(BASELINES)}")


#: Which shown lessons an episode's outcome is credited to (:func:`credit_uses`): ``shown``,
#: every lesson the actor read; ``agreed``, only those whose advice the actor's actions agreed
#: with (:func:`agreed_lessons`).
USE_RULES: tuple[str, ...] = ("shown", "agreed")


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def agreed_lessons(actions: Sequence[str], contents: Mapping[int, str]) -> list[int]:
    """The lessons (id -> text) whose advice the actions taken agreed with: a lesson agrees
    when its text names a word of an action taken. Evidence that a lesson was used, not
    proof: a lesson that names the same move for another reason agrees too, and so does a lost
    case naming the move it warns against.

    Example (the actor walked west; of three lessons shown, two say west):
        >>> agreed_lessons(["west"], {1: "the stairs are west", 2: "the stairs are east",
        ...                           3: "take the West branch"})
        [1, 3]
    """
    taken = set().union(*(_words(a) for a in actions)) if actions else set()
    return [lesson for lesson, content in contents.items() if taken & _words(content)]


def credit_uses(
    episodes: Iterable[Any],
    manager: Any,
    paired_tallies: MutableMapping[int, tuple[float, int]] | None = None,
    rule: str = "shown",
) -> int:
    """Record each lesson's uses in one iteration's episodes: every with-experience episode
    (not cut short) used the lessons it read (``shown_experience_ids``), won or lost; with
    ``rule="agreed"``, only those its actions agreed with (:func:`agreed_lessons`), so an
    outcome is not charged alike to lessons shown beside the one the actor followed. The
    store's uses/wins tallies get them (the ``batch`` rule reads those); when
    ``paired_tallies`` is given, each use's :func:`paired_outcome` against its task group's
    without-experience episodes is added to it. Returns the uses recorded."""
    if rule not in USE_RULES:
        raise ValueError(f"unknown use rule {rule!r}; known: {', '.join(USE_RULES)}")
    episodes = list(episodes)
    by_group: dict[int, list[float]] = {}
    for episode in episodes:
        if not episode.with_experience and not episode.error:
            by_group.setdefault(episode.group, []).append(outcome(episode.won))
    uses = 0
    for episode in episodes:
        ids = episode.shown_experience_ids
        if not episode.with_experience or episode.error or not ids:
            continue
        if rule == "agreed":
            # The whole lesson: a plain-text lesson is parsed into its title alone.
            contents = {e.id: f"{e.title}\n{e.description}\n{e.content}" for e in manager.get(ids)}
            ids = agreed_lessons([turn.action for turn in episode.turns], contents)
            if not ids:
                continue
        manager.report_outcome(ids, won=episode.won)
        if paired_tallies is not None:
            paired = paired_outcome(episode.won, by_group.get(episode.group, []))
            for lesson in ids:
                total, count = paired_tallies.get(lesson, (0.0, 0))
                paired_tallies[lesson] = (total + paired, count + 1)
        uses += len(ids)
    return uses


def credit_agreement(
    batch_log: Sequence[Mapping[str, Any]], verdicts: Mapping[int, str]
) -> dict[str, Any]:
    """How often each credit rule's advantage has the sign the lesson deserves: + for a lesson
    that is right, - for one that is wrong (``verdicts``: lesson id -> ``"right"``,
    ``"wrong"`` or anything else, which is not judged). Each extractor batch's samples
    (``batch_log``, the extractor's :attr:`~comprl_gym.trainers.extractor.ExperienceExtractor.
    batch_log`, one ``actor_step`` per batch, each with ``r_batch`` and ``r_paired``) get both
    rules' advantages (:func:`rule_advantages`). Samples that are not an extraction of exactly
    one judged lesson, and rules with no r yet, are left out. Per rule: the samples judged,
    those with a nonzero advantage, those whose sign agrees, and the batches in which some
    advantage is nonzero (a gradient).

    Example (one batch: a right lesson used in a win while its group's without-experience
    episodes won 1 of 2, r_paired = 1 - 0; a wrong one used in a loss while they lost both,
    r_paired = -1 - (-1) = 0, no sign):
        >>> log = [
        ...     {"actor_step": 1, "kind": "extract", "ids": [1], "r_batch": 1.0, "r_paired": 1.0},
        ...     {"actor_step": 1, "kind": "extract", "ids": [2], "r_batch": -1.0, "r_paired": 0.0},
        ... ]
        >>> rules = credit_agreement(log, {1: "right", 2: "wrong"})
        >>> [(rules[r]["samples"], rules[r]["nonzero"], rules[r]["agree"]) for r in rules]
        [(2, 2, 2), (2, 1, 1)]
    """
    batches: dict[int, list[Mapping[str, Any]]] = {}
    for record in batch_log:
        batches.setdefault(int(record["actor_step"]), []).append(record)
    out: dict[str, Any] = {}
    for rule in CREDIT_RULES:
        judged = signed = agree = with_signal = 0
        for batch in batches.values():
            scored = [r for r in batch if r[f"r_{rule}"] is not None]
            advantages = rule_advantages([r[f"r_{rule}"] for r in scored], rule)
            signal = False
            for record, advantage in zip(scored, advantages):
                signal = signal or abs(advantage) > _ZERO
                verdict = [verdicts.get(int(i)) for i in record["ids"]]
                if (
                    record["kind"] != "extract"
                    or len(verdict) != 1
                    or verdict[0] not in ("right", "wrong")
                ):
                    continue
                judged += 1
                if abs(advantage) > _ZERO:
                    signed += 1
                    agree += (advantage > 0) == (verdict[0] == "right")
            with_signal += signal
        out[rule] = {
            "samples": judged,
            "nonzero": signed,
            "agree": agree,
            "agree_fraction": agree / signed if signed else None,
            "batches": len(batches),
            "batches_with_signal": with_signal,
        }
    return out
