"""Plain records of the experience system: an experience, its provenance, a retrieval hit."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

#: Status of a live experience; the others are tombstones kept for provenance.
ACTIVE = "active"
MERGED = "merged"
DROPPED = "dropped"
#: Hidden by expiry: out of the index, row and vector kept (``restore`` brings it back).
EXPIRED = "expired"
STATUSES = (ACTIVE, MERGED, DROPPED, EXPIRED)


def posterior_win_rate(wins: int, uses: int, prior: tuple[float, float] = (1.0, 1.0)) -> float:
    """Posterior mean of a lesson's win rate under a ``Beta(a, b)`` prior:
    ``(wins + a) / (uses + a + b)``. An untried lesson scores the prior mean ``a / (a + b)``, so
    it is neither buried nor favoured before it has been tried.

    Example:
        >>> posterior_win_rate(0, 0), posterior_win_rate(3, 4), posterior_win_rate(0, 8)
        (0.5, 0.6666666666666666, 0.1)
    """
    a, b = prior
    return (wins + a) / (uses + a + b)


@dataclass
class Experience:
    """One lesson in the store, with where it came from and how it has fared.

    Example:
        >>> e = Experience(id=1, title="Stairs", description="Rooms", content="Walk to '>'.")
        >>> print(e.text)
        ## Title: Stairs
        ## Description: Rooms
        ## Content: Walk to '>'.
    """

    id: int
    title: str
    description: str
    content: str
    env_family: str | None = None
    source_task_ids: list[str] = field(default_factory=list)
    source_trajectory_ids: list[str] = field(default_factory=list)
    created_step: int = 0
    policy_version: str = ""
    created_at: float = 0.0
    updated_at: float = 0.0
    status: str = ACTIVE
    merged_from: list[int] = field(default_factory=list)
    replaced_by: int | None = None
    retrieval_count: int = 0
    last_retrieved_at: float = 0.0
    training_count: int = 0
    last_trained_step: int = -1
    wins: int = 0
    uses: int = 0
    upvotes: int = 0
    downvotes: int = 0

    @property
    def text(self) -> str:
        """The experience in the reference's memory format (what prompts show)."""
        return format_experience_text(self.title, self.description, self.content)

    @property
    def win_rate(self) -> float:
        return self.wins / self.uses if self.uses else 0.0

    @property
    def reward(self) -> float:
        """The paper's extractor reward over all uses so far: mean of +1 (won) / -1 (lost)."""
        return (2.0 * self.wins - self.uses) / self.uses if self.uses else 0.0

    @property
    def active(self) -> bool:
        return self.status == ACTIVE

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Experience:
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        return cls(**known)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False)


def format_experience_text(title: str, description: str, content: str) -> str:
    return f"## Title: {title}\n## Description: {description}\n## Content: {content}"


@dataclass(frozen=True)
class Provenance:
    """Where a write came from: the tasks and trajectories, the actor step and policy.

    Example:
        >>> Provenance(task_ids=("minihack-room-3",), actor_step=120, policy_version="v12")
        Provenance(task_ids=('minihack-room-3',), trajectory_ids=(), actor_step=120, policy_version='v12', env_family=None)
    """

    task_ids: tuple[str, ...] = ()
    trajectory_ids: tuple[str, ...] = ()
    actor_step: int = 0
    policy_version: str = ""
    env_family: str | None = None

    @classmethod
    def of_episode(cls, episode: Any, actor_step: int, policy_version: str) -> Provenance:
        """The provenance of a lesson written from one finished episode (a
        :class:`~comprl_gym.rollouts.Trajectory`: its task, id and family).

        Example:
            >>> from types import SimpleNamespace
            >>> episode = SimpleNamespace(task_id="room-1", episode_id="it3-0", env_family="minihack")
            >>> Provenance.of_episode(episode, 3, "exemplar").trajectory_ids
            ('it3-0',)
        """
        return cls(
            task_ids=(episode.task_id,),
            trajectory_ids=(episode.episode_id,),
            actor_step=actor_step,
            policy_version=policy_version,
            env_family=episode.env_family,
        )


@dataclass
class Retrieved:
    """A retrieval hit: the experience and its cosine similarity to the query."""

    experience: Experience
    score: float

    @property
    def id(self) -> int:
        return self.experience.id


#: The default provenance of a write that names none.
NO_PROVENANCE = Provenance()
