"""Portable experience banks: export a store to a folder, import one into another store.

A bank is ``experiences.jsonl`` (every experience with its provenance and tallies),
``vectors.npy``, ``index.usearch`` (the active ones) and ``manifest.json`` (embedding model,
dimension, SHA-256 of each file), written last: a bank without a manifest is incomplete.
Importing checks the manifest, reuses the vectors when the embedding model matches and
refuses otherwise unless ``reembed=True``.

Example:
    >>> import tempfile
    >>> from comprl_gym.experience import ExperienceStore
    >>> source = ExperienceStore(tempfile.mkdtemp())
    >>> [eid] = source.add_texts(["## Title: Keys\\n## Description: doors\\n## Content: find the key"])
    >>> folder = export_bank(source, tempfile.mkdtemp())
    >>> target = ExperienceStore(tempfile.mkdtemp())
    >>> mapping = import_bank(target, folder)
    >>> target.get([mapping[eid]])[0].title
    'Keys'
    >>> source.close(); target.close()
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from comprl_gym.core import ConfigurationError, DataError
from comprl_gym.experience.database import SCHEMA_VERSION, ExperienceDatabase, family_key
from comprl_gym.experience.embedding import Embedder
from comprl_gym.experience.operations import ExperienceText
from comprl_gym.experience.records import Experience, Provenance
from comprl_gym.experience.vector_index import FamilyIndexes, IndexOp
from comprl_gym.utils import atomic_write_bytes, atomic_write_json


class BankStore(Protocol):
    """What a bank reads and writes of a store: an
    :class:`~comprl_gym.experience.store.ExperienceStore`, named by what it offers because the
    store imports this module (``store.export``, ``store.import_bank``), not the other way."""

    embedder: Embedder
    dim: int
    index: FamilyIndexes
    database: ExperienceDatabase

    def iter_experiences(
        self, env_family: str | None = None, include_inactive: bool = False
    ) -> Iterator[Experience]: ...

    def vectors(self, ids: Sequence[int]) -> np.ndarray: ...

    def embed_texts(self, texts: Sequence[ExperienceText]) -> np.ndarray: ...

    def transaction(self) -> contextlib.AbstractContextManager[sqlite3.Cursor]: ...

    def insert(
        self,
        cursor: sqlite3.Cursor,
        texts: Sequence[ExperienceText],
        vectors: np.ndarray,
        provenance: Provenance = ...,
        env_family: str | None = ...,
        merged_from: Sequence[Sequence[int]] | None = ...,
        kind: str = ...,
    ) -> list[int]: ...

    def after_commit(self, op: IndexOp) -> None: ...


logger = logging.getLogger(__name__)

BANK_FORMAT = "comprl-gym-experience-bank"
_BANK_FILES = ("experiences.jsonl", "vectors.npy", "index.usearch")


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def export_bank(
    store: BankStore, folder: str | os.PathLike[str], include_inactive: bool = True
) -> Path:
    """Write ``store`` as a portable bank in ``folder`` (manifest last)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "manifest.json").unlink(missing_ok=True)
    experiences = list(store.iter_experiences(include_inactive=include_inactive))
    lines = "".join(e.to_json() + "\n" for e in experiences)
    atomic_write_bytes(folder / "experiences.jsonl", lines.encode("utf-8"))
    vectors = store.vectors([e.id for e in experiences])
    buffer = io.BytesIO()
    np.save(buffer, vectors)
    atomic_write_bytes(folder / "vectors.npy", buffer.getvalue())
    index = store.index.new_index()
    active = [i for i, e in enumerate(experiences) if e.active]
    if active:
        index.add(np.array([experiences[i].id for i in active], dtype=np.uint64), vectors[active])
    tmp = folder / "index.usearch.tmp"
    index.save(str(tmp))
    os.replace(tmp, folder / "index.usearch")
    manifest = {
        "format": BANK_FORMAT,
        "version": SCHEMA_VERSION,
        "embedding_model": store.embedder.name,
        "embedding_dim": store.dim,
        "metric": "cos",
        "count": len(experiences),
        "active": len(active),
        "created_at": time.time(),
        "files": {name: _sha256_file(folder / name) for name in _BANK_FILES},
    }
    atomic_write_json(folder / "manifest.json", manifest)
    logger.info("exported %d experiences to %s", len(experiences), folder)
    return folder


def _read_manifest(folder: Path) -> dict:
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
                file, "missing or its checksum differs from the bank manifest", "re-export the bank"
            )
    return manifest


def _read_experiences(jsonl: Path) -> list[Experience]:
    experiences = []
    with open(jsonl, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                experiences.append(Experience.from_dict(json.loads(line)))
            except (ValueError, TypeError) as exc:
                raise DataError(jsonl, f"line {number} is not a valid experience ({exc})") from exc
    return experiences


def import_bank(
    store: BankStore, folder: str | os.PathLike[str], reembed: bool = False
) -> dict[int, int]:
    """Add a bank written by :func:`export_bank` to ``store`` in one transaction; returns
    ``old id -> new id``.

    Vectors are reused when the bank was embedded with the store's model; otherwise the
    import is refused unless ``reembed=True``, which embeds the texts again.
    """
    folder = Path(folder)
    manifest = _read_manifest(folder)
    same_model = (
        manifest.get("embedding_model") == store.embedder.name
        and int(manifest.get("embedding_dim", -1)) == store.dim
    )
    if not same_model and not reembed:
        raise ConfigurationError(
            f"the bank {folder} was embedded with {manifest.get('embedding_model')!r} "
            f"(dim {manifest.get('embedding_dim')}); this store uses {store.embedder.name!r} "
            f"(dim {store.dim}). Pass reembed=True to embed its texts with this store's model."
        )
    experiences = _read_experiences(folder / "experiences.jsonl")
    if same_model:
        vectors = np.load(folder / "vectors.npy")
        if vectors.shape != (len(experiences), store.dim):
            raise DataError(
                folder / "vectors.npy",
                f"shape {vectors.shape} does not match {len(experiences)} experiences of dim {store.dim}",
            )
    else:
        texts = [ExperienceText(e.title, e.description, e.content) for e in experiences]
        vectors = store.embed_texts(texts)
    mapping: dict[int, int] = {}
    with store.transaction() as cursor:
        for exp, vector in zip(experiences, vectors):
            prov = Provenance(
                tuple(exp.source_task_ids),
                tuple(exp.source_trajectory_ids),
                exp.created_step,
                exp.policy_version,
                exp.env_family,
            )
            [new_id] = store.insert(
                cursor,
                [ExperienceText(exp.title, exp.description, exp.content)],
                vector[None, :],
                prov,
                exp.env_family,
                kind="import",
            )
            mapping[exp.id] = new_id
        inactive: dict[str, list[int]] = {}
        for exp in experiences:
            store.database.restore_state(cursor, mapping[exp.id], exp, mapping)
            if not exp.active:
                inactive.setdefault(family_key(exp.env_family), []).append(mapping[exp.id])
        # inactive rows were indexed by insert(); take them out again after commit
        for key, ids in inactive.items():
            store.after_commit(("remove", key, np.array(ids, dtype=np.int64), None))
    logger.info(
        "imported %d experiences (%d inactive) from %s",
        len(mapping),
        sum(len(v) for v in inactive.values()),
        folder,
    )
    return mapping


__all__ = ["BANK_FORMAT", "BankStore", "export_bank", "import_bank"]
