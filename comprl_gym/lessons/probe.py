"""The extractor probe: does an extractor write the right lesson after a win AND after a loss?

A lesson writer that names the side its actor walked is right after every win and wrong after
every loss; one that always names the same side is right half the time either way. Neither
has learnt the rule the memory family rewards ("the side walked if the episode was won, else
the other"). The probe tells them apart: it gives a writer a fixed, committed set of held-out
episodes covering both sides x both outcomes (the family's
:attr:`~comprl_gym.lessons.core.FamilyLessons.probe_episodes`, e.g.
``comprl_gym/envs/memory/probe_episodes.json``), judges what it wrote about each with the
family's lesson judge (:meth:`~comprl_gym.families.FamilySpec.judge`) and reports P(right |
won) and P(right | lost) with Wilson intervals, plus how many lessons named no side, both
sides, another task, or were never written.

A writer is anything with ``write(episode, actor_step, into=manager) -> ids`` (the
:class:`~comprl_gym.trainers.extractor.ExperienceExtractor` signature): it writes into a
scratch :class:`~comprl_gym.experience.ExperienceManager` that the probe makes and throws
away (a trainer's extractor goes through :class:`comprl_gym.trainers.probing.ExtractorWriter`,
which leaves its training state as it was). :class:`ScriptedRule` is such a writer without a model: ``ScriptedRule.outcome_aware()``
is the ceiling any extractor can reach (right 1.0 / 1.0), ``ScriptedRule.walked_side()`` the
frozen extractor's habit (1.0 / 0.0), ``ScriptedRule.always("east")`` a constant side.

Example (no model: the outcome-aware rule on two committed episodes, one won, one lost):
    >>> episodes = load_probe_episodes("memory")
    >>> pair = [e for e in episodes if e.task_id == episodes[0].task_id]
    >>> [(e.meta["walked"], e.won) for e in pair]
    [('east', True), ('west', False)]
    >>> report = run_probe(ScriptedRule.outcome_aware(), pair, name="rule")
    >>> report.right_rate(won=True).mean, report.right_rate(won=False).mean
    (1.0, 1.0)
    >>> print(report.verdicts[1].lessons[0].splitlines()[-1])  # lost walking west: east
    ## Content: In the Mire of Pearls the staircase down is at the end of the east branch.
"""

from __future__ import annotations

import hashlib
import math
import re
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import numpy as np

from comprl_gym.core import ConfigurationError
from comprl_gym.evaluation.stats import Interval, mean_ci, wilson_interval
from comprl_gym.families import FamilySpec, family_spec
from comprl_gym.lessons.core import VERDICTS, LessonStem, episode_verdict, lesson_title
from comprl_gym.rollouts import Trajectory

#: What the probe says of one episode: the judge's verdicts on the lessons written about it
#: (``right``, ``wrong``, ``both``, ``neither``), ``other_task`` when every lesson written is
#: about another task, ``nothing`` when the writer wrote nothing.
PROBE_VERDICTS = (*VERDICTS, "other_task", "nothing")
#: Metric names (after the ``probe/`` prefix) of the counts a report logs.
COUNT_METRICS = {
    "both": "both_sides",
    "neither": "no_side",
    "other_task": "other_task",
    "nothing": "nothing_written",
}


class LessonWriter(Protocol):
    """What the probe gives episodes to: an extractor, or a scripted rule."""

    def write(self, episode: Trajectory, actor_step: int, *, into: Any) -> list[int]: ...


# ---------------------------------------------------------------------------- the episodes
def family_of(family: str | FamilySpec) -> FamilySpec:
    """The spec of ``family`` (a name or a spec); a clear error for a family nobody listed."""
    if isinstance(family, FamilySpec):
        return family
    spec = family_spec(family)
    if spec is None:
        raise ConfigurationError(f"no env family is called {family!r}")
    return spec


def can_probe(family: str | FamilySpec) -> bool:
    """Whether ``family`` has both a lesson judge and probe episodes."""
    spec = family_of(family)
    return spec.lessons.judge is not None and spec.lessons.probe_episodes is not None


