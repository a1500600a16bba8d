"""The memory family's lessons in every format the reading warm-up teaches, and its examples.

The reading warm-up (:mod:`comprl_gym.trainers.warmup`, ``TrainConfig.warmup``) teaches the
actor to follow a lesson before reinforcement learning starts: each example is a training
dungeon's first prompt with a lesson in its system message, labelled with the side a reader
of that lesson takes. :func:`reading_examples` is the family's
:attr:`~comprl_gym.lessons.core.FamilyLessons.reading_examples` hook; :func:`lesson_text` writes a
lesson in one format, :func:`neighbour` finds the dungeon whose record a memory would show
for a dungeon it holds none about.

Example:
    >>> examples = reading_examples("train", ["oracle"], "true", {"branch_length": 2})
    >>> len(examples), examples[0].answer == dungeon(0).side
    (192, True)
    >>> examples[0].lessons == (oracle_lesson(0),)
    True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from comprl_gym.core import ConfigurationError
from comprl_gym.envs.memory.dungeons import (
    BRANCH_LENGTH,
    SIDES,
    dungeon,
    inverted_lesson,
    inverted_rule_lesson,
    oracle_lesson,
    other_side,
    pool,
    rule_lesson,
    task_text,
)
from comprl_gym.lessons.core import ReadingExample

#: The lesson formats the reading warm-up can show: the oracle's sentence; what the exemplar
#: memory stores after a straight win (the task and the winning moves); what the case memory
#: stores after a loss (the task and the one step into the wrong branch); ``none``, the prompt
#: with no lesson; ``mismatched``, another training dungeon's lesson (one whose name shares a
#: word, :func:`neighbour`); ``rule`` (the landmark variant only), the one rule that holds in
#: every dungeon, written for the other side as its inversion (so only reading the rule *and*
#: the landmark's side in the observation lowers the loss).
READING_FORMATS = ("oracle", "exemplar", "lost_case", "none", "mismatched", "rule")
#: Formats labelled once with each side whatever ``sides`` says: nothing in them tells which.
#: Without a lesson a coin is all the actor can know; a record about a neighbour says nothing
#: about this dungeon, and a streaming memory shows one to a dungeon it has none for.
COIN_FORMATS = ("none", "mismatched")
#: ``sides``: each dungeon's lesson written for both sides (a dungeon's name then says nothing
#: about the answer: only reading lowers the loss), or for its own side only (``true``).
READING_SIDES = ("both", "true")


def lesson_text(
    kind: str,
    index: int,
    branch_length: int = BRANCH_LENGTH,
    side: str | None = None,
    variant: str = "fork",
) -> str:
    """The lesson about dungeon ``index`` in one format, written as if its stairs lay on
    ``side`` (default: the dungeon's own side): ``"oracle"`` (the benchmark's sentence),
    ``"inverted"`` (its opposite), ``"exemplar"`` (what the exemplar memory stores after a
    straight win: the task and the winning moves,
    :func:`~comprl_gym.lessons.exemplar.exemplar_lesson`), ``"lost_case"`` (what the
    case memory stores after a loss: the task and the one step into the wrong branch; the
    side to take is the other one) or ``"rule"`` (the landmark variant's rule, or its inversion
    when ``side`` is not the dungeon's: the same words in every dungeon). ``variant`` is the
    env's (its task text is the exemplar's).

    Example:
        >>> lesson_text("oracle", 0) == oracle_lesson(0)
        True
        >>> lesson_text("oracle", 0, side=other_side(dungeon(0).side)) == inverted_lesson(0)
        True
        >>> print(lesson_text("exemplar", 0, 2, side="east").splitlines()[1])
        Actions that won it, in order: east, east.
        >>> lesson_text("rule", 0, variant="landmark") == rule_lesson()
        True
    """
    d = dungeon(index)
    side = side or d.side
    other = other_side(side)  # (a ConfigurationError for a bad side)
    if kind == "exemplar":
        return case_record(task_text(variant, d), [side] * branch_length, "won")
    if kind == "lost_case":
        return case_record(task_text(variant, d), [other], "lost")
    if kind == "rule":
        if variant != "landmark":
            raise ConfigurationError(
                f"the rule lesson reads the landmark beside the start: the {variant!r} variant "
                "has none (warm up on comprl/Memory-Landmark-v0)"
            )
        return rule_lesson() if side == d.side else inverted_rule_lesson()
    if kind in ("oracle", "inverted"):
        # The inverted lesson is the oracle's sentence with the other side.
        return (oracle_lesson if (kind == "oracle") == (side == d.side) else inverted_lesson)(index)
    raise ConfigurationError(
        f"unknown lesson kind {kind!r}; choose from oracle, inverted, exemplar, lost_case, rule"
    )


def case_record(task: str, actions: list[str], outcome: str) -> str:
    """The text :func:`comprl_gym.lessons.exemplar.exemplar_lesson` stores for an episode of
    ``task`` that ``outcome`` (won / lost) with ``actions``. Written out here because an env
    family sits below the experience package (tests/test_imports.py); a test holds the two
    equal (tests/test_trainers_warmup.py)."""
    return f"Task: {task.strip()}\nActions that {outcome} it, in order: {', '.join(actions)}."


def neighbour(index: int) -> int:
    """The first dungeon after ``index`` in its pool (cyclically) whose name shares a word with
    its own: the kind of record a memory retrieves for a dungeon it holds none about.

    Example:
        >>> other = neighbour(0)
        >>> other != 0 and bool(set(dungeon(0).name.split()) & set(dungeon(other).name.split()))
        True
    """
    d = dungeon(index)
    indices = pool(d.split)
    words = set(d.name.split()) - {"the", "of"}
    start = indices.index(index)
    for step in range(1, len(indices)):
        other = indices[(start + step) % len(indices)]
        if words & set(dungeon(other).name.split()):
            return other
    raise ConfigurationError(f"no dungeon of {d.split} shares a word with {d.name}")


def reading_examples(
    split: str, formats: Sequence[str], sides: str, env_kwargs: Mapping[str, Any]
) -> list[ReadingExample]:
    """Every dungeon of ``split`` in every one of ``formats`` (format by format, dungeons in
    pool order): the reset that plays it (``{"task_id": position in the pool}``), the lesson
    shown and the side a reader of it takes.

    ``sides="true"``: one example per dungeon, its lesson about the dungeon's own side;
    ``"both"``: two, the lesson written for each side in turn. The coin formats
    (:data:`COIN_FORMATS`) always give two, labelled east and west, with no lesson (``none``)
    or with the :func:`neighbour`'s lesson (the oracle's sentence for even pool positions, the
    exemplar's moves for odd ones). ``env_kwargs`` are the env's (``variant``,
    ``branch_length``: the exemplar's moves and task text follow them).

    Example:
        >>> [e.answer for e in reading_examples("train", ["none"], "true", {})[:2]]
        ['east', 'west']
    """
    unknown = [f for f in formats if f not in READING_FORMATS]
    if unknown or not formats:
        raise ConfigurationError(
            f"memory reading formats: unknown {unknown or 'none given'}; choose from "
            f"{', '.join(READING_FORMATS)}"
        )
    if sides not in READING_SIDES:
        raise ConfigurationError(
            f"memory reading sides must be one of {READING_SIDES}, not {sides!r}"
        )
    variant = env_kwargs.get("variant", "fork")
    branch_length = int(env_kwargs.get("branch_length", BRANCH_LENGTH))
    examples = []
    for kind in formats:
        for position, index in enumerate(pool(split)):
            d = dungeon(index)
            labelled = (d.side,) if sides == "true" and kind not in COIN_FORMATS else SIDES
            for side in labelled:
                if kind == "none":
                    lessons: tuple[str, ...] = ()
                elif kind == "mismatched":
                    shown = ("oracle", "exemplar")[position % 2]
                    lessons = (lesson_text(shown, neighbour(index), branch_length, None, variant),)
                else:
                    lessons = (lesson_text(kind, index, branch_length, side, variant),)
                examples.append(
                    ReadingExample(
                        task_id=d.task_id(variant),
                        reset_options={"task_id": position},
                        lessons=lessons,
                        answer=side,
                        format=kind,
                    )
                )
    return examples


__all__ = [
    "COIN_FORMATS",
    "READING_FORMATS",
    "READING_SIDES",
    "case_record",
    "lesson_text",
    "neighbour",
    "reading_examples",
]
