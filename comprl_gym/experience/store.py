"""Durable experience storage: SQLite (WAL) for text, metadata and vectors; usearch HNSW for search.

SQLite is the source of truth: an acknowledged write is a committed transaction, and every
experience row holds its own vector. The usearch indexes (one per env family, cosine metric)
are a cache: saved atomically under a generation number with a checksum, reconciled with the
database on open (a process killed between a commit and an index save loses nothing) and
rebuilt from SQLite on request. A corrupt index file or database raises
:class:`~comprl_gym.core.DataError` naming the file; ``repair=True`` rebuilds the index or
salvages the readable rows of a damaged database (the damaged file is kept aside).

The store is not thread-safe on its own; :class:`~comprl_gym.experience.ExperienceManager`
is the one door that serialises access.

Example:
    >>> import tempfile
    >>> from comprl_gym.experience import ExperienceStore
    >>> store = ExperienceStore(tempfile.mkdtemp())
    >>> [eid] = store.add_texts(["## Title: Stairs\\n## Description: rooms\\n## Content: walk to >"])
    >>> store.get([eid])[0].title
    'Stairs'
    >>> store.close()
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import logging
import os
import re
import sqlite3
import sys
import threading
import time
import zlib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from comprl_gym.core import ConfigurationError, DataError, require
from comprl_gym.experience.config import ExperienceConfig
from comprl_gym.experience.embedding import (
    DEFAULT_MODEL_NAME,
    Embedder,
    SentenceTransformerEmbedder,
    clean_text,
    make_embedder,
    normalize_rows,
)
from comprl_gym.experience.operations import (
    ExperienceText,
    ExtractorOutputError,
    parse_experience_text,
)
from comprl_gym.experience.records import ACTIVE, NO_PROVENANCE, STATUSES, Experience, Provenance
from comprl_gym.utils import atomic_write_bytes, atomic_write_json

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 1
BANK_FORMAT = "comprl-gym-experience-bank"
DB_NAME = "experiences.sqlite3"
INDEX_STATE = "index-state.json"

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
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


def _family_key(family: str | None) -> str:
    return family or ""


def _index_file_stem(family_key: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", family_key) or "_any"
    return f"index-{safe}"


def _crc32_file(path: Path) -> int:
    crc = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 22):
            crc = zlib.crc32(chunk, crc)
    return crc


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


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


def import_usearch() -> Any:
    """Import ``usearch.index``, loading Fast Downward's library first when it is installed.

    usearch's wheel links libstdc++ statically and exports its process-wide unique symbols;
    a Fast Downward library (ALFWorld's engine) loaded after it can no longer parse its input
    ("Failed to match magic word 'end_version'", exit 33). Loaded before, both work.
    """
    if "usearch.index" not in sys.modules and importlib.util.find_spec("fast_downward"):
        import fast_downward

        fast_downward.load_lib()
    return require("usearch.index", "the experience index", "experience")


class ExperienceStore:
    """A folder holding ``experiences.sqlite3`` and one usearch index per env family.

    Args:
        path: the store folder (created if missing).
        embedder: a sentence-transformers model name/folder or an :class:`Embedder`; ``None``
            uses the model the store was created with (default: the packaged all-MiniLM-L6-v2).
        config: index and persistence settings.
        repair: rebuild a corrupt index from SQLite, salvage a damaged database.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        embedder: Embedder | str | os.PathLike[str] | None = None,
        config: ExperienceConfig | None = None,
        *,
        repair: bool = False,
    ):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.config = config or ExperienceConfig()
        self.db_path = self.path / DB_NAME
        self._closed = False
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._index_changes = 0
        self._txn_index_ops: list[tuple[str, str, np.ndarray, np.ndarray | None]] | None = None
        self._db = self._open_database(repair)
        self.embedder, self.dim = self._bind_embedder(embedder)
        self._indexes: dict[str, Any] = {}
        self._load_indexes(repair)

    # ------------------------------------------------------------------ opening
    def _connect(self, readonly: bool = False) -> sqlite3.Connection:
        if readonly:
            uri = f"{self.db_path.resolve().as_uri()}?mode=ro"
            conn = sqlite3.connect(
                uri, uri=True, timeout=60, check_same_thread=False, isolation_level=None
            )
        else:
            conn = sqlite3.connect(
                self.db_path, timeout=60, check_same_thread=False, isolation_level=None
            )
        conn.execute("PRAGMA busy_timeout = 60000")
        return conn

    def _open_database(self, repair: bool) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = None
        try:
            conn = self._connect()
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {self.config.sqlite_synchronous.upper()}")
            conn.executescript(_SCHEMA)
            if self.config.check_database_on_open:
                result = conn.execute("PRAGMA quick_check").fetchall()
                if result != [("ok",)]:
                    raise sqlite3.DatabaseError("; ".join(str(r[0]) for r in result[:5]))
            return conn
        except sqlite3.DatabaseError as exc:
            if conn is not None:
                conn.close()
            if not repair:
                raise DataError(
                    self.db_path,
                    f"the experience database is corrupt or not a SQLite file ({exc})",
                    "open the store with repair=True to salvage the readable rows into a new "
                    "database (the damaged file is kept as *.corrupt-<time>)",
                ) from exc
            self._salvage_database(exc)
            return self._open_database(repair=False)

    def _salvage_database(self, cause: Exception) -> None:
        """Copy every readable row of a damaged database into a fresh one."""
        damaged = self.db_path.with_name(f"{DB_NAME}.corrupt-{int(time.time())}")
        serial = 0
        while damaged.exists():
            serial += 1
            damaged = self.db_path.with_name(f"{DB_NAME}.corrupt-{int(time.time())}-{serial}")
        for suffix in ("", "-wal", "-shm"):
            source = Path(str(self.db_path) + suffix)
            if source.exists():
                os.replace(source, Path(str(damaged) + suffix))
        logger.warning(
            "experience database %s is damaged (%s); salvaging into a new file", self.db_path, cause
        )
        rows: list[tuple[Any, ...]] = []
        meta: list[tuple[str, str]] = []
        try:
            old = sqlite3.connect(f"{damaged.resolve().as_uri()}?mode=ro", uri=True)
            with contextlib.suppress(sqlite3.DatabaseError):
                meta = old.execute("SELECT key, value FROM meta").fetchall()
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

    def _bind_embedder(
        self, spec: Embedder | str | os.PathLike[str] | None
    ) -> tuple[Embedder, int]:
        stored_name = self.get_meta("embedding_model")
        stored_dim = self.get_meta("embedding_dim")
        if spec is None and stored_name and stored_name != DEFAULT_MODEL_NAME:
            spec = stored_name
        embedder = make_embedder(spec)
        if stored_name is None:
            self.set_meta(
                {
                    "embedding_model": embedder.name,
                    "embedding_dim": str(embedder.dim),
                    "schema_version": str(SCHEMA_VERSION),
                    "metric": "cos",
                }
            )
            return embedder, embedder.dim
        if stored_name != embedder.name or int(stored_dim or 0) != embedder.dim:
            raise ConfigurationError(
                f"the store at {self.path} holds vectors of {stored_name!r} (dim {stored_dim}); "
                f"the embedder given is {embedder.name!r} (dim {embedder.dim}). Open it with the "
                "same model, or export it and import the bank with reembed=True."
            )
        return embedder, embedder.dim

    def _new_index(self) -> Any:
        usearch = import_usearch()
        cfg = self.config
        return usearch.Index(
            ndim=self.dim,
            metric="cos",
            dtype="f32",
            connectivity=cfg.hnsw_connectivity,
            expansion_add=cfg.hnsw_expansion_add,
            expansion_search=cfg.hnsw_expansion_search,
        )

    def _load_indexes(self, repair: bool) -> None:
        usearch = import_usearch()
        state = self._read_index_state()
        families = [
            r[0] or ""
            for r in self._db.execute(
                "SELECT DISTINCT env_family FROM experiences WHERE status = 'active'"
            )
        ]
        for key in sorted(set(families) | set(state.get("files", {}))):
            entry = state.get("files", {}).get(key)
            index = None
            if entry is not None:
                file = self.path / entry["file"]
                try:
                    if not file.exists():
                        raise ValueError("the file is missing")
                    if file.stat().st_size != entry["size"] or _crc32_file(file) != entry["crc32"]:
                        raise ValueError(
                            "size or checksum differs from the one recorded at save time"
                        )
                    index = usearch.Index.restore(str(file))
                    if index is None or index.ndim != self.dim:
                        raise ValueError(
                            f"dimension {getattr(index, 'ndim', '?')} != store dimension {self.dim}"
                        )
                    index.expansion_search = self.config.hnsw_expansion_search
                except (RuntimeError, ValueError, OSError) as exc:
                    if not repair:
                        raise DataError(
                            file,
                            f"corrupt or truncated usearch index ({exc})",
                            "open the store with repair=True to rebuild the index from the database "
                            "(no experience is lost: SQLite holds every vector)",
                        ) from exc
                    logger.warning("rebuilding index %s from the database: %s", file, exc)
                    index = None
            self._indexes[key] = index if index is not None else self._new_index()
            self._reconcile(key)

    def _read_index_state(self) -> dict[str, Any]:
        file = self.path / INDEX_STATE
        if not file.exists():
            return {}
        try:
            return json.loads(file.read_text())
        except (OSError, ValueError) as exc:
            logger.warning(
                "ignoring unreadable %s (%s); indexes are rebuilt from the database", file, exc
            )
            return {}

    def _reconcile(self, key: str) -> None:
        """Make the ``key`` index hold exactly the active ids of that family in SQLite."""
        index = self._indexes[key]
        family_sql, params = self._family_clause(key)
        db_ids = np.fromiter(
            (
                r[0]
                for r in self._db.execute(
                    f"SELECT id FROM experiences WHERE status='active' AND {family_sql}", params
                )
            ),
            dtype=np.int64,
        )
        index_ids = np.asarray(index.keys, dtype=np.int64) if len(index) else np.zeros(0, np.int64)
        extra = np.setdiff1d(index_ids, db_ids, assume_unique=True)
        missing = np.setdiff1d(db_ids, index_ids, assume_unique=True)
        if extra.size:
            index.remove(extra.astype(np.uint64))
        if missing.size:
            logger.info(
                "adding %d vectors from the database to index %r", missing.size, key or "_any"
            )
            for start in range(0, missing.size, 20000):
                chunk = missing[start : start + 20000]
                vectors = self._vectors_of(chunk.tolist())
                index.add(chunk.astype(np.uint64), vectors)
        if extra.size or missing.size:
            self._index_changes += int(extra.size + missing.size)

    @staticmethod
    def _family_clause(key: str) -> tuple[str, tuple[Any, ...]]:
        if key == "":
            return "env_family IS NULL", ()
        return "env_family = ?", (key,)

    # ------------------------------------------------------------------ connections
    def _reader(self) -> sqlite3.Connection:
        """A per-thread read connection (WAL lets readers run beside the writer)."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            conn.execute("PRAGMA query_only = 1")
            self._local.conn = conn
            with self._readers_lock:
                self._readers.append(conn)
        return conn

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Cursor]:
        """One atomic write: SQLite commits first, then the in-memory indexes follow."""
        self._check_open()
        if self._txn_index_ops is not None:
            raise RuntimeError("nested experience-store transactions are not supported")
        cursor = self._db.cursor()
        cursor.execute("BEGIN IMMEDIATE")
        self._txn_index_ops = []
        try:
            yield cursor
            cursor.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                cursor.execute("ROLLBACK")
            self._txn_index_ops = None
            raise
        ops, self._txn_index_ops = self._txn_index_ops, None
        for op, key, ids, vectors in ops:
            index = self._indexes.get(key)
            if index is None:
                index = self._indexes[key] = self._new_index()
            if op == "add":
                index.add(ids.astype(np.uint64), vectors)
            else:
                present = np.array([i for i in ids if index.contains(int(i))], dtype=np.uint64)
                if present.size:
                    index.remove(present)
            self._index_changes += len(ids)
        autosave = self.config.index_autosave_changes
        if autosave and self._index_changes >= autosave:
            self.save_indexes()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"the experience store at {self.path} is closed")

    # ------------------------------------------------------------------ meta
    def get_meta(self, key: str) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def set_meta(self, values: dict[str, str], cursor: sqlite3.Cursor | None = None) -> None:
        target = cursor or self._db
        target.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", list(values.items()))

    # ------------------------------------------------------------------ writes
    def embed_texts(self, texts: Sequence[ExperienceText]) -> np.ndarray:
        """The vector an experience is indexed under: its title, description and content."""
        return self.embedder.encode([f"{t.title}\n{t.description}\n{t.content}" for t in texts])

    def to_texts(
        self, items: Iterable[str | dict[str, Any] | ExperienceText]
    ) -> list[ExperienceText]:
        """Validate experience texts (strings in any accepted format, dicts or ExperienceText)."""
        out = []
        for item in items:
            if isinstance(item, ExperienceText):
                total = len(item.title) + len(item.description) + len(item.content)
                if total > self.config.max_text_chars:
                    raise ConfigurationError(
                        f"experience text of {total} characters exceeds max_text_chars"
                    )
                out.append(
                    ExperienceText(
                        clean_text(item.title),
                        clean_text(item.description),
                        clean_text(item.content),
                    )
                )
                continue
            try:
                out.append(parse_experience_text(item, self.config.max_text_chars))  # type: ignore[arg-type]
            except ExtractorOutputError as exc:
                raise ConfigurationError(f"bad experience text: {exc}") from None
        return out

    def insert(
        self,
        cursor: sqlite3.Cursor,
        texts: Sequence[ExperienceText],
        vectors: np.ndarray,
        provenance: Provenance = NO_PROVENANCE,
        env_family: str | None = None,
        merged_from: Sequence[Sequence[int]] | None = None,
    ) -> list[int]:
        """Insert rows inside an open :meth:`transaction`; returns their new ids."""
        vectors = normalize_rows(vectors)
        if vectors.shape != (len(texts), self.dim):
            raise ConfigurationError(
                f"expected vectors of shape {(len(texts), self.dim)}, got {vectors.shape}"
            )
        if not np.isfinite(vectors).all():
            raise ConfigurationError("experience vectors contain NaN or infinity")
        family = env_family if env_family is not None else provenance.env_family
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
                    family,
                    json.dumps([clean_text(str(t)) for t in provenance.task_ids]),
                    json.dumps([clean_text(str(t)) for t in provenance.trajectory_ids]),
                    int(provenance.actor_step),
                    clean_text(str(provenance.policy_version)),
                    now,
                    now,
                    json.dumps([int(x) for x in (merged_from[i] if merged_from else [])]),
                    vectors[i].tobytes(),
                ),
            )
            ids.append(int(cursor.lastrowid))
        assert self._txn_index_ops is not None, "insert() must run inside transaction()"
        self._txn_index_ops.append(
            ("add", _family_key(family), np.array(ids, dtype=np.int64), vectors)
        )
        return ids

    def retire(
        self,
        cursor: sqlite3.Cursor,
        ids: Sequence[int],
        status: str,
        replaced_by: int | None = None,
    ) -> list[int]:
        """Tombstone active ids (``merged``/``dropped``) inside a transaction; returns those changed."""
        if status not in STATUSES or status == ACTIVE:
            raise ConfigurationError(f"cannot retire to status {status!r}")
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
            changed.setdefault(_family_key(row[0]), []).append(eid)
        assert self._txn_index_ops is not None, "retire() must run inside transaction()"
        for key, family_ids in changed.items():
            self._txn_index_ops.append(("remove", key, np.array(family_ids, dtype=np.int64), None))
        return [i for group in changed.values() for i in group]

    def add_texts(
        self,
        items: Sequence[str | dict[str, Any] | ExperienceText],
        provenance: Provenance = NO_PROVENANCE,
        env_family: str | None = None,
        vectors: np.ndarray | None = None,
    ) -> list[int]:
        """Validate, embed (unless ``vectors`` are given) and insert experiences atomically."""
        texts = self.to_texts(items)
        if not texts:
            return []
        vectors = (
            self.embed_texts(texts) if vectors is None else np.asarray(vectors, dtype=np.float32)
        )
        with self.transaction() as cursor:
            return self.insert(cursor, texts, vectors, provenance, env_family)

    # ------------------------------------------------------------------ reads
    def get(self, ids: Sequence[int]) -> list[Experience]:
        """Experiences by id, in the order asked (unknown ids are skipped)."""
        ids = [int(i) for i in ids]
        if not ids:
            return []
        conn = self._reader()
        found: dict[int, Experience] = {}
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            for row in conn.execute(
                f"SELECT {_COLUMNS} FROM experiences WHERE id IN ({marks})", chunk
            ):
                found[row[0]] = _row_to_experience(row)
        return [found[i] for i in ids if i in found]

    def usage(self, ids: Sequence[int]) -> dict[int, tuple[int, float]]:
        """``id -> (retrieval_count, last_retrieved_at)`` as stored."""
        ids = [int(i) for i in ids]
        out: dict[int, tuple[int, float]] = {}
        conn = self._reader()
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            for eid, count, last in conn.execute(
                f"SELECT id, retrieval_count, last_retrieved_at FROM experiences WHERE id IN ({marks})",
                chunk,
            ):
                out[eid] = (count, last)
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
        for row in self._reader().execute(query, params):
            yield _row_to_experience(row)

    def active_ids(self, family_key: str | None = None) -> list[int]:
        if family_key is None:
            rows = self._reader().execute(
                "SELECT id FROM experiences WHERE status='active' ORDER BY id"
            )
        else:
            clause, params = self._family_clause(family_key)
            rows = self._reader().execute(
                f"SELECT id FROM experiences WHERE status='active' AND {clause} ORDER BY id", params
            )
        return [r[0] for r in rows]

    def count(self, include_inactive: bool = False) -> int:
        query = "SELECT count(*) FROM experiences" + (
            "" if include_inactive else " WHERE status='active'"
        )
        return int(self._reader().execute(query).fetchone()[0])

    def _vectors_of(self, ids: Sequence[int]) -> np.ndarray:
        out = np.zeros((len(ids), self.dim), dtype=np.float32)
        position = {int(eid): i for i, eid in enumerate(ids)}
        conn = self._reader()
        for start in range(0, len(ids), 500):
            chunk = [int(i) for i in ids[start : start + 500]]
            marks = ",".join("?" * len(chunk))
            for eid, blob in conn.execute(
                f"SELECT id, vector FROM experiences WHERE id IN ({marks})", chunk
            ):
                vector = np.frombuffer(blob, dtype=np.float32)
                if vector.size != self.dim:
                    raise DataError(
                        self.db_path,
                        f"experience {eid} has a vector of {vector.size} values, expected {self.dim}",
                    )
                out[position[eid]] = vector
        return out

    def vectors(self, ids: Sequence[int]) -> np.ndarray:
        """The stored (unit) vectors of ``ids``."""
        return self._vectors_of(ids)

    def family_keys(self, env_family: str | None, include_general: bool = True) -> list[str]:
        """Index keys a query restricted to ``env_family`` searches (None = every index)."""
        if env_family is None:
            return [k for k, index in self._indexes.items() if len(index)]
        keys = [env_family] if env_family in self._indexes else []
        if include_general and "" in self._indexes and env_family != "":
            keys.append("")
        return [k for k in keys if len(self._indexes[k])]

    def search(
        self, vectors: np.ndarray, count: int, family_keys: Sequence[str]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Approximate nearest neighbours of each row of ``vectors`` among ``family_keys`` indexes.

        Returns ``(ids, similarities)``, both ``(n, count)``, sorted by similarity, ``-1`` ids
        (similarity ``-inf``) where fewer than ``count`` exist.
        """
        vectors = normalize_rows(vectors)
        n = vectors.shape[0]
        all_ids = [np.full((n, 0), -1, np.int64)]
        all_sims = [np.full((n, 0), -np.inf, np.float32)]
        for key in family_keys:
            index = self._indexes.get(key)
            if index is None or not len(index):
                continue
            matches = index.search(
                vectors, min(count, len(index)), threads=self.config.search_threads
            )
            keys = np.asarray(matches.keys, dtype=np.int64).reshape(n, -1)
            sims = (1.0 - np.asarray(matches.distances, dtype=np.float32)).reshape(n, -1)
            counts = np.asarray(getattr(matches, "counts", keys.shape[1])).reshape(-1)
            counts = np.broadcast_to(counts, (n,))
            width = keys.shape[1]
            invalid = np.arange(width)[None, :] >= counts[:, None]
            keys[invalid] = -1
            sims[invalid] = -np.inf
            all_ids.append(keys)
            all_sims.append(sims)
        ids = np.concatenate(all_ids, axis=1)
        sims = np.concatenate(all_sims, axis=1)
        order = np.argsort(-sims, axis=1, kind="stable")[:, :count]
        ids = np.take_along_axis(ids, order, axis=1)
        sims = np.take_along_axis(sims, order, axis=1)
        if ids.shape[1] < count:
            pad = count - ids.shape[1]
            ids = np.pad(ids, ((0, 0), (0, pad)), constant_values=-1)
            sims = np.pad(sims, ((0, 0), (0, pad)), constant_values=-np.inf)
        return ids, sims

    def exact_search(
        self, vectors: np.ndarray, count: int, family_keys: Sequence[str]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Brute-force cosine search over the stored vectors (ground truth for recall checks)."""
        ids = [i for key in family_keys for i in self.active_ids(key)]
        if not ids:
            n = len(vectors)
            return np.full((n, count), -1, np.int64), np.full((n, count), -np.inf, np.float32)
        matrix = self._vectors_of(ids)
        sims = normalize_rows(vectors) @ matrix.T
        top = np.argsort(-sims, axis=1)[:, :count]
        id_array = np.asarray(ids, dtype=np.int64)
        return id_array[top], np.take_along_axis(sims, top, axis=1)

    # ------------------------------------------------------------------ stats
    def flush_usage(self, deltas: dict[int, tuple[int, float]]) -> None:
        """Add buffered retrieval counts (``id -> (count, last_time)``) in one transaction."""
        if not deltas:
            return
        with self.transaction() as cursor:
            cursor.executemany(
                "UPDATE experiences SET retrieval_count = retrieval_count + ?, "
                "last_retrieved_at = max(last_retrieved_at, ?) WHERE id = ?",
                [(count, last, eid) for eid, (count, last) in deltas.items()],
            )

    # ------------------------------------------------------------------ persistence
    def save_indexes(self) -> None:
        """Write every index atomically (new generation file, checksum, then the state file)."""
        self._check_open()
        state = self._read_index_state()
        generation = int(state.get("generation", 0)) + 1
        files: dict[str, Any] = {}
        for key, index in self._indexes.items():
            file = self.path / f"{_index_file_stem(key)}.g{generation}.usearch"
            tmp = file.with_name(file.name + ".tmp")
            index.save(str(tmp))
            with open(tmp, "rb+") as handle:
                os.fsync(handle.fileno())
            os.replace(tmp, file)
            files[key] = {
                "file": file.name,
                "size": file.stat().st_size,
                "crc32": _crc32_file(file),
                "count": len(index),
            }
        atomic_write_json(
            self.path / INDEX_STATE, {"generation": generation, "dim": self.dim, "files": files}
        )
        keep = {entry["file"] for entry in files.values()}
        for old in self.path.glob("index-*.usearch"):
            if old.name not in keep:
                old.unlink(missing_ok=True)
        self._index_changes = 0

    def save(self) -> None:
        """Save the indexes and fold the WAL into the database file."""
        self.save_indexes()
        self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def rebuild_index(self) -> None:
        """Drop the in-memory indexes and rebuild them from the vectors in SQLite."""
        self._indexes = {}
        keys = {
            r[0] or ""
            for r in self._db.execute(
                "SELECT DISTINCT env_family FROM experiences WHERE status='active'"
            )
        }
        for key in sorted(keys):
            self._indexes[key] = self._new_index()
            self._reconcile(key)
        self.save_indexes()

    def check_consistency(self) -> dict[str, Any]:
        """Compare every index with the active rows of SQLite; ``ok`` is True when they agree."""
        report: dict[str, Any] = {"ok": True, "families": {}}
        keys = {
            r[0] or ""
            for r in self._reader().execute(
                "SELECT DISTINCT env_family FROM experiences WHERE status='active'"
            )
        }
        for key in sorted(keys | set(self._indexes)):
            db_ids = set(self.active_ids(key))
            index = self._indexes.get(key)
            index_ids = (
                {int(k) for k in np.asarray(index.keys)}
                if index is not None and len(index)
                else set()
            )
            missing, extra = db_ids - index_ids, index_ids - db_ids
            report["families"][key] = {
                "db": len(db_ids),
                "index": len(index_ids),
                "missing": len(missing),
                "extra": len(extra),
            }
            if missing or extra:
                report["ok"] = False
        return report

    def memory_bytes(self) -> int:
        return int(sum(index.memory_usage for index in self._indexes.values()))

    def close(self) -> None:
        if self._closed:
            return
        try:
            self.save()
        finally:
            self._closed = True
            with self._readers_lock:
                for conn in self._readers:
                    with contextlib.suppress(Exception):
                        conn.close()
                self._readers.clear()
            self._db.close()

    def __enter__(self) -> ExperienceStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ portable banks
    def export(self, folder: str | os.PathLike[str], include_inactive: bool = True) -> Path:
        """Write a portable bank: ``experiences.jsonl``, ``vectors.npy``, ``index.usearch`` and
        ``manifest.json`` (embedding model, dimension, checksums; written last)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "manifest.json").unlink(missing_ok=True)
        experiences = list(self.iter_experiences(include_inactive=include_inactive))
        lines = "".join(e.to_json() + "\n" for e in experiences)
        atomic_write_bytes(folder / "experiences.jsonl", lines.encode("utf-8"))
        vectors = self._vectors_of([e.id for e in experiences])
        import io

        buffer = io.BytesIO()
        np.save(buffer, vectors)
        atomic_write_bytes(folder / "vectors.npy", buffer.getvalue())
        index = self._new_index()
        active = [i for i, e in enumerate(experiences) if e.active]
        if active:
            index.add(
                np.array([experiences[i].id for i in active], dtype=np.uint64), vectors[active]
            )
        tmp = folder / "index.usearch.tmp"
        index.save(str(tmp))
        os.replace(tmp, folder / "index.usearch")
        manifest = {
            "format": BANK_FORMAT,
            "version": SCHEMA_VERSION,
            "embedding_model": self.embedder.name,
            "embedding_dim": self.dim,
            "metric": "cos",
            "count": len(experiences),
            "active": len(active),
            "created_at": time.time(),
            "files": {
                name: _sha256_file(folder / name)
                for name in ("experiences.jsonl", "vectors.npy", "index.usearch")
            },
        }
        atomic_write_json(folder / "manifest.json", manifest)
        logger.info("exported %d experiences to %s", len(experiences), folder)
        return folder

    def import_bank(self, folder: str | os.PathLike[str], reembed: bool = False) -> dict[int, int]:
        """Add a bank written by :meth:`export`; returns ``old id -> new id``.

        Vectors are reused when the bank was embedded with this store's model; otherwise the
        import is refused unless ``reembed=True``, which embeds the texts again.
        """
        folder = Path(folder)
        manifest_path = folder / "manifest.json"
        try:
            manifest = json.loads(manifest_path.read_text())
        except (OSError, ValueError) as exc:
            raise DataError(
                manifest_path,
                f"missing or unreadable bank manifest ({exc})",
                "a bank is complete only once export() wrote its manifest",
            ) from exc
        if manifest.get("format") != BANK_FORMAT:
            raise DataError(
                manifest_path, f"not an experience bank (format {manifest.get('format')!r})"
            )
        for name, digest in manifest.get("files", {}).items():
            file = folder / name
            if not file.exists() or _sha256_file(file) != digest:
                raise DataError(
                    file,
                    "missing or its checksum differs from the bank manifest",
                    "re-export the bank",
                )
        same_model = (
            manifest.get("embedding_model") == self.embedder.name
            and int(manifest.get("embedding_dim", -1)) == self.dim
        )
        if not same_model and not reembed:
            raise ConfigurationError(
                f"the bank {folder} was embedded with {manifest.get('embedding_model')!r} "
                f"(dim {manifest.get('embedding_dim')}); this store uses {self.embedder.name!r} "
                f"(dim {self.dim}). Pass reembed=True to embed its texts with this store's model."
            )
        experiences = []
        jsonl = folder / "experiences.jsonl"
        with open(jsonl, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    experiences.append(Experience.from_dict(json.loads(line)))
                except (ValueError, TypeError) as exc:
                    raise DataError(
                        jsonl, f"line {number} is not a valid experience ({exc})"
                    ) from exc
        if same_model:
            vectors = np.load(folder / "vectors.npy")
            if vectors.shape != (len(experiences), self.dim):
                raise DataError(
                    folder / "vectors.npy",
                    f"shape {vectors.shape} does not match {len(experiences)} experiences of dim {self.dim}",
                )
        else:
            texts = [ExperienceText(e.title, e.description, e.content) for e in experiences]
            vectors = self.embed_texts(texts)
        mapping: dict[int, int] = {}
        with self.transaction() as cursor:
            for exp, vector in zip(experiences, vectors):
                prov = Provenance(
                    tuple(exp.source_task_ids),
                    tuple(exp.source_trajectory_ids),
                    exp.created_step,
                    exp.policy_version,
                    exp.env_family,
                )
                [new_id] = self.insert(
                    cursor,
                    [ExperienceText(exp.title, exp.description, exp.content)],
                    vector[None, :],
                    prov,
                    exp.env_family,
                )
                mapping[exp.id] = new_id
            for exp in experiences:
                cursor.execute(
                    "UPDATE experiences SET status=?, merged_from=?, replaced_by=?, retrieval_count=?, "
                    "last_retrieved_at=?, training_count=?, last_trained_step=?, wins=?, uses=?, upvotes=?, "
                    "downvotes=?, created_at=? WHERE id=?",
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
                        mapping[exp.id],
                    ),
                )
            inactive = [mapping[e.id] for e in experiences if not e.active]
            by_family: dict[str, list[int]] = {}
            for e in experiences:
                if not e.active:
                    by_family.setdefault(_family_key(e.env_family), []).append(mapping[e.id])
            # inactive rows were indexed by insert(); take them out again after commit
            for key, ids in by_family.items():
                assert self._txn_index_ops is not None
                self._txn_index_ops.append(("remove", key, np.array(ids, dtype=np.int64), None))
        logger.info(
            "imported %d experiences (%d inactive) from %s", len(mapping), len(inactive), folder
        )
        return mapping


__all__ = ["ExperienceStore", "SentenceTransformerEmbedder", "BANK_FORMAT"]
