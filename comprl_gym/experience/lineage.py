"""A lesson's history from the revision log: where it came from, what became of it, how it fared.

``comprl-gym lesson STORE_DIR ID`` prints :func:`format_history` of :func:`lesson_history`. It
reads the database only (no embedder, no index), so it answers for a store in use, and for a
lesson whose row is gone (evicted or deleted) as long as the log keeps its revisions.

Example:
    >>> import tempfile
    >>> from comprl_gym.experience import ExperienceManager, Provenance
    >>> with ExperienceManager(tempfile.mkdtemp()) as manager:
    ...     [eid] = manager.add(["## Title: Keys\\n## Description: doors\\n## Content: find the key"],
    ...                         Provenance(task_ids=("room-1",), policy_version="v3"))
    ...     manager.report_outcome([eid], won=True)
    ...     history = lesson_history(manager.store.database, eid)
    >>> history["state"], history["origin"]["task_ids"], history["wins"], history["uses"]
    ('active', ['room-1'], 1, 1)
"""

from __future__ import annotations

import time
from typing import Any

from comprl_gym.experience.database import CREATING_KINDS, REMOVING_KINDS, ExperienceDatabase

#: Longest chain of successors followed (a merge chain is never near this long).
MAX_CHAIN = 100


def lesson_history(database: ExperienceDatabase, experience_id: int) -> dict[str, Any] | None:
    """Everything the store knows of lesson ``experience_id``, or ``None`` when neither a row
    nor a kept revision names it.

    Keys: ``id``, ``title``, ``state`` (its status, or the kind of revision that removed it),
    ``origin`` (the creating revision's detail: kind, source tasks and trajectories, actor
    step, policy version, what it merged), ``merged_into`` (the chain of successors, each
    ``{"id", "title", "state"}``), ``uses``/``wins``/``retrieval_count``/``last_retrieved_at``
    and ``revisions`` (every kept revision of it, oldest first).
    """
    eid = int(experience_id)
    rows = database.get([eid])
    revisions = database.revisions(eid)
    if not rows and not revisions:
        return None
    row = rows[0] if rows else None
    created = next((r for r in revisions if r["kind"] in CREATING_KINDS), None)
    removal = next((r for r in reversed(revisions) if r["kind"] in REMOVING_KINDS), None)
    snapshot = removal["detail"] if removal else {}
    if row is not None:
        origin = {
            "kind": created["kind"] if created else "unknown (revision trimmed)",
            "task_ids": row.source_task_ids,
            "trajectory_ids": row.source_trajectory_ids,
            "actor_step": row.created_step,
            "policy_version": row.policy_version,
            "merged_from": row.merged_from,
        }
        tallies = (row.uses, row.wins, row.retrieval_count, row.last_retrieved_at)
        title, state, successor = row.title, row.status, row.replaced_by
    else:
        origin = {"kind": created["kind"], **created["detail"]} if created else {}
        tallies = (
            snapshot.get("uses", 0),
            snapshot.get("wins", 0),
            snapshot.get("retrieval_count", 0),
            0.0,
        )
        title = snapshot.get("title") or origin.get("title", "")
        state = removal["kind"] if removal else "unknown"
        successor = snapshot.get("replaced_by")
    origin.pop("title", None)
    return {
        "id": eid,
        "title": title,
        "state": state,
        "origin": origin,
        "merged_into": _successors(database, successor),
        "uses": tallies[0],
        "wins": tallies[1],
        "retrieval_count": tallies[2],
        "last_retrieved_at": tallies[3],
        "revisions": revisions,
    }


def _successors(database: ExperienceDatabase, successor: int | None) -> list[dict[str, Any]]:
    chain: list[dict[str, Any]] = []
    seen: set[int] = set()
    while successor is not None and successor not in seen and len(chain) < MAX_CHAIN:
        seen.add(successor)
        found = database.get([successor])
        if not found:
            chain.append({"id": successor, "title": "", "state": "removed"})
            break
        nxt = found[0]
        chain.append({"id": nxt.id, "title": nxt.title, "state": nxt.status})
        successor = nxt.replaced_by
    return chain


def format_history(history: dict[str, Any]) -> str:
    """The history as the ``comprl-gym lesson`` command prints it."""
    origin = history["origin"]
    lines = [
        f"lesson {history['id']}: {history['title']!r} ({history['state']})",
        f"  origin: {origin.get('kind', 'unknown')}"
        f" at actor step {origin.get('actor_step', '?')},"
        f" policy {origin.get('policy_version') or '-'!s}",
        f"  source tasks: {', '.join(origin.get('task_ids', [])) or '-'}",
        f"  source trajectories: {', '.join(origin.get('trajectory_ids', [])) or '-'}",
    ]
    if origin.get("merged_from"):
        lines.append(f"  merged from: {', '.join(map(str, origin['merged_from']))}")
    if history["merged_into"]:
        chain = " -> ".join(f"{s['id']} ({s['state']})" for s in history["merged_into"])
        lines.append(f"  merged into: {chain}")
    last = history["last_retrieved_at"]
    lines.append(
        f"  used {history['uses']} times, won {history['wins']};"
        f" retrieved {history['retrieval_count']} times" + (f", last {_when(last)}" if last else "")
    )
    lines.append(f"  revisions ({len(history['revisions'])} kept):")
    for rev in history["revisions"]:
        detail = rev["detail"]
        note = ", ".join(
            f"{k}={v}"
            for k, v in detail.items()
            if k in ("won", "up", "status", "replaced_by", "policy") and v is not None
        )
        lines.append(
            f"    r{rev['rev']} {_when(rev['at'])} {rev['kind']}" + (f" ({note})" if note else "")
        )
    return "\n".join(lines)


def _when(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at)) + "Z"


__all__ = ["format_history", "lesson_history"]
