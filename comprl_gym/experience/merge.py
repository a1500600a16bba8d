"""Planning of store maintenance: near-duplicate pairs and merge windows.

These functions only read the store; :class:`~comprl_gym.experience.ExperienceManager`
applies their plans under its write lock.

* :func:`plan_dedupe` finds pairs whose cosine similarity reaches a threshold and picks, for
  each, the experience to keep (more uses, then more wins, then the older one).
* :func:`window_for` slides over the whole store: each window is a seed (in id order,
  continuing from a saved cursor) plus its nearest not-yet-visited neighbours of the same env
  family, so related entries reach the extractor together and every entry is visited once per
  pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from comprl_gym.experience.store import ExperienceStore


@dataclass
class MergeReport:
    """What one merge pass did."""

    windows: int = 0
    merged: dict[int, list[int]] = field(default_factory=dict)
    dropped: list[int] = field(default_factory=list)
    failed_windows: int = 0
    skipped_windows: int = 0
    errors: list[str] = field(default_factory=list)
    pass_complete: bool = False


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


def window_for(
    store: ExperienceStore, seed: int, families: dict[int, str], window: int, visited: set[int]
) -> list[int]:
    """The seed plus its nearest unvisited active neighbours of the same family (marks them)."""
    visited.add(seed)
    members = [seed]
    key = families.get(seed, "")
    found, _ = store.search(store.vectors([seed]), window * 4, [key])
    for other in found[0]:
        other = int(other)
        if other < 0 or other in visited or families.get(other) != key:
            continue
        members.append(other)
        visited.add(other)
        if len(members) >= window:
            break
    return members
