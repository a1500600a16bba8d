"""The tasks a trainer plays: an env id and a reset seed (:class:`TaskRef`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TaskRef:
    """One task of the mixture: an env id and the reset seed that fixes the task."""

    env_id: str
    seed: int
