"""The vector index: one usearch HNSW index (cosine) per env family, a cache of the database.

The graph may hold quantised vectors (``ExperienceConfig.hnsw_dtype`` ``"i8"`` or ``"f16"``;
i8 codes are made here, over the range ``hnsw_i8_range`` sets, not by usearch's cast):
a search then fetches ``rerank_oversample`` times the asked count from the graph and re-ranks
those candidates exactly with the float32 vectors kept in memory (:class:`ExactVectors`,
loaded from the database, which stores every vector), so the order and similarities returned
are those of float32 cosine among the candidates.

Saved atomically under a generation number with a size and CRC-32 per file
(``index-state.json`` written last), reconciled with the database's active rows on open (a
process killed between a commit and a save loses nothing) and rebuilt from the database on
request. A corrupt file raises :class:`~comprl_gym.core.DataError` naming it, unless
``repair=True`` rebuilds it.

Example:
    >>> import tempfile, numpy as np
    >>> from pathlib import Path
    >>> indexes = FamilyIndexes(Path(tempfile.mkdtemp()), dim=2)
    >>> indexes.apply([("add", "minihack", np.array([7]), np.array([[1.0, 0.0]], np.float32))])
    >>> ids, sims = indexes.search(np.array([[1.0, 0.1]], np.float32), 1, ["minihack"])
    >>> int(ids[0, 0])
    7
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import os
import re
import sys
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from comprl_gym.core import DataError, require
from comprl_gym.experience.config import ExperienceConfig
from comprl_gym.experience.embedding import normalize_rows
from comprl_gym.utils import atomic_write_json

logger = logging.getLogger(__name__)

INDEX_STATE = "index-state.json"

#: ``(op, family key, ids, vectors)`` with op ``"add"`` or ``"remove"``: the index changes one
#: committed transaction implies, applied after its commit.
IndexOp = tuple[str, str, np.ndarray, "np.ndarray | None"]


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


def _index_file_stem(family_key: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", family_key) or "_any"
    return f"index-{safe}"


def _grown(array: np.ndarray, length: int, fill: float) -> np.ndarray:
    """``array`` extended along its first axis to at least ``length`` rows (doubling)."""
    out = np.full((max(length, 2 * len(array)), *array.shape[1:]), fill, array.dtype)
    out[: len(array)] = array
    return out


class ExactVectors:
    """The float32 unit vectors of one index (given normalised, as the store writes them),
    keyed by id, for the exact re-rank.

    Rows are packed; a removed row is filled with the last one, and ids map to rows through a
    sorted array of the live ids (binary search), so memory is one row per live id however
    many ids a long run has written and evicted.

    Example:
        >>> rows = ExactVectors(dim=2)
        >>> rows.add(np.array([5, 9]), np.array([[1.0, 0.0], [0.0, 1.0]], np.float32))
        >>> rows.remove(np.array([5]))
        >>> rows.similarities(np.array([[9, -1]]), np.array([[0.6, 0.8]], np.float32)).tolist()
        [[0.800000011920929, -inf]]
    """

    def __init__(self, dim: int):
        self.matrix = np.zeros((0, dim), np.float32)
        self.id_of = np.zeros(0, np.int64)  # row -> id
        self.sorted_ids = np.zeros(0, np.int64)  # the live ids, ascending
        self.sorted_rows = np.zeros(0, np.int64)  # the row of each of them
        self.size = 0

    def rows(self, ids: np.ndarray) -> np.ndarray:
        """The row of each of ``ids`` (any shape), -1 where absent."""
        ids = np.asarray(ids, dtype=np.int64)
        if not self.sorted_ids.size:
            return np.full(ids.shape, -1, np.int64)
        position = np.minimum(np.searchsorted(self.sorted_ids, ids), self.sorted_ids.size - 1)
        return np.where(self.sorted_ids[position] == ids, self.sorted_rows[position], -1)

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if not ids.size:
            return
        new = np.unique(ids[self.rows(ids) < 0])
        needed = self.size + new.size
        if needed > self.matrix.shape[0]:
            self.matrix = _grown(self.matrix, needed, fill=0)
            self.id_of = _grown(self.id_of, needed, fill=-1)
        self.id_of[self.size : needed] = new
        all_ids = np.concatenate([self.sorted_ids, new])
        all_rows = np.concatenate([self.sorted_rows, np.arange(self.size, needed)])
        order = np.argsort(all_ids, kind="stable")
        self.sorted_ids, self.sorted_rows = all_ids[order], all_rows[order]
        self.size = needed
        self.matrix[self.rows(ids)] = np.asarray(vectors, dtype=np.float32)

    def remove(self, ids: np.ndarray) -> None:
        ids = np.unique(np.asarray(ids, dtype=np.int64).reshape(-1))
        ids = ids[self.rows(ids) >= 0]
        for eid in ids:
            row, last = int(self.rows(eid)), self.size - 1  # rows move as holes are filled
            moved = int(self.id_of[last])  # the last row fills the hole
            self.matrix[row] = self.matrix[last]
            self.id_of[row] = moved
            self.sorted_rows[np.searchsorted(self.sorted_ids, moved)] = row
            self.size = last
        keep = ~np.isin(self.sorted_ids, ids)
        self.sorted_ids, self.sorted_rows = self.sorted_ids[keep], self.sorted_rows[keep]

    def vectors(self, ids: np.ndarray) -> np.ndarray:
        """The rows of ``ids`` (all present)."""
        return self.matrix[self.rows(ids)]

    def similarities(self, ids: np.ndarray, queries: np.ndarray) -> np.ndarray:
        """Cosine of each query row with its candidate ``ids`` (``(n, c)``; -1 gives -inf)."""
        rows = self.rows(ids)
        candidates = self.matrix[np.maximum(rows, 0)]  # (n, c, dim)
        sims = np.einsum("ncd,nd->nc", candidates, queries)
        sims[rows < 0] = -np.inf
        return sims


def built_with(index: Any) -> dict[str, Any]:
    """The build-time settings of a usearch ``index``, keyed as
    :attr:`FamilyIndexes.graph_settings`."""
    return {
        "dtype": str(index.dtype).rsplit(".", 1)[-1].lower(),
        "metric": str(index.metric_kind).rsplit(".", 1)[-1].lower(),
        "connectivity": int(index.connectivity),
    }


def _crc32_file(path: Path) -> int:
    crc = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 22):
            crc = zlib.crc32(chunk, crc)
    return crc


class FamilyIndexes:
    """The usearch indexes of one store folder, keyed by family (``""``: family-less).

    Args:
        folder: the store folder the index files live in.
        dim: vector dimension.
        config: HNSW and autosave settings.
    """

    def __init__(self, folder: Path, dim: int, config: ExperienceConfig | None = None):
        self.folder = Path(folder)
        self.dim = dim
        self.config = config or ExperienceConfig()
        self.indexes: dict[str, Any] = {}
        #: float32 rows per index key when the graph is quantised (empty for ``"f32"``).
        self.exact: dict[str, ExactVectors] = {}
        self.changes = 0
        #: i8 code per unit of a coordinate (see :meth:`graph_vectors`).
        self.i8_scale = 127.0 / min(1.0, self.config.hnsw_i8_range / math.sqrt(dim))

    @property
    def reranks(self) -> bool:
        """True when the graph holds quantised vectors and results are re-ranked in float32."""
        return self.config.hnsw_dtype != "f32"

    def new_index(self) -> Any:
        usearch = import_usearch()
        cfg = self.config
        return usearch.Index(
            ndim=self.dim,
            metric=cfg.hnsw_metric,
            dtype=cfg.hnsw_dtype,
            connectivity=cfg.hnsw_connectivity,
            expansion_add=cfg.hnsw_expansion_add,
            expansion_search=cfg.hnsw_expansion_search,
        )

    @property
    def graph_settings(self) -> dict[str, Any]:
        """The config's settings that are fixed when a graph is built (see :func:`built_with`;
        ``i8_range`` is recorded in the state file): a saved graph built otherwise is rebuilt on
        open."""
        cfg = self.config
        return {
            "dtype": cfg.hnsw_dtype,
            "metric": cfg.hnsw_metric,
            "connectivity": cfg.hnsw_connectivity,
            "i8_range": cfg.hnsw_i8_range if cfg.hnsw_dtype == "i8" else None,
        }

    def graph_vectors(self, vectors: np.ndarray) -> np.ndarray:
        """What the graph is given for float32 unit ``vectors``: themselves, or for an i8 graph
        their int8 codes ``round(x * i8_scale)`` clipped to +-127.

        usearch's own cast rescales each vector to norm 1 before multiplying by 127, so a 384-d
        coordinate (typically ~0.05) got ~6 of the 127 levels; here the levels span
        ``+-hnsw_i8_range / sqrt(dim)`` (4 standard deviations of a unit vector's coordinate by
        default; rarer coordinates are clipped and the float32 re-rank restores the order).

        Example:
            >>> indexes = FamilyIndexes(Path("."), dim=400)  # codes span +-4/20 = +-0.2
            >>> indexes.graph_vectors(np.array([[0.1, -0.02, 0.5]]))
            array([[ 64, -13, 127]], dtype=int8)
        """
        if self.config.hnsw_dtype != "i8":
            return vectors
        return np.clip(np.rint(np.asarray(vectors) * self.i8_scale), -127, 127).astype(np.int8)

    # ------------------------------------------------------------------ load and reconcile
    def load(
        self,
        db_keys: set[str],
        active_ids: Callable[[str], list[int]],
        vectors_of: Callable[[list[int]], np.ndarray],
        repair: bool,
    ) -> None:
        """Restore the saved indexes (checked) and reconcile each with the database."""
        usearch = import_usearch()
        files = self._read_state().get("files", {})
        for key in sorted(db_keys | set(files)):
            entry = files.get(key)
            index = None
            if entry is not None:
                file = self.folder / entry["file"]
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
                    saved = built_with(index) | {"i8_range": entry.get("i8_range")}
                    wanted = self.graph_settings
                    if saved != wanted:
                        logger.info(
                            "index %s was built with %s, the config asks for %s: rebuilding it",
                            file,
                            saved,
                            wanted,
                        )
                        index = None
                    else:
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
            self.indexes[key] = index if index is not None else self.new_index()
            self.reconcile(key, active_ids(key), vectors_of)

    def rebuild(
        self,
        db_keys: set[str],
        active_ids: Callable[[str], list[int]],
        vectors_of: Callable[[list[int]], np.ndarray],
    ) -> None:
        """Drop the in-memory indexes and rebuild them from the database, then save."""
        self.indexes = {}
        self.exact = {}
        for key in sorted(db_keys):
            self.indexes[key] = self.new_index()
            self.reconcile(key, active_ids(key), vectors_of)
        self.save()

    def _read_state(self) -> dict[str, Any]:
        file = self.folder / INDEX_STATE
        if not file.exists():
            return {}
        try:
            return json.loads(file.read_text())
        except (OSError, ValueError) as exc:
            logger.warning(
                "ignoring unreadable %s (%s); indexes are rebuilt from the database", file, exc
            )
            return {}

    def reconcile(
        self, key: str, db_ids: Sequence[int], vectors_of: Callable[[list[int]], np.ndarray]
    ) -> None:
        """Make the ``key`` index (and its float32 rows) hold exactly ``db_ids`` (the active ids
        of that family)."""
        index = self.indexes[key]
        wanted = np.asarray(db_ids, dtype=np.int64)
        if self.reranks:
            exact = self.exact[key] = ExactVectors(self.dim)
            for start in range(0, wanted.size, 20000):
                chunk = wanted[start : start + 20000]
                exact.add(chunk, vectors_of(chunk.tolist()))
        present = np.asarray(index.keys, dtype=np.int64) if len(index) else np.zeros(0, np.int64)
        extra = np.setdiff1d(present, wanted, assume_unique=True)
        missing = np.setdiff1d(wanted, present, assume_unique=True)
        if extra.size:
            index.remove(extra.astype(np.uint64))
        if missing.size:
            logger.info(
                "adding %d vectors from the database to index %r", missing.size, key or "_any"
            )
            for start in range(0, missing.size, 20000):
                chunk = missing[start : start + 20000]
                vectors = (
                    self.exact[key].vectors(chunk) if self.reranks else vectors_of(chunk.tolist())
                )
                index.add(chunk.astype(np.uint64), self.graph_vectors(vectors))
        self.changes += int(extra.size + missing.size)

    # ------------------------------------------------------------------ changes
    def apply(self, ops: Sequence[IndexOp]) -> None:
        """Apply the index changes of a committed transaction; autosave when due."""
        for op, key, ids, vectors in ops:
            index = self.indexes.get(key)
            if index is None:
                index = self.indexes[key] = self.new_index()
            exact = self.exact.setdefault(key, ExactVectors(self.dim)) if self.reranks else None
            if op == "add":
                index.add(np.asarray(ids).astype(np.uint64), self.graph_vectors(vectors))
                if exact is not None:
                    exact.add(ids, vectors)
            else:
                present = np.array([i for i in ids if index.contains(int(i))], dtype=np.uint64)
                if present.size:
                    index.remove(present)
                if exact is not None:
                    exact.remove(ids)
            self.changes += len(ids)
        autosave = self.config.index_autosave_changes
        if autosave and self.changes >= autosave:
            self.save()

    # ------------------------------------------------------------------ search
    def family_keys(self, env_family: str | None, include_general: bool = True) -> list[str]:
        """Index keys a query restricted to ``env_family`` searches (None = every index)."""
        if env_family is None:
            return [k for k, index in self.indexes.items() if len(index)]
        keys = [env_family] if env_family in self.indexes else []
        if include_general and "" in self.indexes and env_family != "":
            keys.append("")
        return [k for k in keys if len(self.indexes[k])]

    def search(
        self, vectors: np.ndarray, count: int, family_keys: Sequence[str]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Approximate nearest neighbours of each row of ``vectors`` among ``family_keys`` indexes.

        Returns ``(ids, similarities)``, both ``(n, count)``, sorted by similarity, ``-1`` ids
        (similarity ``-inf``) where fewer than ``count`` exist. With a quantised graph the
        ``rerank_oversample * count`` graph candidates are re-ranked with exact float32 cosine.
        """
        vectors = normalize_rows(vectors)
        n = vectors.shape[0]
        all_ids = [np.full((n, 0), -1, np.int64)]
        all_sims = [np.full((n, 0), -np.inf, np.float32)]
        for key in family_keys:
            index = self.indexes.get(key)
            if index is None or not len(index):
                continue
            wanted = count * self.config.rerank_oversample if self.reranks else count
            matches = index.search(
                self.graph_vectors(vectors),
                min(wanted, len(index)),
                threads=self.config.search_threads,
            )
            keys = np.asarray(matches.keys, dtype=np.int64).reshape(n, -1)
            counts = np.asarray(getattr(matches, "counts", keys.shape[1])).reshape(-1)
            counts = np.broadcast_to(counts, (n,))
            width = keys.shape[1]
            invalid = np.arange(width)[None, :] >= counts[:, None]
            keys[invalid] = -1
            if self.reranks:
                sims = self.exact[key].similarities(keys, vectors)
            else:
                sims = (1.0 - np.asarray(matches.distances, dtype=np.float32)).reshape(n, -1)
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

    def ids(self, key: str) -> set[int]:
        index = self.indexes.get(key)
        return (
            {int(k) for k in np.asarray(index.keys)} if index is not None and len(index) else set()
        )

    # ------------------------------------------------------------------ persistence
    def save(self) -> None:
        """Write every index atomically (new generation file, checksum, then the state file)."""
        generation = int(self._read_state().get("generation", 0)) + 1
        files: dict[str, Any] = {}
        for key, index in self.indexes.items():
            file = self.folder / f"{_index_file_stem(key)}.g{generation}.usearch"
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
                "i8_range": self.graph_settings["i8_range"],
            }
        atomic_write_json(
            self.folder / INDEX_STATE, {"generation": generation, "dim": self.dim, "files": files}
        )
        keep = {entry["file"] for entry in files.values()}
        for old in self.folder.glob("index-*.usearch"):
            if old.name not in keep:
                old.unlink(missing_ok=True)
        self.changes = 0

    def memory_bytes(self) -> int:
        graphs = sum(index.memory_usage for index in self.indexes.values())
        return int(graphs + sum(rows.matrix.nbytes for rows in self.exact.values()))


__all__ = [
    "INDEX_STATE",
    "ExactVectors",
    "FamilyIndexes",
    "IndexOp",
    "built_with",
    "import_usearch",
]
