"""The vector index: one usearch HNSW index (cosine) per env family, a cache of the database.

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
        self.changes = 0

    def new_index(self) -> Any:
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
        """Make the ``key`` index hold exactly ``db_ids`` (the active ids of that family)."""
        index = self.indexes[key]
        wanted = np.asarray(db_ids, dtype=np.int64)
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
                index.add(chunk.astype(np.uint64), vectors_of(chunk.tolist()))
        self.changes += int(extra.size + missing.size)

    # ------------------------------------------------------------------ changes
    def apply(self, ops: Sequence[IndexOp]) -> None:
        """Apply the index changes of a committed transaction; autosave when due."""
        for op, key, ids, vectors in ops:
            index = self.indexes.get(key)
            if index is None:
                index = self.indexes[key] = self.new_index()
            if op == "add":
                index.add(np.asarray(ids).astype(np.uint64), vectors)
            else:
                present = np.array([i for i in ids if index.contains(int(i))], dtype=np.uint64)
                if present.size:
                    index.remove(present)
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
        (similarity ``-inf``) where fewer than ``count`` exist.
        """
        vectors = normalize_rows(vectors)
        n = vectors.shape[0]
        all_ids = [np.full((n, 0), -1, np.int64)]
        all_sims = [np.full((n, 0), -np.inf, np.float32)]
        for key in family_keys:
            index = self.indexes.get(key)
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
        return int(sum(index.memory_usage for index in self.indexes.values()))


__all__ = ["INDEX_STATE", "FamilyIndexes", "IndexOp", "import_usearch"]
