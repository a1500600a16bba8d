"""A lesson's history from the revision log: where it came from, what became of it, how it fared.

``comprl-gym lesson STORE_DIR ID`` prints :func:`format_history` of :func:`lesson_history`. It
reads the database only (no embedder, no index), so it answers for a store in use, and for a
lesson whose row is gone (evicted or deleted) as long as the log keeps its revisions.
``comprl-gym lessons FOLDER`` lists the lessons of a store or of an exported bank
(:func:`read_lessons`, :func:`format_lessons`).

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

import os
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from comprl_gym.core import ConfigurationError
from comprl_gym.experience.database import (
    CREATING_KINDS,
    DB_NAME,
    REMOVING_KINDS,
    ExperienceDatabase,
)
from comprl_gym.experience.records import Experience

#: Longest chain of successors followed (a merge chain is never near this long).
MAX_CHAIN = 100


def lesson_history(database: ExperienceDatabase, experience_id: int) -> dict[str, Any] | None:
    """Everything the store knows of lesson ``experience_id``, or ``None`` when neither a row
    nor a kept revision names it.

    Keys: ``id``, ``title``, ``state`` (its status, or the kind of revision that removed it),
    ``origin`` (the creating revision's detail: kind, source tasks and trajectories, actor
    step, policy version, what it merged), ``merged_into`` (the chain of successors, each
    ``{"id", "title", "state"}``), ``uses``/``wins``/``retrieval_count``/``last_retrieved_at``,
    ``revisions`` (every kept revision of it, oldest first) and ``text`` (the lesson's full
    text; ``None`` once its row is deleted: a removal keeps a snapshot of its title and
    tallies, not its text).
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
        "text": row.text if row is not None else None,
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
    text = history.get("text")
    if text is None:
        lines.insert(1, "  text: not kept (the lesson's row was deleted)")
    else:
        lines[1:1] = ["  text:", *(f"    {line}".rstrip() for line in text.splitlines())]
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


# --------------------------------------------------------------------------------------------
# Listing a store's or a bank's lessons
# --------------------------------------------------------------------------------------------
STORE, BANK = "store", "bank"


def store_kind(folder: str | os.PathLike[str]) -> str:
    """``"store"`` (a store's folder: its database), ``"bank"`` (an exported bank: its
    manifest), or a :class:`ConfigurationError` saying what the folder lacks."""
    path = Path(folder)
    if (path / DB_NAME).is_file():
        return STORE
    if (path / "manifest.json").is_file():
        return BANK
    raise ConfigurationError(
        f"{folder} is neither an experience store (no {DB_NAME}) nor an exported bank "
        "(no manifest.json)"
    )


def read_lessons(folder: str | os.PathLike[str]) -> tuple[str, list[Experience]]:
    """Every lesson of a store folder or of an exported bank (every status, by id), read
    without an embedder: a store's database, or a bank's ``experiences.jsonl`` once its
    manifest's checksums hold. Returns the kind (``"store"`` or ``"bank"``) and the lessons."""
    kind = store_kind(folder)
    if kind == BANK:
        from comprl_gym.experience.bank import _read_experiences, _read_manifest

        _read_manifest(Path(folder))  # a bank is complete, and unchanged, or it is refused
        lessons = _read_experiences(Path(folder) / "experiences.jsonl")
        return kind, sorted(lessons, key=lambda e: e.id)
    database = ExperienceDatabase(Path(folder) / DB_NAME, quick_check=False)
    try:
        return kind, list(database.iter_experiences(include_inactive=True))
    finally:
        database.close()


def bank_history(lesson: Experience) -> dict[str, Any]:
    """:func:`lesson_history`'s keys for a lesson of an exported bank, which keeps each
    lesson's provenance and tallies but no revision log."""
    return {
        "id": lesson.id,
        "title": lesson.title,
        "state": lesson.status,
        "origin": {
            "kind": "exported (a bank keeps no revision log)",
            "task_ids": lesson.source_task_ids,
            "trajectory_ids": lesson.source_trajectory_ids,
            "actor_step": lesson.created_step,
            "policy_version": lesson.policy_version,
            "merged_from": lesson.merged_from,
        },
        "merged_into": [{"id": lesson.replaced_by, "title": "", "state": "?"}]
        if lesson.replaced_by is not None
        else [],
        "uses": lesson.uses,
        "wins": lesson.wins,
        "retrieval_count": lesson.retrieval_count,
        "last_retrieved_at": lesson.last_retrieved_at,
        "revisions": [],
        "text": lesson.text,
    }


def filter_lessons(
    lessons: Sequence[Experience],
    family: str | None = None,
    status: str | None = None,
    min_uses: int = 0,
    limit: int | None = None,
) -> list[Experience]:
    """The lessons of ``family`` (``""``: the family-less ones) with ``status``, used at least
    ``min_uses`` times, the first ``limit`` of them by id."""
    kept = [
        e
        for e in lessons
        if (family is None or (e.env_family or "") == family)
        and (status is None or e.status == status)
        and e.uses >= min_uses
    ]
    return kept[:limit] if limit is not None else kept


def format_lessons(
    shown: Sequence[Experience], every: Sequence[Experience], width: int = 60
) -> str:
    """The table ``comprl-gym lessons`` prints: id, uses, wins, status, family and title (the
    start of the content for a lesson without one) of ``shown``, then a count over ``every``."""
    rows = [
        (
            str(e.id),
            str(e.uses),
            str(e.wins),
            e.status,
            e.env_family or "-",
            _cut(e.title or e.content, width),
        )
        for e in shown
    ]
    header = ("id", "uses", "wins", "status", "family", "title")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    right = {0, 1, 2}  # the numbers

    def line(cells: Sequence[str]) -> str:
        parts = [
            c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))
        ]
        return "  ".join(parts).rstrip()

    statuses = Counter(e.status for e in every)
    counts = ", ".join(f"{n} {s}" for s, n in sorted(statuses.items()))
    footer = f"{len(shown)} of {len(every)} lessons shown" + (f" ({counts})" if counts else "")
    return "\n".join([line(header), *(line(r) for r in rows), footer])


def _cut(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


__all__ = [
    "bank_history",
    "filter_lessons",
    "format_history",
    "format_lessons",
    "lesson_history",
    "read_lessons",
    "store_kind",
]