def load_probe_episodes(family: str | FamilySpec) -> list[Trajectory]:
    """The family's committed probe episodes as :class:`~comprl_gym.rollouts.Trajectory`
    records (its :attr:`~comprl_gym.lessons.core.FamilyLessons.probe_episodes` hook)."""
    spec = family_of(family)
    if spec.lessons.probe_episodes is None:
        raise ConfigurationError(f"family {spec.name!r} has no probe episodes")
    return [Trajectory.from_dict(record) for record in spec.lessons.probe_episodes()]


def walked(episode: Trajectory) -> str:
    """The episode's first action: the side a memory episode walked (``""`` if none)."""
    return episode.turns[0].action if episode.turns else ""


def walked_both_ways(split: str, dungeons: Iterable[int] | None = None) -> list[Any]:
    """Each memory dungeon of ``split`` (or just ``dungeons``) played on the probe's env by a
    :class:`~comprl_gym.envs.memory.probe.WalkAgent` east, then west: one won and one lost
    :class:`~comprl_gym.rollouts.Trajectory` each, with ``meta["walked"]`` and episode ids
    ``walked-<task id>-<side>``. The probe's episodes are these on :data:`~comprl_gym.envs.memory.probe.PROBE_DUNGEONS`;
    the known-answer ladder trains on them on ``train``."""
    import gymnasium as gym

    from comprl_gym.envs.memory.dungeons import SIDES, dungeon, pool
    from comprl_gym.envs.memory.probe import PROBE_ENV_ID, PROBE_ENV_KWARGS, WalkAgent
    from comprl_gym.rollouts import run_episode

    env = gym.make(PROBE_ENV_ID, **{**PROBE_ENV_KWARGS, "split": split})
    episodes = []
    try:
        for index in pool(split) if dungeons is None else dungeons:
            task_id = dungeon(index).task_id("fork")
            for side in SIDES:
                episode = run_episode(
                    env, WalkAgent(side), seed=index, options={"task_id": task_id}
                )
                if episode.error:
                    raise RuntimeError(f"walking {task_id} {side} failed: {episode.error}")
                episode.episode_id = f"walked-{task_id}-{side}"
                episode.meta = {"walked": side, "group": index}
                episodes.append(episode)
    finally:
        env.close()
    return episodes


# ---------------------------------------------------------------------------- scripted rules
def _choice_of(stem: LessonStem, action: str) -> int:
    """The index of the stem's choice that names ``action`` as a word."""
    pattern = re.compile(rf"\b{re.escape(action)}\b", re.IGNORECASE)
    found = [i for i, choice in enumerate(stem.choices) if action and pattern.search(choice)]
    if len(found) != 1:
        raise ConfigurationError(
            f"the lesson stem's choices {stem.choices} do not name {action!r} exactly once"
        )
    return found[0]


class ScriptedRule:
    """A lesson writer without a model: fills the family's lesson stem (the oracle-lesson
    format, :attr:`~comprl_gym.lessons.core.FamilyLessons.stem`) with the choice ``pick``
    makes from the episode, and adds it to the store it is given.

    ``pick(episode, stem)`` returns the index of a choice; the constructors below are the rules
    the probe compares extractors with.
    """

    def __init__(self, name: str, pick: Callable[[Trajectory, LessonStem], int]):
        self.name = name
        self.pick = pick

    @classmethod
    def outcome_aware(cls) -> ScriptedRule:
        """The side walked if the episode was won, else the other: the ceiling (1.0 / 1.0)."""

        def pick(episode: Trajectory, stem: LessonStem) -> int:
            if len(stem.choices) != 2:
                raise ConfigurationError("the outcome-aware rule needs a stem of two choices")
            walked_choice = _choice_of(stem, walked(episode))
            return walked_choice if episode.won else 1 - walked_choice

        return cls("scripted outcome-aware rule", pick)

    @classmethod
    def walked_side(cls) -> ScriptedRule:
        """The side walked, whatever the outcome (right after wins only: 1.0 / 0.0)."""
        return cls("scripted walked side", lambda e, stem: _choice_of(stem, walked(e)))

    @classmethod
    def always(cls, word: str) -> ScriptedRule:
        """The choice that names ``word`` (e.g. ``"east"``), whatever the episode."""
        return cls(f"scripted always {word}", lambda e, stem: _choice_of(stem, word))

    def choice_logprobs(self, episode: Trajectory) -> list[tuple[str, float]]:
        """Each lesson of the stem with its log-prob under the rule: 0 for the one it
        writes, minus infinity for the others (a rule is its own greedy choice)."""
        stem = self._stem(episode)
        pick = self.pick(episode, stem)
        return [
            (stem.opening + choice, 0.0 if i == pick else -math.inf)
            for i, choice in enumerate(stem.choices)
        ]

    @staticmethod
    def _stem(episode: Trajectory) -> LessonStem:
        spec = family_of(episode.env_family)
        stem = spec.stem_for(episode.task_id)
        if stem is None:
            raise ConfigurationError(
                f"family {spec.name!r} has no lesson stem for {episode.task_id!r}: a scripted "
                "rule writes only stem lessons"
            )
        return stem

    def write(self, episode: Trajectory, actor_step: int, *, into: Any) -> list[int]:
        """Add the rule's lesson about ``episode`` to ``into``; returns its id."""
        stem = self._stem(episode)
        lesson = stem.opening + stem.choices[self.pick(episode, stem)]
        item = {"title": lesson_title(episode), "description": ""}
        return into.add([{**item, "content": lesson}], env_family=episode.env_family)


