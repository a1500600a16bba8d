"""Durable experience storage: the facade over the database, the vector index and banks.

* :mod:`~comprl_gym.experience.database`: SQLite (WAL), the source of truth; every SQL
  statement. An acknowledged write is a committed transaction, and every experience row holds
  its own vector.
* :mod:`~comprl_gym.experience.vector_index`: one usearch HNSW index per env family (cosine), a
  cache saved atomically under a generation number with a checksum, reconciled with the
  database on open (a process killed between a commit and an index save loses nothing) and
  rebuilt from SQLite on request.
* :mod:`~comprl_gym.experience.bank`: portable export and import.

A corrupt index file or database raises :class:`~comprl_gym.core.DataError` naming the file;
``repair=True`` rebuilds the index or salvages the readable rows of a damaged database (the
damaged file is kept aside). :meth:`ExperienceStore.transaction` ties the two together: SQLite
commits first, then the in-memory indexes follow.

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
import logging
import os
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from comprl_gym.core import ConfigurationError
from comprl_gym.experience import bank
from comprl_gym.experience.bank import BANK_FORMAT
from comprl_gym.experience.config import ExperienceConfig
from comprl_gym.experience.database import (
    DB_NAME,
    SCHEMA_VERSION,
    ExperienceDatabase,
    family_key,
)
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
from comprl_gym.experience.records import NO_PROVENANCE, Experience, Provenance
from comprl_gym.experience.vector_index import FamilyIndexes, IndexOp, import_usearch

logger = logging.getLogger(__name__)

#: The meta key counting the lessons evicted over the store's life (cap or cleanup).
EVICTED_META = "evicted_total"


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
        self._pending_index_ops: list[IndexOp] | None = None
        self._inserted = False  # the open transaction inserted rows: the cap is checked
        # Lessons the open transaction evicted from a store that had never evicted: the
        # warning waits for the commit (a rolled-back eviction did not happen).
        self._first_evictions = 0
        self.database = ExperienceDatabase(
            self.db_path,
            synchronous=self.config.sqlite_synchronous,
            quick_check=self.config.check_database_on_open,
            repair=repair,
        )
        self.embedder, self.dim = self._bind_embedder(embedder)
        self.database.dim = self.dim
        self.index = FamilyIndexes(self.path, self.dim, self.config)
        self.index.load(
            self.database.active_family_keys(self.database.writer),
            lambda key: self.database.active_ids(key, self.database.writer),
            lambda ids: self.database.vectors(ids, self.database.writer),
            repair,
        )

    @property
    def _db(self) -> sqlite3.Connection:
        """The writer connection (tests simulate a crash by closing it)."""
        return self.database.writer

    @property
    def _indexes(self) -> dict[str, Any]:
        return self.index.indexes

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

    # ------------------------------------------------------------------ transactions
    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Cursor]:
        """One atomic write: SQLite commits first, then the in-memory indexes follow."""
        self._check_open()
        if self._pending_index_ops is not None:
            raise RuntimeError("nested experience-store transactions are not supported")
        cursor = self.database.begin()
        self._pending_index_ops = []
        self._inserted = False
        try:
            yield cursor
            if self._inserted:
                self._evict_over_cap(cursor)
            self.database.trim_revisions(cursor, self.config.revision_log_max_rows)
            self.database.commit(cursor)
        except BaseException:
            self.database.rollback(cursor)
            self._pending_index_ops = None
            self._first_evictions = 0
            raise
        ops, self._pending_index_ops = self._pending_index_ops, None
        self.index.apply(ops)
        first, self._first_evictions = self._first_evictions, 0
        if first:
            self._warn_first_eviction(first)

    def _warn_first_eviction(self, count: int) -> None:
        # Eviction drops acknowledged lessons; a default cap must not do it silently. Once per
        # store: the counter is persisted, so a reopened store that evicted before stays quiet.
        cfg = self.config
        logger.warning(
            "experience store %s is full: evicted %d lesson(s), the first it ever evicted "
            "(max_entries=%d active lessons, eviction_policy=%r). Evicted lessons are gone "
            "from retrieval; set max_entries higher, or 0 for an unbounded store, to keep "
            "them. The count so far is manager.stats()['evicted'].",
            self.path,
            count,
            cfg.max_entries,
            cfg.eviction_policy,
        )

    def evicted_count(self) -> int:
        """Lessons evicted over the store's life (by the cap or a cleanup), as committed (and
        inside an open transaction, as it stands). A store older than the counter starts
        from the ``evict`` revisions its log still keeps."""
        value = self.get_meta(EVICTED_META)
        if value is not None:
            return int(value)
        return self.database.count_revisions("evict")

    def after_commit(self, op: IndexOp) -> None:
        """Queue an index change for when the open transaction commits."""
        if self._pending_index_ops is None:
            raise RuntimeError("index changes must be queued inside transaction()")
        self._pending_index_ops.append(op)

    def _evict_over_cap(self, cursor: sqlite3.Cursor) -> None:
        """Evict, inside the open transaction, the active lessons beyond ``max_entries`` that
        ``eviction_policy`` ranks first."""
        ids = self._over_cap(cursor)
        if ids:
            self.remove(cursor, ids, "evict", {"policy": self.config.eviction_policy})

    def _over_cap(
        self, conn: sqlite3.Connection | sqlite3.Cursor, hidden: Sequence[int] = ()
    ) -> list[int]:
        """The active lessons, other than ``hidden`` (about to leave the index), that
        ``eviction_policy`` evicts to bring the rest within ``max_entries``, in that order."""
        cfg = self.config
        if not cfg.max_entries:
            return []
        over = self.database.count_active(conn) - len(hidden) - cfg.max_entries
        if over <= 0:
            return []
        skip = set(hidden)
        ranked = self.database.eviction_candidates(
            conn, over + len(skip), cfg.eviction_policy, cfg.usefulness_prior
        )
        return [i for i in ranked if i not in skip][:over]

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"the experience store at {self.path} is closed")

    # ------------------------------------------------------------------ meta
    def get_meta(self, key: str) -> str | None:
        return self.database.get_meta(key)

    def set_meta(self, values: dict[str, str], cursor: sqlite3.Cursor | None = None) -> None:
        self.database.set_meta(values, cursor)

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
        kind: str = "add",
    ) -> list[int]:
        """Insert rows inside an open :meth:`transaction` (each a ``kind`` revision: ``add``,
        ``update``, ``merge`` or ``import``); returns their new ids. When the transaction
        commits, lessons beyond ``max_entries`` are evicted in it."""
        vectors = normalize_rows(vectors)
        if vectors.shape != (len(texts), self.dim):
            raise ConfigurationError(
                f"expected vectors of shape {(len(texts), self.dim)}, got {vectors.shape}"
            )
        if not np.isfinite(vectors).all():
            raise ConfigurationError("experience vectors contain NaN or infinity")
        family = env_family if env_family is not None else provenance.env_family
        ids = self.database.insert_rows(
            cursor, texts, vectors, provenance, family, merged_from, kind
        )
        self._inserted = True
        self.after_commit(("add", family_key(family), np.array(ids, dtype=np.int64), vectors))
        return ids

    def retire(
        self,
        cursor: sqlite3.Cursor,
        ids: Sequence[int],
        status: str,
        replaced_by: int | None = None,
        kind: str = "retire",
    ) -> list[int]:
        """Tombstone active ids (``merged``/``dropped``/``expired``) inside a transaction, each
        a ``kind`` revision; returns those changed."""
        changed = self.database.retire_rows(cursor, ids, status, replaced_by, kind)
        return self._unindex(changed)

    def _unindex(self, changed: dict[str, list[int]]) -> list[int]:
        """Queue the removal of ``family key -> ids`` from the index; returns the ids."""
        for key, family_ids in changed.items():
            self.after_commit(("remove", key, np.array(family_ids, dtype=np.int64), None))
        return [i for group in changed.values() for i in group]

    def remove(
        self,
        cursor: sqlite3.Cursor,
        ids: Sequence[int],
        kind: str = "delete",
        detail: dict[str, Any] | None = None,
    ) -> list[int]:
        """Remove the rows of ``ids`` (any status) inside a transaction, each an ``evict``,
        ``delete`` or ``purge`` revision keeping a snapshot of it (evictions are counted, see
        :meth:`evicted_count`); returns the ids removed."""
        # Read before the rows go: an old store's count comes from its evict revisions.
        before = self.evicted_count() if kind == "evict" and ids else 0
        removed, was_active = self.database.delete_rows(cursor, ids, kind, detail or {})
        self._unindex(was_active)
        if kind == "evict" and removed:
            self.set_meta({EVICTED_META: str(before + len(removed))}, cursor)
            if before == 0:
                self._first_evictions += len(removed)
        return removed

    def restore(self, cursor: sqlite3.Cursor, ids: Sequence[int]) -> list[int]:
        """Bring expired ``ids`` back into the store and the index; returns those restored."""
        changed = self.database.restore_rows(cursor, ids)
        for key, family_ids in changed.items():
            array = np.array(family_ids, dtype=np.int64)
            vectors = self.database.vectors(family_ids, self.database.writer)
            self.after_commit(("add", key, array, vectors))
        self._inserted = self._inserted or bool(changed)
        return [i for group in changed.values() for i in group]

    def plan_cleanup(
        self, conn: sqlite3.Connection | sqlite3.Cursor, now: float
    ) -> tuple[list[int], list[int]]:
        """``(expire, evict)``: the active lessons idle past ``expire_after_s`` at time ``now``,
        then those that ``eviction_policy`` evicts to bring the rest within ``max_entries``."""
        after = self.config.expire_after_s
        expire = self.database.idle_since(conn, now - after) if after else []
        return expire, self._over_cap(conn, expire)

    def plan_purge(self, conn: sqlite3.Connection | sqlite3.Cursor, now: float) -> list[int]:
        """The merged tombstones retired ``tombstone_retention_s`` or more before ``now``."""
        keep = self.config.tombstone_retention_s
        return self.database.merged_before(conn, now - keep) if keep else []

    def fold_into(self, cursor: sqlite3.Cursor, loser: int, keeper: int, status: str) -> bool:
        """Retire ``loser`` in favour of ``keeper`` (both must be active), which inherits its
        tallies and lists it in ``merged_from``. Returns whether it happened."""
        if self.database.active_among(cursor, [loser, keeper]) != {int(loser), int(keeper)}:
            return False
        self.retire(cursor, [loser], status, replaced_by=keeper, kind="absorbed")
        self.database.inherit(cursor, keeper, [loser], record_sources=True)
        return True

    def inherit(self, cursor: sqlite3.Cursor, heir: int, sources: Sequence[int]) -> None:
        """``heir`` takes over the uses, wins and retrievals of ``sources`` (a merge)."""
        self.database.inherit(cursor, heir, sources)

    def active_among(self, cursor: sqlite3.Cursor, ids: Sequence[int]) -> set[int]:
        return self.database.active_among(cursor, ids)

    def family_of(self, cursor: sqlite3.Cursor, experience_id: int) -> str | None:
        return self.database.family_of(cursor, experience_id)

    def add_votes(self, cursor: sqlite3.Cursor, ids: Sequence[int], up: bool) -> None:
        self.database.add_votes(cursor, ids, up)

    def request_result(self, cursor: sqlite3.Cursor, request_id: str) -> tuple[bool, Any]:
        """``(True, result)`` when a write with ``request_id`` already committed."""
        return self.database.request_result(cursor, request_id)

    def record_request(self, cursor: sqlite3.Cursor, request_id: str, result: Any) -> None:
        """Remember ``request_id`` (and the JSON-able result) in the open transaction."""
        self.database.record_request(cursor, request_id, result)

    def add_outcomes(self, cursor: sqlite3.Cursor, ids: Sequence[int], won: bool) -> None:
        self.database.add_outcomes(cursor, ids, won)

    def add_training_marks(self, cursor: sqlite3.Cursor, ids: Sequence[int], step: int) -> None:
        self.database.mark_trained(cursor, ids, step)

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

    # ------------------------------------------------------------------ tallies
    def report_outcome(self, ids: Sequence[int], won: bool) -> None:
        """One episode used ``ids``: ``uses += 1``, ``wins += won`` (each id once)."""
        if not ids:
            return
        with self.transaction() as cursor:
            self.database.add_outcomes(cursor, ids, won)

    def mark_trained(self, ids: Sequence[int], actor_step: int) -> None:
        """``training_count += 1`` and ``last_trained_step`` for each id (once)."""
        if not ids:
            return
        with self.transaction() as cursor:
            self.database.mark_trained(cursor, ids, actor_step)

    def flush_usage(self, deltas: dict[int, tuple[int, float]]) -> None:
        """Add buffered retrieval counts (``id -> (count, last_time)``) in one transaction."""
        if not deltas:
            return
        with self.transaction() as cursor:
            self.database.add_retrievals(cursor, deltas)

    # ------------------------------------------------------------------ reads
    def get(self, ids: Sequence[int]) -> list[Experience]:
        """Experiences by id, in the order asked (unknown ids are skipped)."""
        return self.database.get(ids)

    def usage(self, ids: Sequence[int]) -> dict[int, tuple[int, float, int, int]]:
        """``id -> (retrieval_count, last_retrieved_at, uses, wins)`` as stored."""
        return self.database.usage(ids)

    def iter_experiences(
        self, env_family: str | None = None, include_inactive: bool = False
    ) -> Iterator[Experience]:
        return self.database.iter_experiences(env_family, include_inactive)

    def active_ids(self, family_key: str | None = None) -> list[int]:
        return self.database.active_ids(family_key)

    def active_families(self) -> dict[int, str]:
        """``id -> family key`` of every active experience, in id order."""
        return self.database.active_families()

    def count(self, include_inactive: bool = False) -> int:
        return self.database.count(include_inactive)

    def vectors(self, ids: Sequence[int]) -> np.ndarray:
        """The stored (unit) vectors of ``ids``."""
        return self.database.vectors(ids)

    # ------------------------------------------------------------------ search
    def family_keys(self, env_family: str | None, include_general: bool = True) -> list[str]:
        """Index keys a query restricted to ``env_family`` searches (None = every index)."""
        return self.index.family_keys(env_family, include_general)

    def search(
        self, vectors: np.ndarray, count: int, family_keys: Sequence[str]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Approximate nearest neighbours; see :meth:`FamilyIndexes.search`."""
        return self.index.search(vectors, count, family_keys)

    def exact_search(
        self, vectors: np.ndarray, count: int, family_keys: Sequence[str]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Brute-force cosine search over the stored vectors (ground truth for recall checks)."""
        ids = [i for key in family_keys for i in self.active_ids(key)]
        if not ids:
            n = len(vectors)
            return np.full((n, count), -1, np.int64), np.full((n, count), -np.inf, np.float32)
        matrix = self.vectors(ids)
        sims = normalize_rows(vectors) @ matrix.T
        top = np.argsort(-sims, axis=1)[:, :count]
        id_array = np.asarray(ids, dtype=np.int64)
        return id_array[top], np.take_along_axis(sims, top, axis=1)

    # ------------------------------------------------------------------ persistence
    def save_indexes(self) -> None:
        """Write every index atomically (new generation file, checksum, then the state file)."""
        self._check_open()
        self.index.save()

    def save(self) -> None:
        """Save the indexes and fold the WAL into the database file."""
        self.save_indexes()
        self.database.checkpoint()

    def rebuild_index(self) -> None:
        """Drop the in-memory indexes and rebuild them from the vectors in SQLite."""
        self.index.rebuild(
            self.database.active_family_keys(), self.database.active_ids, self.database.vectors
        )

    # ------------------------------------------------------------------ revisions
    @property
    def revision(self) -> int:
        """The latest committed revision: every change (add, update, merge, evict, expire,
        restore, delete, outcome, vote) is one numbered row of the append-only revision log,
        written in the change's own transaction. Retrieval counters are not revisions."""
        return self.database.revision()

    def revisions(self, experience_id: int | None = None, since: int = 0) -> list[dict[str, Any]]:
        """The kept revisions after ``since`` (one lesson's when ``experience_id`` is given)."""
        return self.database.revisions(experience_id, since)

    def check_revisions(self) -> dict[str, Any]:
        """Whether the revision log agrees with the rows (see
        :meth:`ExperienceDatabase.check_revisions`)."""
        return self.database.check_revisions()

    def check_consistency(self) -> dict[str, Any]:
        """Compare every index with the active rows of SQLite; ``ok`` is True when they agree."""
        report: dict[str, Any] = {"ok": True, "families": {}}
        for key in sorted(self.database.active_family_keys() | set(self._indexes)):
            db_ids = set(self.active_ids(key))
            index_ids = self.index.ids(key)
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
        return self.index.memory_bytes()

    def close(self) -> None:
        if self._closed:
            return
        try:
            self.save()
        finally:
            self._closed = True
            self.database.close()

    def __enter__(self) -> ExperienceStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ portable banks
    def export(self, folder: str | os.PathLike[str], include_inactive: bool = True) -> Path:
        """Write a portable bank (see :func:`comprl_gym.experience.bank.export_bank`)."""
        return bank.export_bank(self, folder, include_inactive)

    def import_bank(self, folder: str | os.PathLike[str], reembed: bool = False) -> dict[int, int]:
        """Add a bank written by :meth:`export`; returns ``old id -> new id``."""
        return bank.import_bank(self, folder, reembed)


__all__ = ["BANK_FORMAT", "ExperienceStore", "SentenceTransformerEmbedder", "import_usearch"]
