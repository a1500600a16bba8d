"""What the memory family knows about lessons: which are right, and the fixed ones it can write.

:func:`judge_lesson` is the family's :attr:`~comprl_gym.lessons.core.FamilyLessons.judge`: the
dungeon a lesson is about is the first dungeon named in its text (longest names first, so no
name is read as a shorter one it contains; with or without its article, in any case, or as
its task-id slug ``vault-of-marrow``), and the fact it states is the word ``east`` or
``west`` in its content (after the store's ``## Content:`` heading, where there is one; the
title may name a side without stating it). A lesson is ``right`` when it names only the
stairs' side of its dungeon, ``wrong`` when it names only the other side, ``both`` or
``neither``.

:func:`fixed_lessons` is its :attr:`~comprl_gym.lessons.core.FamilyLessons.fixed`: the
``oracle``, ``inverted`` and ``placebo`` lessons of :mod:`.dungeons` about one dungeon, and
the landmark variant's ``rule``, ``inverted_rule`` and ``rule_placebo``.

Example:
    >>> judge_lesson(oracle_lesson("fork/vault-of-marrow"))
    LessonVerdict(task_id=159, verdict='right')
    >>> judge_lesson("The Vault of Marrow: take the east branch.").verdict
    'wrong'
    >>> judge_lesson("Dark halls fork: try east first.")
    LessonVerdict(task_id=None, verdict='neither')
    >>> fixed_lessons("placebo", "fork/vault-of-marrow")
    'In the Vault of Marrow the air is cold and the old stone walls drip water.'
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable

from comprl_gym.core import ConfigurationError
from comprl_gym.envs.memory.dungeons import (
    DUNGEON_NAMES,
    dungeon,
    inverted_lesson,
    inverted_rule_lesson,
    oracle_lesson,
    placebo_lesson,
    placebo_rule_lesson,
    rule_lesson,
    slug,
)
from comprl_gym.lessons.core import LessonVerdict

#: The store's heading of an experience's content (``## Title: ...`` comes before it).
CONTENT_HEADING = "## Content:"


def _landmark_rule(rule: Callable[[], str]) -> Callable[[int | str], str]:
    """A rule of the landmark variant as a fixed lesson of a task: the same words for every
    dungeon, refused for a fork task (whose dungeons have no landmark to read it by)."""

    def lesson(task: int | str) -> str:
        if isinstance(task, str) and task.startswith("fork/"):
            raise ConfigurationError(
                f"{task!r} is a fork dungeon: the rule lessons read the landmark beside the "
                "start, which only comprl/Memory-Landmark-v0 has"
            )
        return rule()

    return lesson


#: The fixed lessons, by kind (:attr:`~comprl_gym.lessons.core.FamilyLessons.fixed`):
#: each dungeon's own fact (oracle, inverted, placebo) and the landmark variant's one rule
#: (rule, inverted_rule, rule_placebo), the lesson that could help at a first visit.
FIXED_LESSONS = {
    "oracle": oracle_lesson,
    "inverted": inverted_lesson,
    "placebo": placebo_lesson,
    "rule": _landmark_rule(rule_lesson),
    "inverted_rule": _landmark_rule(inverted_rule_lesson),
    "rule_placebo": _landmark_rule(placebo_rule_lesson),
}


@functools.cache
def _dungeon_names() -> re.Pattern[str]:
    spellings = []
    for name in DUNGEON_NAMES:
        bare = name.removeprefix("the ")
        spellings += [
            r"(?:the\s+)?" + re.escape(bare).replace(r"\ ", r"\s+"),
            re.escape(slug(name)),
        ]
    # Longest first: the leftmost match takes the first alternative that fits, so a name is
    # never read as a shorter name it contains.
    spellings.sort(key=len, reverse=True)
    return re.compile(r"\b(?:" + "|".join(spellings) + r")\b", re.IGNORECASE)


def judge_lesson(text: str) -> LessonVerdict:
    """Which dungeon ``text`` is about and whether the side it states is the stairs' side.

    ``task_id`` is the dungeon's index (its ``fork`` and ``landmark`` tasks share the side;
    :func:`~comprl_gym.envs.memory.dungeons.dungeon` reads it back), ``None`` when the text
    names no dungeon (the verdict is then ``neither``).

    Example:
        >>> west = "## Title: Marrow\\n## Description: east or west?\\n## Content: go west in the vault of marrow"
        >>> judge_lesson(west)  # the title's sides are questions, the content's is the fact
        LessonVerdict(task_id=159, verdict='right')
        >>> judge_lesson("In landmark/vault-of-marrow the stairs are east or west.").verdict
        'both'
    """
    found = _dungeon_names().search(text)
    if found is None:
        return LessonVerdict(task_id=None, verdict="neither")
    named = dungeon(re.sub(r"\s+", " ", found.group(0)))
    said = _sides_said(text)
    if not said:
        verdict = "neither"
    elif len(said) == 2:
        verdict = "both"
    else:
        verdict = "right" if said == {named.side} else "wrong"
    return LessonVerdict(task_id=named.index, verdict=verdict)


def _sides_said(text: str) -> set[str]:
    """The sides (``east``, ``west``) the content of ``text`` names."""
    content = text.split(CONTENT_HEADING)[-1].lower()
    return set(re.findall(r"\b(east|west)\b", content))


def named_choice(text: str) -> str | None:
    """The side a lesson names: ``east`` or ``west`` when its content (as
    :func:`judge_lesson` reads it) names exactly one, else ``None``. What a lesson says,
    whichever dungeon it is about and whether it is right.

    Example:
        >>> named_choice(oracle_lesson("fork/vault-of-marrow")), named_choice("east or west?")
        ('west', None)
    """
    said = _sides_said(text)
    return next(iter(said)) if len(said) == 1 else None


def fixed_lessons(kind: str, task_id: int | str) -> str:
    """The fixed lesson of ``kind`` (:data:`FIXED_LESSONS`) about ``task_id``.

    Example:
        >>> fixed_lessons("inverted", "landmark/vault-of-marrow")
        'In the Vault of Marrow the staircase down is at the end of the east branch.'
    """
    if kind not in FIXED_LESSONS:
        raise ConfigurationError(
            f"the memory family writes no {kind!r} lesson (it writes: {', '.join(FIXED_LESSONS)})"
        )
    return FIXED_LESSONS[kind](task_id)


__all__ = ["CONTENT_HEADING", "FIXED_LESSONS", "fixed_lessons", "judge_lesson", "named_choice"]