# ---------------------------------------------------------------------------- verdicts
@dataclass(frozen=True)
class ProbeVerdict:
    """The probe's verdict on what a writer wrote about one episode (see
    :data:`PROBE_VERDICTS`), with the lessons themselves as the judge read them (the store's
    text: title, description, content)."""

    episode_id: str
    task_id: str
    won: bool
    walked: str
    verdict: str
    lessons: tuple[str, ...] = ()
    #: The writer's own probability of writing a right lesson (its choices' probabilities
    #: at temperature 1, restricted to the stem's choices, summed over those the judge calls
    #: right); ``None`` for a writer that cannot say (a scripted rule, a non-stem extractor).
    p_right: float | None = None
    #: The judge's verdict on the writer's most probable choice (``None`` as for ``p_right``).
    greedy: str | None = None


@dataclass
class ProbeReport:
    """A writer's verdicts on the probe episodes, and the rates they give.

    Example:
        >>> v = [ProbeVerdict("1", "t", True, "east", "right"),
        ...      ProbeVerdict("2", "t", False, "east", "wrong"),
        ...      ProbeVerdict("3", "u", False, "west", "neither")]
        >>> report = ProbeReport("x", v)
        >>> report.right_rate(won=True).mean, report.right_rate(won=False).mean
        (1.0, 0.0)
        >>> report.metrics()["probe/no_side"], report.metrics()["probe/episodes_lost"]
        (1, 2)
    """

    name: str
    verdicts: list[ProbeVerdict] = field(default_factory=list)

    def count(self, verdict: str, won: bool | None = None) -> int:
        """Episodes (won ones, lost ones, or all) given ``verdict``."""
        return sum(v.verdict == verdict and (won is None or v.won == won) for v in self.verdicts)

    def episodes(self, won: bool) -> int:
        return sum(v.won == won for v in self.verdicts)

    def right_rate(self, won: bool, level: float = 0.95) -> Interval:
        """P(right | won) or P(right | lost), with its Wilson interval: every probe episode
        of that outcome counts, so writing nothing is not right."""
        return wilson_interval(self.count("right", won), self.episodes(won), level)

    def greedy_rate(self, won: bool, level: float = 0.95) -> Interval:
        """How often the writer's most probable lesson is right after a win (or a loss), with
        its Wilson interval, over the episodes whose writer could say (none: NaN)."""
        read = [v for v in self.verdicts if v.won == won and v.greedy is not None]
        return wilson_interval(sum(v.greedy == "right" for v in read), len(read), level)

    def mean_p_right(self, won: bool, level: float = 0.95) -> Interval:
        """The mean over episodes of the writer's probability of a right lesson after a win
        (or a loss), with its interval (:func:`~comprl_gym.evaluation.stats.mean_ci`), over the
        episodes whose writer could say (none: NaN). Unlike the sampled rate it carries no
        sampling noise: it moves only with the weights."""
        values = [v.p_right for v in self.verdicts if v.won == won and v.p_right is not None]
        return mean_ci(values, level)

    def metrics(self, prefix: str = "probe/") -> dict[str, float | int | None]:
        """What training logs: the two rates (``None`` without episodes of that outcome),
        episodes and right lessons per outcome, the greedy rate and mean probability of a
        right lesson where the writer can say, and the counts of the other verdicts."""
        out: dict[str, float | int | None] = {}
        for won, label in ((True, "won"), (False, "lost")):
            for name, rate in (
                ("right_after", self.right_rate(won).mean),
                ("greedy_right_after", self.greedy_rate(won).mean),
                ("p_right_after", self.mean_p_right(won).mean),
            ):
                out[f"{prefix}{name}_{label}"] = None if math.isnan(rate) else rate
            out[f"{prefix}right_{label}"] = self.count("right", won)
            out[f"{prefix}episodes_{label}"] = self.episodes(won)
        out[f"{prefix}wrong"] = self.count("wrong")
        for verdict, name in COUNT_METRICS.items():
            out[f"{prefix}{name}"] = self.count(verdict)
        return out

    def to_dict(self) -> dict[str, Any]:
        """The report with its rates and every lesson (JSON-ready)."""
        return {
            "name": self.name,
            "right_after_won": self.right_rate(True).to_dict(),
            "right_after_lost": self.right_rate(False).to_dict(),
            "greedy_right_after_won": self.greedy_rate(True).to_dict(),
            "greedy_right_after_lost": self.greedy_rate(False).to_dict(),
            "p_right_after_won": self.mean_p_right(True).to_dict(),
            "p_right_after_lost": self.mean_p_right(False).to_dict(),
            "counts": {v: self.count(v) for v in PROBE_VERDICTS},
            "verdicts": [asdict(v) for v in self.verdicts],
        }


