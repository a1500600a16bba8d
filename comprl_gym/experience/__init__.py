"""The experience system: a durable usearch + SQLite store, the asynchronous manager that is
its only door, extractor-output parsing, merging, and every prompt.

Example:
    >>> import tempfile
    >>> from comprl_gym.experience import ExperienceManager
    >>> with ExperienceManager(tempfile.mkdtemp()) as manager:
    ...     ids = manager.add(["## Title: Doors\\n## Description: locked doors\\n## Content: kick or find a key"])
    ...     manager.retrieve("the door is locked")[0].experience.title
    'Doors'
"""

from comprl_gym.experience.config import ExperienceConfig
from comprl_gym.experience.embedding import (
    DEFAULT_MODEL_NAME,
    Embedder,
    EmbeddingCache,
    SentenceTransformerEmbedder,
    default_embedder,
    make_embedder,
)
from comprl_gym.experience.manager import ExperienceManager
from comprl_gym.experience.merge import CleanupReport, MergeReport
from comprl_gym.experience.operations import (
    ApplyResult,
    ExperienceText,
    ExtractorOutputError,
    Operation,
    parse_experience_text,
    parse_extractor_output,
    parse_merge_items,
)
from comprl_gym.experience.records import Experience, Provenance, Retrieved
from comprl_gym.experience.store import ExperienceStore

__all__ = [
    "DEFAULT_MODEL_NAME",
    "ApplyResult",
    "CleanupReport",
    "Embedder",
    "EmbeddingCache",
    "Experience",
    "ExperienceConfig",
    "ExperienceManager",
    "ExperienceStore",
    "ExperienceText",
    "ExtractorOutputError",
    "MergeReport",
    "Operation",
    "Provenance",
    "Retrieved",
    "SentenceTransformerEmbedder",
    "default_embedder",
    "make_embedder",
    "parse_experience_text",
    "parse_extractor_output",
    "parse_merge_items",
]
