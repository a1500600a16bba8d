"""Planning of store maintenance: near-duplicate pairs, what a merge pass and a cleanup did.

:func:`plan_dedupe` only reads the store; :class:`~comprl_gym.experience.ExperienceManager`
applies its plan under its write lock. It finds pairs whose cosine similarity reaches a
threshold and picks, for each, the experience to keep (more uses, then more wins, then the
older one).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from comprl_gym.experience.store import ExperienceStore


@dataclass
class ScopeMerge:
    """One family's merge: the calls made (indices into the pass's calls), the call whose
    answer produced the new entries (the last successful one, as the reference's
    ``last_triggered_interaction``), the new entries and the entries they replaced."""

    family: str
    calls: list[int] = field(default_factory=list)
    answer_call: int | None = None
    new_ids: list[int] = field(default_factory=list)
    retired: list[int] = field(default_factory=list)


@dataclass
class MergeReport:
    """What one merge pass did: ``merged`` maps each new entry to the entries it replaced."""

    calls: int = 0
    failed_calls: int = 0
    skipped_scopes: int = 0
    merged: dict[int, list[int]] = field(default_factory=dict)
    scopes: list[ScopeMerge] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@dataclass
class CleanupReport:
    """What :meth:`ExperienceManager.cleanup` removed, or with ``dry_run`` would remove:
    ``expired`` (hidden: idle past ``expire_after_s``), ``evicted`` (over ``max_entries``,
    in ``eviction_policy`` order) and ``purged`` (merged tombstones retired
    ``tombstone_retention_s`` ago or more), and the store revision after it."""

    dry_run: bool
    expired: list[int] = field(default_factory=list)
    evicted: list[int] = field(default_factory=list)
    revision: int = 0
    purged: list[int] = field(default_factory=list)


def plan_dedupe(
    store: ExperienceStore, threshold: float, neighbors: int = 8
) -> list[tuple[int, int, float]]:
    """``(loser, keeper, similarity)`` for every near-duplicate to retire, within each family."""
    plan: list[tuple[int, int, float]] = []
    for key in store.family_keys(None):
        ids = store.active_ids(key)
        if len(ids) < 2:
            continue
        id_array = np.asarray(ids, dtype=np.int64)
        pairs: list[tuple[float, int, int]] = []
        for start in range(0, len(ids), 4096):
            chunk = id_array[start : start + 4096]
            found, sims = store.search(store.vectors(chunk.tolist()), neighbors + 1, [key])
            for row, eid in enumerate(chunk):
                for other, sim in zip(found[row], sims[row]):
                    if other >= 0 and other != eid and sim >= threshold and eid < other:
                        pairs.append((float(sim), int(eid), int(other)))
        if not pairs:
            continue
        pairs.sort(reverse=True)
        involved = sorted({i for _, a, b in pairs for i in (a, b)})
        merit = {e.id: (e.uses, e.wins, -e.id) for e in store.get(involved)}
        retired: set[int] = set()
        for sim, a, b in pairs:
            if a in retired or b in retired or a not in merit or b not in merit:
                continue
            keeper, loser = (a, b) if merit[a] >= merit[b] else (b, a)
            retired.add(loser)
            plan.append((loser, keeper, sim))
    return plan
