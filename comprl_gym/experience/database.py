"""The experience database: SQLite (WAL), the source of truth, and every SQL statement.

One row per experience holds its text, provenance, status, tallies (retrievals, uses, wins,
votes, training marks) and its own unit vector, so the vector index can always be rebuilt from
here. Writes run on one connection inside ``BEGIN IMMEDIATE`` transactions opened by
:meth:`ExperienceStore.transaction <comprl_gym.experience.ExperienceStore.transaction>`; reads
use one connection per thread (WAL lets them run beside the writer). A damaged file raises
:class:`~comprl_gym.core.DataError` naming it, or with ``repair=True`` its readable rows are
salvaged into a new file (the damaged one is kept aside).

Example:
    >>> import tempfile, numpy as np
    >>> from pathlib import Path
    >>> from comprl_gym.experience.operations import ExperienceText
    >>> db = ExperienceDatabase(Path(tempfile.mkdtemp()) / "experiences.sqlite3", dim=2)
    >>> cursor = db.begin()
    >>> [eid] = db.insert_rows(cursor, [ExperienceText("T", "D", "C")], np.eye(2, dtype=np.float32)[:1])
    >>> db.add_outcomes(cursor, [eid], won=True); db.commit(cursor)
    >>> e = db.get([eid])[0]; (e.title, e.uses, e.wins)
    ('T', 1, 1)
    >>> db.close()
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from comprl_gym.core import ConfigurationError, DataError
from comprl_gym.experience.embedding import clean_text
from comprl_gym.experience.operations import ExperienceText
from comprl_gym.experience.records import (
    ACTIVE,
    EXPIRED,
    NO_PROVENANCE,
    STATUSES,
    Experience,
    Provenance,
)

logger = logging.getLogger(__name__)

#: 2 added the ``requests`` table (idempotent writes); 3 the ``revisions`` log (an older store
#: gains the tables on open, and one ``add`` revision per row it holds).
SCHEMA_VERSION = 3
DB_NAME = "experiences.sqlite3"

_COLUMNS = (
    "id, title, description, content, env_family, source_task_ids, source_trajectory_ids, "
    "created_step, policy_version, created_at, updated_at, status, merged_from, replaced_by, "
    "retrieval_count, last_retrieved_at, training_count, last_trained_step, wins, uses, "
    "upvotes, downvotes"
)
_SCHEMA = """
CREATE TABLE IF NOT EXISTS experiences (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    title TEXT NOT NULL,
    description TEXT NOT NULL,
    content TEXT NOT NULL,
    env_family TEXT,
    source_task_ids TEXT NOT NULL DEFAULT '[]',
    source_trajectory_ids TEXT NOT NULL DEFAULT '[]',
    created_step INTEGER NOT NULL DEFAULT 0,
    policy_version TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    status TEXT NOT NULL DEFAULT 'active',
    merged_from TEXT NOT NULL DEFAULT '[]',
    replaced_by INTEGER,
    retrieval_count INTEGER NOT NULL DEFAULT 0,
    last_retrieved_at REAL NOT NULL DEFAULT 0,
    training_count INTEGER NOT NULL DEFAULT 0,
    last_trained_step INTEGER NOT NULL DEFAULT -1,
    wins INTEGER NOT NULL DEFAULT 0,
    uses INTEGER NOT NULL DEFAULT 0,
    upvotes INTEGER NOT NULL DEFAULT 0,
    downvotes INTEGER NOT NULL DEFAULT 0,
    vector BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS experiences_status_family ON experiences(status, env_family);
-- covers the usefulness and age eviction orders (10x faster at 10k active than reading rows)
CREATE INDEX IF NOT EXISTS experiences_lifecycle
    ON experiences(status, uses, wins, created_at, last_retrieved_at);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS requests (
    id TEXT PRIMARY KEY,
    result TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS revisions (
    rev INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    kind TEXT NOT NULL,
    experience_id INTEGER NOT NULL,
    detail TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS revisions_experience ON revisions(experience_id);
"""
#: Revision kinds that bring a lesson into the store (a new row) or back into the index.
CREATING_KINDS = ("add", "update", "merge", "import", "migrated")
#: Revision kinds that take an active lesson out of the index but keep its row.
RETIRING_KINDS = ("retire", "replaced", "absorbed", "expire")
#: Revision kinds that remove a lesson's row (``evict``, ``delete`` and ``purge``, of a merged
#: tombstone past its retention, keep a snapshot of it; ``lost``: unreadable when a damaged
#: database was salvaged).
REMOVING_KINDS = ("evict", "delete", "purge", "lost")
#: Revision kinds of tallies (outcomes and votes: what usefulness reads).
TALLY_KINDS = ("outcome", "vote")
#: How long a write's request id is remembered: a retry (Ray re-sending a task whose actor
#: died after committing) comes within seconds; a day is ample and keeps the table small.
REQUEST_ID_TTL_S = 86400.0
#: The tallies a merged or de-duplicated experience passes on to the one that replaces it.
INHERITED_TALLIES = ("uses", "wins", "retrieval_count")


def _eviction_order(policy: str, prior: tuple[float, float]) -> tuple[str, tuple[float, ...]]:
    """The ``ORDER BY`` clause (and its parameters) that ranks active lessons for eviction,
    first evicted first (see ``ExperienceConfig.eviction_policy``); ties go oldest first."""
    if policy == "fifo":  # rowid order: read from the oldest row, stopped by LIMIT
        return "id", ()
    if policy == "usefulness":
        a, b = (float(x) for x in prior)
        return "(wins + ?) / (uses + ? + ?), id", (a, a, b)
    if policy == "age":
        return "max(created_at, last_retrieved_at), id", ()
    raise ConfigurationError(f"unknown eviction policy {policy!r}")


def family_key(family: str | None) -> str:
    """The index key of a family (family-less experiences share the key ``""``)."""
    return family or ""


def _row_to_experience(row: Sequence[Any]) -> Experience:
    return Experience(
        id=row[0],
        title=row[1],
        description=row[2],
        content=row[3],
        env_family=row[4],
        source_task_ids=json.loads(row[5]),
        source_trajectory_ids=json.loads(row[6]),
        created_step=row[7],
        policy_version=row[8],
        created_at=row[9],
        updated_at=row[10],
        status=row[11],
        merged_from=json.loads(row[12]),
        replaced_by=row[13],
        retrieval_count=row[14],
        last_retrieved_at=row[15],
        training_count=row[16],
        last_trained_step=row[17],
        wins=row[18],
        uses=row[19],
        upvotes=row[20],
        downvotes=row[21],
    )


def _family_clause(key: str) -> tuple[str, tuple[Any, ...]]:
    if key == "":
        return "env_family IS NULL", ()
    return "env_family = ?", (key,)


def _chunks(ids: Sequence[int], size: int = 500) -> Iterator[list[int]]:
    ids = [int(i) for i in ids]
    for start in range(0, len(ids), size):
        yield ids[start : start + size]


class ExperienceDatabase:
    """The SQLite file of a store.

    Args:
        path: the database file.
        dim: the vector dimension (checked on read).
        synchronous: SQLite ``synchronous`` pragma.
        quick_check: run ``PRAGMA quick_check`` on open.
        repair: salvage the readable rows of a damaged file instead of raising.
        readonly: only read: no schema, migration or lesson is written, and every write
            raises ``sqlite3.OperationalError``. A store whose WAL holds no commit (closed, or
            a run's checkpoint copy) is read as immutable and no file is touched; one with
            commits in its WAL is read through it. Read a store no process is writing to (a
            finished run's) for an exact snapshot. The store must be at
            :data:`SCHEMA_VERSION` (open it once read-write to migrate it).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        dim: int = 0,
        synchronous: str = "FULL",
        quick_check: bool = True,
        *,
        repair: bool = False,
        readonly: bool = False,
    ):
        self.path = Path(path)
        self.dim = dim
        self.readonly = readonly
        self._synchronous = synchronous
        self._quick_check = quick_check
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self.writer = self._open_readonly() if readonly else self._open(repair)

    def __enter__(self) -> ExperienceDatabase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ opening
    def _connect(self, readonly: bool = False) -> sqlite3.Connection:
        if readonly:
            # Commits still in the WAL: read through it (which writes SQLite's -shm index).
            # None (closed, or checkpointed as a run's checkpoint copy is): every commit is in
            # the file, read as immutable, which touches no file.
            wal = Path(f"{self.path}-wal")
            mode = "mode=ro" if wal.exists() and wal.stat().st_size else "immutable=1"
            uri = f"{self.path.resolve().as_uri()}?{mode}"
            conn = sqlite3.connect(
                uri, uri=True, timeout=60, check_same_thread=False, isolation_level=None
            )
        else:
            conn = sqlite3.connect(
                self.path, timeout=60, check_same_thread=False, isolation_level=None
            )
        conn.execute("PRAGMA busy_timeout = 60000")
        return conn

    def _open_readonly(self) -> sqlite3.Connection:
        if not self.path.is_file():
            raise DataError(self.path, "no experience database here")
        conn = self._connect(readonly=True)
        try:
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise DataError(
                self.path, f"the experience database is corrupt or not a SQLite file ({exc})"
            ) from exc
        if row is None or int(row[0]) != SCHEMA_VERSION:
            conn.close()
            raise DataError(
                self.path,
                f"the store is at schema {row[0] if row else 'unknown'}, this version reads "
                f"{SCHEMA_VERSION}",
                "open it once read-write (ExperienceManager) to migrate it",
            )
        return conn

    def _open(self, repair: bool) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = None
        try:
            conn = self._connect()
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {self._synchronous.upper()}")
            conn.executescript(_SCHEMA)
            self._migrate(conn)
            if self._quick_check:
                result = conn.execute("PRAGMA quick_check").fetchall()
                if result != [("ok",)]:
                    raise sqlite3.DatabaseError("; ".join(str(r[0]) for r in result[:5]))
            return conn
        except sqlite3.DatabaseError as exc:
            if conn is not None:
                conn.close()
            if not repair:
                raise DataError(
                    self.path,
                    f"the experience database is corrupt or not a SQLite file ({exc})",
                    "open the store with repair=True to salvage the readable rows into a new "
                    "database (the damaged file is kept as *.corrupt-<time>)",
                ) from exc
            self._salvage(exc)
            return self._open(repair=False)

    @staticmethod
    def _migrate(conn: sqlite3.Connection) -> None:
        """Bring an older store up to SCHEMA_VERSION (``_SCHEMA`` already created any missing
        table); forget request ids older than REQUEST_ID_TTL_S."""
        conn.execute("BEGIN IMMEDIATE")
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if row is not None and int(row[0]) < SCHEMA_VERSION:
            if int(row[0]) < 3:  # the rows already there enter the revision log as they are
                conn.execute(
                    "INSERT INTO revisions (at, kind, experience_id, detail) "
                    "SELECT ?, 'migrated', id, json_object('status', status) FROM experiences "
                    "ORDER BY id",
                    (time.time(),),
                )
            conn.execute(
                "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),)
            )
            logger.info("experience database migrated from schema %s to %s", row[0], SCHEMA_VERSION)
        conn.execute("DELETE FROM requests WHERE created_at < ?", (time.time() - REQUEST_ID_TTL_S,))
        conn.execute("COMMIT")

    def _salvage(self, cause: Exception) -> None:
        """Copy every readable row of a damaged database into a fresh one."""
        damaged = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}")
        serial = 0
        while damaged.exists():
            serial += 1
            damaged = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}-{serial}")
        for suffix in ("", "-wal", "-shm"):
            source = Path(str(self.path) + suffix)
            if source.exists():
                os.replace(source, Path(str(damaged) + suffix))
        logger.warning(
            "experience database %s is damaged (%s); salvaging into a new file", self.path, cause
        )
        rows: list[tuple[Any, ...]] = []
        meta: list[tuple[str, str]] = []
        revisions: list[tuple[Any, ...]] = []
        try:
            old = sqlite3.connect(f"{damaged.resolve().as_uri()}?mode=ro", uri=True)
            with contextlib.suppress(sqlite3.DatabaseError):
                meta = old.execute("SELECT key, value FROM meta").fetchall()
            with contextlib.suppress(sqlite3.DatabaseError):
                revisions = old.execute(
                    "SELECT rev, at, kind, experience_id, detail FROM revisions ORDER BY rev"
                ).fetchall()
            top = 1 << 62
            with contextlib.suppress(sqlite3.DatabaseError, TypeError):
                top = int(
                    old.execute(
                        "SELECT seq FROM sqlite_sequence WHERE name='experiences'"
                    ).fetchone()[0]
                )
            rows = self._read_ranges(old, 1, top)
            old.close()
        except sqlite3.DatabaseError as exc:
            logger.error("nothing could be read from %s: %s", damaged, exc)
        conn = self._connect()
        conn.executescript(_SCHEMA)
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", meta)
        placeholders = ",".join("?" * (len(_COLUMNS.split(",")) + 1))
        conn.executemany(
            f"INSERT INTO experiences ({_COLUMNS}, vector) VALUES ({placeholders})", rows
        )
        # the log as far as it could be read; a salvaged row it does not name enters it anew
        conn.executemany(
            "INSERT INTO revisions (rev, at, kind, experience_id, detail) VALUES (?, ?, ?, ?, ?)",
            revisions,
        )
        conn.execute(
            "INSERT INTO revisions (at, kind, experience_id, detail) SELECT ?, 'migrated', id, "
            "json_object('status', status, 'salvaged', 1) FROM experiences "
            "WHERE id NOT IN (SELECT experience_id FROM revisions) ORDER BY id",
            (time.time(),),
        )
        # and a lesson the log names that was not salvaged is recorded as lost
        conn.execute(
            "INSERT INTO revisions (at, kind, experience_id, detail) SELECT ?, 'lost', "
            "experience_id, '{}' FROM revisions GROUP BY experience_id "
            "HAVING sum(kind IN ('evict', 'delete', 'purge', 'lost')) = 0 "
            "AND experience_id NOT IN (SELECT id FROM experiences) ORDER BY experience_id",
            (time.time(),),
        )
        conn.execute("COMMIT")
        conn.close()
        logger.warning("salvaged %d experiences from %s", len(rows), damaged)

    @staticmethod
    def _read_ranges(conn: sqlite3.Connection, lo: int, hi: int) -> list[tuple[Any, ...]]:
        """Scan rows with ``lo <= id <= hi`` in id order, hopping over unreadable regions
        (exponentially growing jumps keep a damaged b-tree from costing one query per id)."""
        rows: list[tuple[Any, ...]] = []
        position, jump = lo, 1
        query = f"SELECT {_COLUMNS}, vector FROM experiences WHERE id >= ? AND id <= ? ORDER BY id"
        while position <= hi:
            try:
                for row in conn.execute(query, (position, hi)):
                    rows.append(row)
                    position = row[0] + 1
                return rows
            except sqlite3.DatabaseError:
                position += jump
                jump *= 2
        return rows

    def reader(self) -> sqlite3.Connection:
        """A per-thread read connection (WAL lets readers run beside the writer)."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect(self.readonly)
            conn.execute("PRAGMA query_only = 1")
            self._local.conn = conn
            with self._readers_lock:
                self._readers.append(conn)
        return conn

    # ------------------------------------------------------------------ transactions
    def begin(self) -> sqlite3.Cursor:
        """Open a write transaction on the writer connection."""
        cursor = self.writer.cursor()
        cursor.execute("BEGIN IMMEDIATE")
        return cursor

    @staticmethod
    def commit(cursor: sqlite3.Cursor) -> None:
        cursor.execute("COMMIT")

    @staticmethod
    def rollback(cursor: sqlite3.Cursor) -> None:
        with contextlib.suppress(sqlite3.Error):
            cursor.execute("ROLLBACK")

    def checkpoint(self) -> None:
        """Fold the WAL into the database file."""
        self.writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def close(self) -> None:
        with self._readers_lock:
            for conn in self._readers:
                with contextlib.suppress(Exception):
                    conn.close()
            self._readers.clear()
        self.writer.close()

    # ------------------------------------------------------------------ meta
    def get_meta(self, key: str) -> str | None:
        row = self.writer.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def set_meta(self, values: dict[str, str], cursor: sqlite3.Cursor | None = None) -> None:
        target = cursor or self.writer
        target.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", list(values.items()))

    # ------------------------------------------------------------------ idempotent writes
    @staticmethod
    def request_result(cursor: sqlite3.Cursor, request_id: str) -> tuple[bool, Any]:
        """``(True, result)`` of an earlier committed write with this request id (its result
        as JSON gave it), ``(False, None)`` when none committed."""
        row = cursor.execute("SELECT result FROM requests WHERE id = ?", (request_id,)).fetchone()
        return (False, None) if row is None else (True, json.loads(row[0]))

    @staticmethod
    def record_request(cursor: sqlite3.Cursor, request_id: str, result: Any) -> None:
        """Remember a write's request id and result in the write's own transaction."""
        cursor.execute(
            "INSERT INTO requests (id, result, created_at) VALUES (?, ?, ?)",
            (request_id, json.dumps(result), time.time()),
        )

    # ------------------------------------------------------------------ writes (in a transaction)
    def insert_rows(
        self,
        cursor: sqlite3.Cursor,
        texts: Sequence[ExperienceText],
        vectors: np.ndarray,
        provenance: Provenance = NO_PROVENANCE,
        env_family: str | None = None,
        merged_from: Sequence[Sequence[int]] | None = None,
        kind: str = "add",
    ) -> list[int]:
        """Insert rows holding unit ``vectors``, each logged as a ``kind`` revision (its
        provenance in the detail, so the log still answers after the row is gone); returns
        their new ids."""
        if kind not in CREATING_KINDS:
            raise ConfigurationError(f"{kind!r} is not a revision kind that creates a lesson")
        now = time.time()
        ids = []
        for i, text in enumerate(texts):
            cursor.execute(
                "INSERT INTO experiences (title, description, content, env_family, source_task_ids, "
                "source_trajectory_ids, created_step, policy_version, created_at, updated_at, "
                "merged_from, vector) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    text.title,
                    text.description,
                    text.content,
                    env_family,
                    json.dumps([clean_text(str(t)) for t in provenance.task_ids]),
                    json.dumps([clean_text(str(t)) for t in provenance.trajectory_ids]),
                    int(provenance.actor_step),
                    clean_text(str(provenance.policy_version)),
                    now,
                    now,
                    json.dumps([int(x) for x in (merged_from[i] if merged_from else [])]),
                    np.asarray(vectors[i], dtype=np.float32).tobytes(),
                ),
            )
            ids.append(int(cursor.lastrowid))
        self.log(
            cursor,
            kind,
            ids,
            [
                {
                    "title": text.title,
                    "env_family": env_family,
                    "task_ids": [clean_text(str(t)) for t in provenance.task_ids],
                    "trajectory_ids": [clean_text(str(t)) for t in provenance.trajectory_ids],
                    "actor_step": int(provenance.actor_step),
                    "policy_version": clean_text(str(provenance.policy_version)),
                    "merged_from": [int(x) for x in (merged_from[i] if merged_from else [])],
                }
                for i, text in enumerate(texts)
            ],
        )
        return ids

    def retire_rows(
        self,
        cursor: sqlite3.Cursor,
        ids: Sequence[int],
        status: str,
        replaced_by: int | None,
        kind: str = "retire",
    ) -> dict[str, list[int]]:
        """Tombstone the active ``ids`` (each logged as a ``kind`` revision naming the status
        and successor); returns ``family key -> ids changed``."""
        if status not in STATUSES or status == ACTIVE:
            raise ConfigurationError(f"cannot retire to status {status!r}")
        if kind not in RETIRING_KINDS:
            raise ConfigurationError(f"{kind!r} is not a revision kind that retires a lesson")
        changed: dict[str, list[int]] = {}
        now = time.time()
        for eid in dict.fromkeys(int(i) for i in ids):
            row = cursor.execute(
                "SELECT env_family FROM experiences WHERE id = ? AND status = 'active'", (eid,)
            ).fetchone()
            if row is None:
                continue
            cursor.execute(
                "UPDATE experiences SET status = ?, replaced_by = ?, updated_at = ? WHERE id = ?",
                (status, replaced_by, now, eid),
            )
            changed.setdefault(family_key(row[0]), []).append(eid)
        done = [i for group in changed.values() for i in group]
        self.log(cursor, kind, done, {"status": status, "replaced_by": replaced_by})
        return changed

    def restore_rows(self, cursor: sqlite3.Cursor, ids: Sequence[int]) -> dict[str, list[int]]:
        """Bring expired ``ids`` back to active (a ``restore`` revision each); returns
        ``family key -> ids restored``."""
        changed: dict[str, list[int]] = {}
        for eid in dict.fromkeys(int(i) for i in ids):
            row = cursor.execute(
                "SELECT env_family FROM experiences WHERE id = ? AND status = ?", (eid, EXPIRED)
            ).fetchone()
            if row is None:
                continue
            cursor.execute(
                "UPDATE experiences SET status = 'active', replaced_by = NULL, updated_at = ? "
                "WHERE id = ?",
                (time.time(), eid),
            )
            changed.setdefault(family_key(row[0]), []).append(eid)
        self.log(cursor, "restore", [i for group in changed.values() for i in group], {})
        return changed

    def delete_rows(
        self, cursor: sqlite3.Cursor, ids: Sequence[int], kind: str, detail: dict[str, Any]
    ) -> tuple[list[int], dict[str, list[int]]]:
        """Remove the rows of ``ids`` (any status); each gets a ``kind`` revision holding
        ``detail`` and a snapshot of the row (title, status, tallies, provenance). Returns the
        ids removed and ``family key -> ids`` of those that were active (the index holds only
        those); unknown ids are skipped."""
        if kind not in REMOVING_KINDS:
            raise ConfigurationError(f"{kind!r} is not a revision kind that removes a lesson")
        was_active: dict[str, list[int]] = {}
        removed, snapshots = [], []
        for eid in dict.fromkeys(int(i) for i in ids):
            row = cursor.execute(
                "SELECT title, env_family, status, uses, wins, retrieval_count, created_step, "
                "policy_version, replaced_by FROM experiences WHERE id = ?",
                (eid,),
            ).fetchone()
            if row is None:
                continue
            title, family, status, uses, wins, retrievals, step, policy, successor = row
            cursor.execute("DELETE FROM experiences WHERE id = ?", (eid,))
            removed.append(eid)
            snapshots.append(
                {
                    **detail,
                    "title": title,
                    "env_family": family,
                    "status": status,
                    "uses": uses,
                    "wins": wins,
                    "retrieval_count": retrievals,
                    "created_step": step,
                    "policy_version": policy,
                    "replaced_by": successor,
                }
            )
            if status == ACTIVE:
                was_active.setdefault(family_key(family), []).append(eid)
        self.log(cursor, kind, removed, snapshots)
        return removed, was_active

    def add_outcomes(self, cursor: sqlite3.Cursor, ids: Sequence[int], won: bool) -> None:
        """One episode used ``ids``: ``uses += 1`` and ``wins += won`` for each (once), each
        an ``outcome`` revision."""
        present = self.present_among(cursor, ids)
        cursor.executemany(
            "UPDATE experiences SET uses = uses + 1, wins = wins + ? WHERE id = ?",
            [(1 if won else 0, eid) for eid in present],
        )
        self.log(cursor, "outcome", present, {"won": bool(won)})

    def add_votes(self, cursor: sqlite3.Cursor, ids: Sequence[int], up: bool) -> None:
        column = "upvotes" if up else "downvotes"
        found = set(self.present_among(cursor, ids))
        present = [int(i) for i in ids if int(i) in found]
        cursor.executemany(
            f"UPDATE experiences SET {column} = {column} + 1 WHERE id = ?",
            [(eid,) for eid in present],
        )
        self.log(cursor, "vote", present, {"up": bool(up)})

    @staticmethod
    def present_among(cursor: sqlite3.Cursor, ids: Sequence[int]) -> list[int]:
        """Those of ``ids`` that have a row (any status), each once, in the order given."""
        unique = list(dict.fromkeys(int(i) for i in ids))
        found: set[int] = set()
        for chunk in _chunks(unique):
            marks = ",".join("?" * len(chunk))
            found.update(
                r[0]
                for r in cursor.execute(f"SELECT id FROM experiences WHERE id IN ({marks})", chunk)
            )
        return [i for i in unique if i in found]

    # ------------------------------------------------------------------ the revision log
    @staticmethod
    def log(
        cursor: sqlite3.Cursor,
        kind: str,
        ids: Sequence[int],
        detail: dict[str, Any] | Sequence[dict[str, Any]],
    ) -> None:
        """Append one revision per id (in the caller's transaction): ``detail`` is shared, or
        one per id."""
        if not ids:
            return
        details = [detail] * len(ids) if isinstance(detail, dict) else list(detail)
        now = time.time()
        cursor.executemany(
            "INSERT INTO revisions (at, kind, experience_id, detail) VALUES (?, ?, ?, ?)",
            [(now, kind, int(eid), json.dumps(d)) for eid, d in zip(ids, details)],
        )

    @staticmethod
    def trim_revisions(cursor: sqlite3.Cursor, keep: int) -> None:
        """Forget all but the newest ``keep`` revisions (0 keeps all); numbering goes on."""
        if keep > 0:
            cursor.execute(
                "DELETE FROM revisions WHERE rev <= (SELECT coalesce(max(seq), 0) FROM "
                "sqlite_sequence WHERE name = 'revisions') - ?",
                (int(keep),),
            )

    def revision(self, conn: sqlite3.Connection | sqlite3.Cursor | None = None) -> int:
        """The latest committed revision number (0 for a store never changed)."""
        row = (
            (conn or self.reader())
            .execute("SELECT seq FROM sqlite_sequence WHERE name = 'revisions'")
            .fetchone()
        )
        return int(row[0]) if row else 0

    def count_revisions(self, kind: str) -> int:
        """How many kept revisions are of ``kind`` (read on the writer: an open transaction's
        own revisions count)."""
        row = self.writer.execute("SELECT count(*) FROM revisions WHERE kind = ?", (kind,))
        return int(row.fetchone()[0])

    def revisions(self, experience_id: int | None = None, since: int = 0) -> list[dict[str, Any]]:
        """The kept revisions after ``since``, oldest first (one lesson's when ``experience_id``
        is given): ``{"rev", "at", "kind", "experience_id", "detail"}``."""
        query = "SELECT rev, at, kind, experience_id, detail FROM revisions WHERE rev > ?"
        params: list[Any] = [int(since)]
        if experience_id is not None:
            query += " AND experience_id = ?"
            params.append(int(experience_id))
        return [
            {"rev": r, "at": at, "kind": k, "experience_id": e, "detail": json.loads(d)}
            for r, at, k, e, d in self.reader().execute(query + " ORDER BY rev", params)
        ]

    def check_revisions(self) -> dict[str, Any]:
        """Whether the revision log and the rows agree: numbers without gaps; every row has a
        creating revision (unless trimmed away); no row's last revision removed it; no active
        row's last status change retired it; every removed id is gone. ``ok`` and the faults."""
        conn = self.reader()
        faults: list[str] = []
        revs = [r for (r,) in conn.execute("SELECT rev FROM revisions ORDER BY rev")]
        if revs and revs != list(range(revs[0], revs[0] + len(revs))):
            faults.append("revision numbers have gaps")
        if revs and revs[-1] != self.revision(conn):
            faults.append("the latest revision is not the sequence's")
        oldest = revs[0] if revs else self.revision(conn) + 1
        last: dict[int, str] = {}
        first_seen: dict[int, int] = {}
        for rev, eid, kind in conn.execute(
            "SELECT rev, experience_id, kind FROM revisions "
            f"WHERE kind NOT IN ({','.join('?' * len(TALLY_KINDS))}) ORDER BY rev",
            TALLY_KINDS,
        ):
            last[eid] = kind
            first_seen.setdefault(eid, rev)
        rows = dict(conn.execute("SELECT id, status FROM experiences"))
        for eid, status in rows.items():
            kind = last.get(eid)
            if kind is None:
                if oldest <= 1:
                    faults.append(f"lesson {eid} has no revision")
            elif kind in REMOVING_KINDS:
                faults.append(f"lesson {eid} is present after its {kind} revision")
            elif status == ACTIVE and kind in RETIRING_KINDS:
                faults.append(f"lesson {eid} is active after its {kind} revision")
        for eid, kind in last.items():
            if kind not in REMOVING_KINDS and eid not in rows:
                faults.append(f"lesson {eid} is missing; its last revision is {kind}")
        return {"ok": not faults, "faults": faults[:20], "revisions": len(revs)}

    # ------------------------------------------------------------------ bounds
    @staticmethod
    def eviction_candidates(
        conn: sqlite3.Connection | sqlite3.Cursor,
        count: int,
        policy: str,
        prior: tuple[float, float] = (1.0, 1.0),
    ) -> list[int]:
        """The ``count`` active lessons ``policy`` evicts first, in that order."""
        if count <= 0:
            return []
        order, params = _eviction_order(policy, prior)
        # fifo walks the table in id order (an index on status would sort every active id)
        table = "experiences NOT INDEXED" if policy == "fifo" else "experiences"
        rows = conn.execute(
            f"SELECT id FROM {table} WHERE status = 'active' ORDER BY {order} LIMIT ?",
            (*params, int(count)),
        )
        return [r[0] for r in rows]

    @staticmethod
    def idle_since(conn: sqlite3.Connection | sqlite3.Cursor, before: float) -> list[int]:
        """Active lessons neither written nor retrieved since ``before`` (a time), oldest first."""
        rows = conn.execute(
            "SELECT id FROM experiences WHERE status = 'active' "
            "AND max(created_at, last_retrieved_at) < ? ORDER BY id",
            (float(before),),
        )
        return [r[0] for r in rows]

    @staticmethod
    def merged_before(conn: sqlite3.Connection | sqlite3.Cursor, before: float) -> list[int]:
        """Merged tombstones retired before ``before`` (a time: ``updated_at`` is set when a
        lesson is retired and not after), oldest id first."""
        rows = conn.execute(
            "SELECT id FROM experiences WHERE status = 'merged' AND updated_at < ? ORDER BY id",
            (float(before),),
        )
        return [r[0] for r in rows]

    @staticmethod
    def count_active(conn: sqlite3.Connection | sqlite3.Cursor) -> int:
        return int(
            conn.execute("SELECT count(*) FROM experiences WHERE status='active'").fetchone()[0]
        )

    @staticmethod
    def mark_trained(cursor: sqlite3.Cursor, ids: Sequence[int], actor_step: int) -> None:
        cursor.executemany(
            "UPDATE experiences SET training_count = training_count + 1, "
            "last_trained_step = max(last_trained_step, ?) WHERE id = ?",
            [(int(actor_step), eid) for eid in dict.fromkeys(int(i) for i in ids)],
        )

    @staticmethod
    def add_retrievals(cursor: sqlite3.Cursor, deltas: dict[int, tuple[int, float]]) -> None:
        """Add buffered retrieval counts (``id -> (count, last_time)``)."""
        cursor.executemany(
            "UPDATE experiences SET retrieval_count = retrieval_count + ?, "
            "last_retrieved_at = max(last_retrieved_at, ?) WHERE id = ?",
            [(count, last, eid) for eid, (count, last) in deltas.items()],
        )

    @staticmethod
    def inherit(
        cursor: sqlite3.Cursor, heir: int, sources: Sequence[int], record_sources: bool = False
    ) -> None:
        """``heir`` adds the tallies (uses, wins, retrievals) of ``sources`` to its own, read
        inside the transaction; ``record_sources`` also appends them to its ``merged_from``."""
        sources = [int(s) for s in sources]
        if not sources:
            return
        marks = ",".join("?" * len(sources))
        sums = cursor.execute(
            f"SELECT {', '.join(f'coalesce(sum({c}), 0)' for c in INHERITED_TALLIES)} "
            f"FROM experiences WHERE id IN ({marks})",
            sources,
        ).fetchone()
        sets = ", ".join(f"{c} = {c} + ?" for c in INHERITED_TALLIES)
        params: list[Any] = [*sums, time.time()]
        if record_sources:
            [[merged_from]] = cursor.execute(
                "SELECT merged_from FROM experiences WHERE id = ?", (heir,)
            ).fetchall()
            sets += ", merged_from = ?"
            params.insert(len(sums), json.dumps([*json.loads(merged_from), *sources]))
        cursor.execute(
            f"UPDATE experiences SET {sets}, updated_at = ? WHERE id = ?", [*params, heir]
        )

    @staticmethod
    def restore_state(cursor: sqlite3.Cursor, eid: int, exp: Experience, mapping: dict[int, int]):
        """Copy an imported experience's status and tallies onto its new row ``eid``."""
        cursor.execute(
            "UPDATE experiences SET status=?, merged_from=?, replaced_by=?, retrieval_count=?, "
            "last_retrieved_at=?, training_count=?, last_trained_step=?, wins=?, uses=?, "
            "upvotes=?, downvotes=?, created_at=? WHERE id=?",
            (
                exp.status,
                json.dumps([mapping.get(i, i) for i in exp.merged_from]),
                mapping.get(exp.replaced_by, exp.replaced_by)
                if exp.replaced_by is not None
                else None,
                exp.retrieval_count,
                exp.last_retrieved_at,
                exp.training_count,
                exp.last_trained_step,
                exp.wins,
                exp.uses,
                exp.upvotes,
                exp.downvotes,
                exp.created_at,
                eid,
            ),
        )

    @staticmethod
    def family_of(cursor: sqlite3.Cursor, eid: int) -> str | None:
        row = cursor.execute("SELECT env_family FROM experiences WHERE id = ?", (eid,)).fetchone()
        return row[0] if row else None

    @staticmethod
    def active_among(cursor: sqlite3.Cursor, ids: Sequence[int]) -> set[int]:
        """Those of ``ids`` that are still active (read inside the writer's transaction)."""
        ids = [int(i) for i in ids]
        if not ids:
            return set()
        rows = cursor.execute(
            f"SELECT id FROM experiences WHERE status='active' AND id IN ({','.join('?' * len(ids))})",
            ids,
        )
        return {r[0] for r in rows}

    # ------------------------------------------------------------------ reads
    def get(self, ids: Sequence[int]) -> list[Experience]:
        """Experiences by id, in the order asked (unknown ids are skipped)."""
        ids = [int(i) for i in ids]
        found: dict[int, Experience] = {}
        for chunk in _chunks(ids):
            marks = ",".join("?" * len(chunk))
            for row in self.reader().execute(
                f"SELECT {_COLUMNS} FROM experiences WHERE id IN ({marks})", chunk
            ):
                found[row[0]] = _row_to_experience(row)
        return [found[i] for i in ids if i in found]

    def usage(self, ids: Sequence[int]) -> dict[int, tuple[int, float, int, int]]:
        """``id -> (retrieval_count, last_retrieved_at, uses, wins)`` as stored."""
        out: dict[int, tuple[int, float, int, int]] = {}
        for chunk in _chunks(ids):
            marks = ",".join("?" * len(chunk))
            for eid, count, last, uses, wins in self.reader().execute(
                "SELECT id, retrieval_count, last_retrieved_at, uses, wins FROM experiences "
                f"WHERE id IN ({marks})",
                chunk,
            ):
                out[eid] = (count, last, uses, wins)
        return out

    def iter_experiences(
        self, env_family: str | None = None, include_inactive: bool = False
    ) -> Iterator[Experience]:
        where, params = ["1=1"], []
        if not include_inactive:
            where.append("status = 'active'")
        if env_family is not None:
            where.append("env_family = ?")
            params.append(env_family)
        query = f"SELECT {_COLUMNS} FROM experiences WHERE {' AND '.join(where)} ORDER BY id"
        for row in self.reader().execute(query, params):
            yield _row_to_experience(row)

    def active_ids(
        self, key: str | None = None, conn: sqlite3.Connection | None = None
    ) -> list[int]:
        """Active ids, in id order, of one family key (``None``: every family)."""
        conn = conn or self.reader()
        if key is None:
            rows = conn.execute("SELECT id FROM experiences WHERE status='active' ORDER BY id")
        else:
            clause, params = _family_clause(key)
            rows = conn.execute(
                f"SELECT id FROM experiences WHERE status='active' AND {clause} ORDER BY id", params
            )
        return [r[0] for r in rows]

    def active_family_keys(self, conn: sqlite3.Connection | None = None) -> set[str]:
        rows = (conn or self.reader()).execute(
            "SELECT DISTINCT env_family FROM experiences WHERE status='active'"
        )
        return {family_key(r[0]) for r in rows}

    def active_families(self) -> dict[int, str]:
        """``id -> family key`` of every active experience, in id order."""
        rows = self.reader().execute(
            "SELECT id, env_family FROM experiences WHERE status='active' ORDER BY id"
        )
        return {int(eid): family_key(family) for eid, family in rows}

    def count(self, include_inactive: bool = False) -> int:
        query = "SELECT count(*) FROM experiences" + (
            "" if include_inactive else " WHERE status='active'"
        )
        return int(self.reader().execute(query).fetchone()[0])

    def vectors(self, ids: Sequence[int], conn: sqlite3.Connection | None = None) -> np.ndarray:
        """The stored unit vectors of ``ids`` (rows in the order asked)."""
        conn = conn or self.reader()
        out = np.zeros((len(ids), self.dim), dtype=np.float32)
        position = {int(eid): i for i, eid in enumerate(ids)}
        for chunk in _chunks(ids):
            marks = ",".join("?" * len(chunk))
            for eid, blob in conn.execute(
                f"SELECT id, vector FROM experiences WHERE id IN ({marks})", chunk
            ):
                vector = np.frombuffer(blob, dtype=np.float32)
                if vector.size != self.dim:
                    raise DataError(
                        self.path,
                        f"experience {eid} has a vector of {vector.size} values, expected {self.dim}",
                    )
                out[position[eid]] = vector
        return out


__all__ = ["DB_NAME", "SCHEMA_VERSION", "ExperienceDatabase", "family_key"]