# ---------------------------------------------------------------------------- the probe
class ScratchEmbedder:
    """The probe's scratch store is written and read back by id, never searched, so its
    vectors need not mean anything: a hash of the text, and no sentence model to load.

    Example:
        >>> vectors = ScratchEmbedder().encode(["a", "b", "a"])
        >>> vectors.shape, bool((vectors[0] == vectors[2]).all())
        ((3, 8), True)
    """

    name = "probe-scratch-hash"
    dim = 8

    def encode(self, texts: list[str]) -> np.ndarray:
        rows = [
            np.frombuffer(hashlib.sha256(t.encode("utf-8")).digest(), dtype=np.uint8)[: self.dim]
            for t in texts
        ]
        vectors = np.asarray(rows, dtype=np.float32).reshape(len(texts), self.dim) + 1.0
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def choice_verdicts(
    writer: Any, episode: Trajectory, spec: FamilySpec, task: Any
) -> tuple[float | None, str | None]:
    """The writer's probability of a right lesson about ``episode`` and the verdict on its
    most probable one, from its ``choice_logprobs(episode)`` (each lesson it could write and
    its log-prob; a writer without it, or that returns ``None``, gives ``(None, None)``).

    Example (two choices at log-odds log 3 for the right one):
        >>> import math
        >>> class Writer:
        ...     def choice_logprobs(self, episode):
        ...         return [("In the Mire of Pearls the staircase down is at the end of the"
        ...                  " east branch.", math.log(0.6)),
        ...                 ("In the Mire of Pearls the staircase down is at the end of the"
        ...                  " west branch.", math.log(0.2))]
        >>> episode = load_probe_episodes("memory")[0]  # its stairs are east
        >>> spec = family_of("memory")
        >>> p, greedy = choice_verdicts(Writer(), episode, spec, spec.judge(episode.task).task_id)
        >>> round(p, 4), greedy
        (0.75, 'right')
    """
    reader = getattr(writer, "choice_logprobs", None)
    choices = None if reader is None else reader(episode)
    if not choices:
        return None, None
    logprobs = np.array([lp for _, lp in choices], dtype=float)
    probs = np.exp(logprobs - logprobs.max())
    probs /= probs.sum()
    verdicts = [episode_verdict([spec.judge(text)], task) for text, _ in choices]
    p_right = float(sum(p for p, v in zip(probs, verdicts) if v == "right"))
    return p_right, verdicts[int(np.argmax(logprobs))]


