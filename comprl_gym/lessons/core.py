"""What a lesson is: the words every part of the package writes lessons with.

A lesson is stored as ``{"title", "description", "content"}``. The extractor's plain and stem
lessons, the probe's scripted rules and a family's scripted memories title one with the
family and the start of the task (:func:`lesson_title`); the no-model memories title theirs
with the family and the outcome (:func:`outcome_title`).

Example:
    >>> from types import SimpleNamespace as Episode
    >>> episode = Episode(env_family="memory", task="You are in the Vault of Marrow.", won=False)
    >>> lesson_title(episode), outcome_title(episode)
    ('memory: You are in the Vault of Marrow.', 'memory: lost')
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from comprl_gym.core import ConfigurationError

#: How much of the task a lesson's title keeps.
TITLE_TASK_CHARS = 80


@dataclass(frozen=True)
class LessonStem:
    """A lesson with one blank the extractor fills: ``opening`` starts the extractor's reply
    and it picks one of ``choices`` to end it (sampling is restricted to their first tokens,
    so each must start with a different token).

    Example:
        >>> stem = LessonStem("In the Vault of Marrow the staircase down is at the end of the",
        ...                   (" east branch.", " west branch."))
        >>> stem.opening + stem.choices[1]
        'In the Vault of Marrow the staircase down is at the end of the west branch.'
    """

    opening: str
    choices: tuple[str, ...]

    def __post_init__(self) -> None:
        if len(self.choices) < 2:
            raise ConfigurationError(f"a lesson stem needs two choices or more, got {self.choices}")


@dataclass(frozen=True)
class LessonVerdict:
    """What a family's lesson judge says of one lesson: the task it is about (``None``: it
    names none of the family's tasks) and whether the one fact it states about that task is
    ``"right"``, ``"wrong"``, ``"both"`` (it states both answers) or ``"neither"`` (no fact).
    """

    task_id: Any
    verdict: str


@dataclass(frozen=True)
class ReadingExample:
    """One supervised example of the reading warm-up: the env reset with ``reset_options``
    (e.g. ``{"task_id": 3}``), the actor shown ``lessons`` in its system prompt, and the first
    action a reader of those lessons takes (``answer``, an admissible action). ``format``
    names the lesson format, so the warm-up can log a loss per format."""

    task_id: Any
    reset_options: dict[str, Any]
    lessons: tuple[str, ...]
    answer: str
    format: str


#: What a :class:`LessonVerdict` may say (:func:`~comprl_gym.families.verdict_counts` adds
#: ``no_task``).
VERDICTS: tuple[str, ...] = ("right", "wrong", "both", "neither")


@dataclass(frozen=True)
class FamilyLessons:
    """What an env family knows about lessons (its spec's
    :attr:`~comprl_gym.families.FamilySpec.lessons`); each part is optional.

    Attributes:
        judge: a lesson's text -> its :class:`LessonVerdict` (which task it is about, whether
            its fact is right). A family with a judge gets the "lessons that name the right
            fact" metric in training, the extractor probe and the streaming evaluation.
        named_choice: a lesson's text -> the choice it names (the memory family: ``east`` or
            ``west``), or ``None`` when it names none or several.
        stem: a task id -> the :class:`LessonStem` of a lesson about it, or ``None``. The
            ``stem`` extractor format starts the extractor's reply with it.
        fixed: the fixed lessons by kind (e.g. ``oracle``, ``inverted``, ``placebo``): a task
            id -> that lesson's text; the fixed arms of a streaming evaluation.
        memories: the scripted memories by name, each a stream's seed -> a fresh memory (an
            object with ``name`` and ``lesson(episode)``: the lesson it stores after a
            finished episode, ``{"title", "description", "content"}``, or ``None``); arms that
            bound a streaming evaluation's result, stored as the no-model memories'
            (:mod:`comprl_gym.lessons.memories`).
        reading_examples: ``f(split, formats, sides, env_kwargs)`` -> the
            :class:`ReadingExample` list of the reading warm-up (``formats``: the lesson
            formats to show, ``sides``: the family's labelling option); without it the
            warm-up is refused.
        probe_episodes: ``f()`` -> the extractor probe's episodes, a fixed committed set of
            ``Trajectory.to_dict`` records covering both outcomes
            (:mod:`comprl_gym.lessons.probe`); with a :attr:`judge` they let the probe score
            an extractor.
    """

    judge: Callable[[str], LessonVerdict] | None = None
    named_choice: Callable[[str], str | None] | None = None
    stem: Callable[[Any], LessonStem | None] | None = None
    fixed: Mapping[str, Callable[[Any], str]] = field(default_factory=dict)
    memories: Mapping[str, Callable[[int], Any]] = field(default_factory=dict)
    reading_examples: Callable[..., list[ReadingExample]] | None = None
    probe_episodes: Callable[[], list[dict[str, Any]]] | None = None


def lesson_title(episode: Any) -> str:
    """The title of a lesson about ``episode`` (anything with ``env_family`` and ``task``):
    its family and the first :data:`TITLE_TASK_CHARS` characters of its task."""
    return f"{episode.env_family}: {episode.task[:TITLE_TASK_CHARS]}"


def outcome_title(episode: Any) -> str:
    """The title of a stored episode (the no-model memories' lessons): its family and
    whether it was ``won`` or ``lost``."""
    return f"{episode.env_family}: {'won' if episode.won else 'lost'}"


def episode_verdict(judgements: list[Any], task: Any) -> str:
    """One episode's verdict from the judge's :class:`LessonVerdict` of
    each lesson written about it. ``task`` is the episode's task as the judge names it (its
    verdict on the episode's task text; ``None`` when it names none, and then every lesson
    counts). Lessons about another task are set aside (``other_task`` if nothing else is
    left); among the rest, ``both`` when some say right and some wrong (or one says both), else
    the verdict they share (``right``, ``wrong``), else ``neither``.

    Example:
        >>> V = LessonVerdict
        >>> episode_verdict([V(3, "right"), V(None, "neither")], 3)
        'right'
        >>> episode_verdict([V(3, "right"), V(3, "wrong")], 3)
        'both'
        >>> episode_verdict([V(4, "right")], 3), episode_verdict([], 3)
        ('other_task', 'nothing')
    """
    if not judgements:
        return "nothing"
    mine = [j.verdict for j in judgements if None in (j.task_id, task) or j.task_id == task]
    if not mine:
        return "other_task"
    said = set(mine) - {"neither"}
    if "both" in said or {"right", "wrong"} <= said:
        return "both"
    return next(iter(said)) if said else "neither"


__all__ = [
    "TITLE_TASK_CHARS",
    "VERDICTS",
    "FamilyLessons",
    "LessonStem",
    "LessonVerdict",
    "ReadingExample",
    "episode_verdict",
    "lesson_title",
    "outcome_title",
]
