"""Memories without a model: they learn from a finished episode by storing it, not by writing.

The memory-agent literature's simplest memories keep cases. :class:`ExemplarMemory` keeps what
worked: a won episode's task and the actions that won it
(:func:`~comprl_gym.lessons.exemplar.exemplar_lesson`). :class:`CasesMemory` keeps what
failed as well (the task and the actions that lost it): an actor whose blind guess already
wins the tasks it wins learns nothing from its own wins, but can learn from a recorded loss
which way not to go. Neither loads a model or trains anything; a trained extractor has to beat
them to be worth its weights. Each has one method, :meth:`~ExemplarMemory.learn`, that stores
one finished episode's lesson in a given :class:`~comprl_gym.experience.ExperienceManager`:
the trainers use them for ``experience.memory: exemplar | cases``, and a streaming evaluation
can use them for its arms.

An episode is anything with ``task``, ``turns`` (each with an ``action``), ``won``,
``env_family``, ``task_id`` and ``episode_id`` (a :class:`~comprl_gym.rollouts.Trajectory`).

Example:
    >>> import tempfile
    >>> from types import SimpleNamespace as Turn
    >>> from comprl_gym.experience import ExperienceManager
    >>> from comprl_gym.rollouts import Trajectory
    >>> manager = ExperienceManager(tempfile.mkdtemp())
    >>> lost = Trajectory("e1", "comprl/Memory-Fork-v0", "memory", "3", "Find the stairs.", 0,
    ...                   turns=[Turn(action="east")], won=False)
    >>> ExemplarMemory().learn(lost, manager)  # a loss: the win-only memory keeps nothing
    []
    >>> [lesson] = CasesMemory().learn(lost, manager)
    >>> entry = manager.get_one(lesson)
    >>> entry.title, entry.content
    ('memory: lost', 'Task: Find the stairs.\\nActions that lost it, in order: east.')
    >>> manager.close()
"""

from __future__ import annotations

from typing import Any

from comprl_gym.core import ConfigurationError
from comprl_gym.experience.records import Provenance
from comprl_gym.lessons.core import outcome_title
from comprl_gym.lessons.exemplar import exemplar_lesson


class ExemplarMemory:
    """Stores a won episode's task and actions verbatim (``keep_losses``: a lost one's too)."""

    #: Keep lost episodes as well (what :class:`CasesMemory` does).
    keep_losses: bool = False

    def __init__(self, keep_losses: bool | None = None):
        if keep_losses is not None:
            self.keep_losses = keep_losses
        #: Episodes learned from, and how many of them stored nothing (a loss the memory does
        #: not keep, or an episode without actions).
        self.episodes = 0
        self.declined = 0

    @property
    def name(self) -> str:
        """``cases`` when it keeps losses, else ``exemplar`` (its ``experience.memory``)."""
        return "cases" if self.keep_losses else "exemplar"

    def lesson(self, episode: Any) -> dict[str, str] | None:
        """What it stores for ``episode``: a lesson titled with the family and the outcome, or
        ``None`` when it keeps nothing."""
        actions = [turn.action for turn in episode.turns]
        content = exemplar_lesson(episode.task, actions, episode.won, self.keep_losses)
        if content is None:
            return None
        return {"title": outcome_title(episode), "description": "", "content": content}

    def learn(self, episode: Any, manager: Any, actor_step: int = 0) -> list[int]:
        """Store ``episode``'s lesson through ``manager``; return the ids written (none when it
        keeps nothing). Its provenance: the episode's task, id and family, ``actor_step`` and
        the memory's name as the policy version."""
        self.episodes += 1
        lesson = self.lesson(episode)
        if lesson is None:
            self.declined += 1
            return []
        provenance = Provenance.of_episode(episode, actor_step, self.name)
        return [int(i) for i in manager.add([lesson], provenance)]

    def state_dict(self) -> dict[str, int]:
        """What it did so far (logged as ``memory/*``, kept in checkpoints)."""
        return {"episodes": self.episodes, "declined": self.declined}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.episodes = int(state["episodes"])
        self.declined = int(state["declined"])


class CasesMemory(ExemplarMemory):
    """Stores every episode's task and actions verbatim, won or lost."""

    keep_losses: bool = True


#: The no-model memories by ``experience.memory`` name.
MEMORIES: dict[str, type[ExemplarMemory]] = {"exemplar": ExemplarMemory, "cases": CasesMemory}


def memory_named(name: str) -> ExemplarMemory:
    """A fresh no-model memory called ``name`` (``exemplar`` or ``cases``)."""
    if name not in MEMORIES:
        raise ConfigurationError(f"unknown no-model memory {name!r}; known: {', '.join(MEMORIES)}")
    return MEMORIES[name]()