def run_probe(
    writer: LessonWriter,
    episodes: Iterable[Trajectory],
    name: str = "",
    actor_step: int = 0,
    embedder: Any = None,
) -> ProbeReport:
    """Give each episode to ``writer`` (writing into a scratch store that is thrown away) and
    judge what it wrote about it with its family's judge.

    ``embedder`` is the scratch store's (default :class:`ScratchEmbedder`).
    """
    from comprl_gym.experience import ExperienceConfig, ExperienceManager

    report = ProbeReport(name or getattr(writer, "name", type(writer).__name__))
    with tempfile.TemporaryDirectory(prefix="comprl-probe-") as folder:
        config = ExperienceConfig(diversify=False)
        scratch = ExperienceManager(folder, config, embedder=embedder or ScratchEmbedder())
        try:
            for episode in episodes:
                spec = family_of(episode.env_family)
                if spec.lessons.judge is None:
                    raise ConfigurationError(f"family {spec.name!r} has no lesson judge")
                ids = writer.write(episode, actor_step, into=scratch)
                texts = tuple(e.text for e in scratch.get([int(i) for i in ids]))
                judgements = [spec.judge(text) for text in texts]
                # The task as the judge names it: its verdict on the episode's own task text.
                task = spec.judge(episode.task).task_id
                p_right, greedy = choice_verdicts(writer, episode, spec, task)
                report.verdicts.append(
                    ProbeVerdict(
                        episode.episode_id,
                        episode.task_id,
                        episode.won,
                        walked(episode),
                        episode_verdict(judgements, task),
                        texts,
                        p_right,
                        greedy,
                    )
                )
        finally:
            scratch.close()
    return report


def _rate(interval: Interval, right: int | None = None) -> str:
    if interval.n == 0 or math.isnan(interval.mean):
        return "-"
    count = "" if right is None else f" ({right}/{interval.n})"
    return f"{interval.mean:.2f} [{interval.low:.2f}, {interval.high:.2f}]{count}"


def probe_table(reports: Iterable[ProbeReport]) -> str:
    """A markdown table of probe reports, one row per writer: the sampled rates, the greedy
    rates and the mean probability of a right lesson after a win and after a loss (``-``
    where the writer cannot say), then the counts of the other verdicts.

    Example:
        >>> v = ProbeVerdict("1", "t", True, "east", "right", p_right=0.8, greedy="right")
        >>> print(probe_table([ProbeReport("x", [v])]))  # doctest: +NORMALIZE_WHITESPACE
        | lesson writer | right after a win | right after a loss | greedy right after a win | greedy right after a loss | P(right) after a win | P(right) after a loss | wrong | no side | both sides | other task | nothing written |
        | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |
        | x | 1.00 [0.21, 1.00] (1/1) | - | 1.00 [0.21, 1.00] (1/1) | - | 0.80 [0.13, 0.99] | - | 0 | 0 | 0 | 0 | 0 |
    """
    lines = [
        "| lesson writer | right after a win | right after a loss | greedy right after a win "
        "| greedy right after a loss | P(right) after a win | P(right) after a loss | wrong "
        "| no side | both sides | other task | nothing written |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for report in reports:
        cells = []
        for won in (True, False):
            cells.append(_rate(report.right_rate(won), report.count("right", won)))
        for won in (True, False):
            greedy = sum(v.greedy == "right" for v in report.verdicts if v.won == won)
            cells.append(_rate(report.greedy_rate(won), greedy))
        for won in (True, False):
            cells.append(_rate(report.mean_p_right(won)))
        counts = [report.count(v) for v in ("wrong", "neither", "both", "other_task", "nothing")]
        lines.append(f"| {report.name} | " + " | ".join([*cells, *map(str, counts)]) + " |")
    return "\n".join(lines)


__all__ = [
    "walked_both_ways",
    "COUNT_METRICS",
    "PROBE_VERDICTS",
    "LessonWriter",
    "ProbeReport",
    "ProbeVerdict",
    "ScratchEmbedder",
    "ScriptedRule",
    "can_probe",
    "choice_verdicts",
    "episode_verdict",
    "family_of",
    "load_probe_episodes",
    "probe_table",
    "run_probe",
    "walked",
]
