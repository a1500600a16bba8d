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

from typing import Any

#: How much of the task a lesson's title keeps.
TITLE_TASK_CHARS = 80


def lesson_title(episode: Any) -> str:
    """The title of a lesson about ``episode`` (anything with ``env_family`` and ``task``):
    its family and the first :data:`TITLE_TASK_CHARS` characters of its task."""
    return f"{episode.env_family}: {episode.task[:TITLE_TASK_CHARS]}"


def outcome_title(episode: Any) -> str:
    """The title of a stored episode (the no-model memories' lessons): its family and
    whether it was ``won`` or ``lost``."""
    return f"{episode.env_family}: {'won' if episode.won else 'lost'}"


__all__ = ["TITLE_TASK_CHARS", "lesson_title", "outcome_title"]
