"""ExperienceAccess: what an env wrapper needs from the experience store.

An in-process :class:`~comprl_gym.experience.ExperienceManager` has it, and so has the client
of the shared experience service (:mod:`comprl_gym.distributed.experience_service`), so
:class:`~comprl_gym.wrappers.ExperienceAugmentedEnv` takes either with the same code path.

Example:
    >>> import tempfile
    >>> from comprl_gym.experience import ExperienceManager
    >>> with ExperienceManager(tempfile.mkdtemp()) as manager:
    ...     isinstance(manager, ExperienceAccess)
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from comprl_gym.experience import prompts
from comprl_gym.experience.records import Retrieved


@runtime_checkable
class ExperienceAccess(Protocol):
    """Retrieval, ``search_and_ask`` and outcome reports: the wrappers' view of a store."""

    def retrieve(
        self,
        query: str,
        k: int | None = None,
        env_family: str | None = None,
        diversify: bool | None = None,
        record: bool = True,
        timeout: float | None = 60.0,
    ) -> list[Retrieved]: ...

    def search_and_ask(
        self,
        question: str,
        k: int | None = None,
        env_family: str | None = None,
        refiner: prompts.Refiner | None = None,
        context: dict[str, Any] | None = None,
    ) -> tuple[str, list[int]]: ...

    def report_outcome(
        self, experience_ids: Sequence[int], won: bool, request_id: str | None = None
    ) -> None: ...
