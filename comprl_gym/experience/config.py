"""The one configuration dataclass of the experience system: every knob and what it means."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from comprl_gym.core import ConfigurationError

#: The orders in which a full store evicts (see ``ExperienceConfig.eviction_policy``).
EVICTION_POLICIES = ("fifo", "usefulness", "age")


@dataclass
class ExperienceConfig:
    """Every hyperparameter of the store, the manager and the merging loop.

    Defaults follow the Complementary RL reference (query batch 32 / 5 ms, diversification
    lambda 0.4 over a 300 s window with 0.5 dropout and 16x candidates; every training weight
    1, as its launched pipeline runs; merging every 5 steps in chunks of 5). The trainers'
    :class:`~comprl_gym.trainers.config.ExperienceSettings` extends this class with the
    training-loop knobs only, so every knob has one owner.

    Example:
        >>> ExperienceConfig(top_k=5).candidate_multiplier
        16
    """

    # ---- retrieval --------------------------------------------------------------------------
    #: Experiences returned per query when the caller gives no ``k``.
    top_k: int = 3
    #: Queries gathered into one embedding + index search call.
    query_batch_size: int = 32
    #: Longest wait (seconds) after the first queued query before a partial batch is run;
    #: only while every search worker is busy (a free worker runs what is queued at once).
    query_batch_timeout_s: float = 0.005
    #: Threads that run query batches (embedding and index search) in parallel.
    search_workers: int = 2
    #: Threads usearch may use inside one batched search (0 = all cores).
    search_threads: int = 0
    #: Query embeddings kept in the LRU cache (0 disables the cache).
    embedding_cache_size: int = 4096
    #: Longest query, in characters, that is embedded; longer ones are cut (the model reads
    #: 256 tokens anyway) so a huge query cannot stall the batch.
    max_query_chars: int = 4096

    # ---- diversification (score = -rank - lambda*log(1+retrievals) - recent penalty) --------
    #: Re-rank candidates to spread retrievals over near-equal experiences.
    diversify: bool = True
    #: Weight of the ``log(1 + retrieval_count)`` penalty.
    diversity_lambda: float = 0.4
    #: An experience retrieved less than this many seconds ago is "recent".
    diversity_recent_s: float = 300.0
    #: Penalty added to the score of a recent experience.
    diversity_recent_penalty: float = 1.0
    #: Probability of moving a recently used top hit to the end of the list.
    diversity_dropout_p: float = 0.5
    #: Candidates a diversified query ranks: ``candidate_multiplier * k`` nearest (read in
    #: widening windows that give the same answer, see ``Retriever._choose``).
    candidate_multiplier: int = 16
    #: Seed of the dropout random generator (None = non-deterministic).
    seed: int | None = 0

    # ---- usefulness (score -= weight * (1 - posterior win rate)) ----------------------------
    #: Weight of a lesson's track record in the diversified score: a candidate loses
    #: ``usefulness_weight * (1 - (wins + a) / (uses + a + b))``, so one that misled the actor
    #: sinks while an untried one keeps the prior mean. 0 = off (the reference has none).
    usefulness_weight: float = 0.0
    #: ``(a, b)`` of the Beta prior on a lesson's win rate (1, 1: uniform, prior mean 0.5).
    usefulness_prior: tuple[float, float] = (1.0, 1.0)

    # ---- extractor training -----------------------------------------------------------------
    #: Sample weight of an experience for extractor training: ``(1 + training_count)**-power``;
    #: 0 (default) disables the down-weighting. The reference's config sets
    #: ``memory_repeat_weight_power: 0.5``, but its launched pipeline never records a training
    #: (``record_training`` is called only by ``knowledge_model_pipeline.py``), so every weight
    #: it applies is 1: 0 here runs as it runs; 0.5 is the weight its config describes.
    train_weight_power: float = 0.0
    #: An experience trained on fewer than this many actor steps ago gets weight 0 (cooldown;
    #: reference ``memory_repeat_cooldown_steps: 1``, inert there for the same reason: 0).
    train_cooldown_steps: int = 0
    #: Lowest :func:`~comprl_gym.lessons.quality.lesson_quality` score (0-1, the fraction of
    #: its four checks passed) of a lesson the extractor may write; 0 writes everything.
    min_quality: float = 0.0

    # ---- maintenance ------------------------------------------------------------------------
    #: Cosine similarity at or above which two experiences of one family are duplicates.
    dedupe_threshold: float = 0.95
    #: Neighbours examined per experience when looking for duplicates.
    dedupe_neighbors: int = 8
    #: Knowledge items per merge call: a family's entries go to the extractor in sequential
    #: chunks of this size, each chunk's answer carried into the next (reference
    #: ``max_merging_item_per_call: 5``).
    merge_window: int = 5
    #: :meth:`ExperienceManager.maybe_merge` merges every this many actor steps (0 = never;
    #: reference ``merging_interval: 5``).
    merge_interval_steps: int = 5

    # ---- bounds and lifecycle ----------------------------------------------------------------
    #: Most active lessons the store holds; a write that goes past it evicts, in its own
    #: transaction, the lessons ``eviction_policy`` ranks first. 0 = unbounded. 20,000 as the
    #: reference's bank (``max_memory_size``, first in first out): over the paper's budget
    #: (100 iterations x 64 rollouts) the store otherwise only grows.
    max_entries: int = 20000
    #: Which lessons a full store evicts first: ``"fifo"`` (oldest written, the reference),
    #: ``"usefulness"`` (lowest posterior win rate, ``usefulness_prior``; ties oldest first) or
    #: ``"age"`` (longest unused: oldest of written and last retrieved).
    eviction_policy: str = "fifo"
    #: :meth:`ExperienceManager.cleanup` hides (status ``expired``: out of the index, row kept,
    #: ``restore`` brings it back) active lessons neither written nor retrieved for this many
    #: seconds. 0 = never (the reference has no expiry).
    expire_after_s: float = 0.0
    #: :meth:`ExperienceManager.cleanup` purges merged tombstones (status ``merged``: rows kept
    #: for provenance after a merge or dedupe replaced them) retired this many seconds ago or
    #: more: each row goes, a ``purge`` revision keeps its snapshot (title, successor, tallies)
    #: for ``comprl-gym lesson``. 30 days; 0 = keep them forever.
    tombstone_retention_s: float = 30 * 86400.0
    #: Rows the append-only revision log keeps (its oldest are trimmed beyond; the revision
    #: numbers go on). 200,000 is ten changes per lesson of a full default store; 0 keeps all.
    revision_log_max_rows: int = 200000

    # ---- index and persistence --------------------------------------------------------------
    #: HNSW graph degree (usearch ``connectivity``). 32 with ``hnsw_expansion_search`` 128, by
    #: measurement (benchmarks/results/experience_retrieval_text.json: 100k real text
    #: embeddings, k=8, batches of 32, 2 quiet cores, i8 inner-product graph, x2 re-rank):
    #: recall@8 0.991 at p99 23.5 ms. The previous default, ef 64 over usearch's own i8 cast,
    #: was chosen on synthetic vectors (0.991 there) and reached only 0.973 on real text; faiss
    #: ``IndexHNSWFlat`` M=16 efSearch=128 reached 0.991 at 9.6 ms in the same run (usearch's
    #: search loop is the gap). Degree 16 needed the same ef on real text and ef 160 on the
    #: synthetic vectors.
    hnsw_connectivity: int = 32
    #: Candidate list size while inserting (usearch ``expansion_add``).
    hnsw_expansion_add: int = 128
    #: Candidate list size while searching (usearch ``expansion_search``); raises recall.
    hnsw_expansion_search: int = 128
    #: Scalar type of the vectors in the HNSW graph: ``"f32"``, ``"f16"`` or ``"i8"``. A
    #: quantised graph is searched for ``rerank_oversample * k`` candidates that are re-ranked
    #: with exact float32 cosine over vectors kept in memory (loaded from SQLite on open).
    #: i8 by default: a quarter of the float32 graph's memory, built faster (63 s vs 110 s at
    #: 100k) and searched faster at equal recall. Its cost: opening a store reads every vector
    #: from SQLite (2.3 s at 100k).
    hnsw_dtype: str = "i8"
    #: Graph candidates per wanted result when the graph is quantised (1 = no oversampling).
    rerank_oversample: int = 2
    #: With ``hnsw_dtype="i8"``, the int8 codes span ``+-hnsw_i8_range / sqrt(dim)`` (clipped
    #: beyond, capped at +-1): in standard deviations of a random unit vector's coordinate.
    #: usearch's own cast gives a 384-d coordinate ~6 levels; 4 gives it ~3.3x more. On real
    #: text embeddings (100k all-MiniLM-L6-v2, ef 96, x4 re-rank) recall@8 rose from 0.978 to
    #: 0.990. A saved graph coded otherwise is rebuilt on open.
    hnsw_i8_range: float = 4.0
    #: usearch metric of the graph: ``"ip"`` (inner product) or ``"cos"``. Every stored vector
    #: and query is unit-normalised, so both rank alike; ``"ip"`` skips the two norms of each
    #: distance: at 100k x 384 on 2 cores its i8 graph was built in 63 s vs 107 s and searched
    #: 1.4x faster at the same recall. A saved graph built otherwise is rebuilt on open.
    hnsw_metric: str = "ip"
    #: SQLite ``synchronous`` pragma: FULL survives power loss, NORMAL survives a killed
    #: process (WAL) and is faster.
    sqlite_synchronous: str = "FULL"
    #: The index files are saved after this many index changes (0 = only on save/close).
    index_autosave_changes: int = 5000
    #: Run ``PRAGMA quick_check`` when a store is opened.
    check_database_on_open: bool = True
    #: Buffered retrieval counters are written to SQLite at least this often (seconds).
    stats_flush_interval_s: float = 2.0

    # ---- input limits -----------------------------------------------------------------------
    #: Longest experience text (title + description + content) accepted, in characters.
    max_text_chars: int = 16384

    def __post_init__(self) -> None:
        self.usefulness_prior = tuple(float(x) for x in self.usefulness_prior)  # type: ignore[assignment]
        checks = {
            "usefulness_weight": self.usefulness_weight >= 0,
            "usefulness_prior": len(self.usefulness_prior) == 2
            and all(x > 0 for x in self.usefulness_prior),
            "max_entries": self.max_entries >= 0,
            "eviction_policy": self.eviction_policy in EVICTION_POLICIES,
            "expire_after_s": self.expire_after_s >= 0,
            "tombstone_retention_s": self.tombstone_retention_s >= 0,
            "revision_log_max_rows": self.revision_log_max_rows >= 0,
            "top_k": self.top_k >= 1,
            "query_batch_size": self.query_batch_size >= 1,
            "query_batch_timeout_s": self.query_batch_timeout_s >= 0,
            "search_workers": self.search_workers >= 1,
            "embedding_cache_size": self.embedding_cache_size >= 0,
            "candidate_multiplier": self.candidate_multiplier >= 1,
            "diversity_dropout_p": 0.0 <= self.diversity_dropout_p <= 1.0,
            "diversity_lambda": self.diversity_lambda >= 0,
            "dedupe_threshold": -1.0 <= self.dedupe_threshold <= 1.0,
            "merge_window": self.merge_window >= 2,
            "merge_interval_steps": self.merge_interval_steps >= 0,
            "train_cooldown_steps": self.train_cooldown_steps >= 0,
            "train_weight_power": self.train_weight_power >= 0,
            "min_quality": 0.0 <= self.min_quality <= 1.0,
            "hnsw_connectivity": self.hnsw_connectivity >= 2,
            "hnsw_expansion_search": self.hnsw_expansion_search >= 1,
            "hnsw_dtype": self.hnsw_dtype in ("f32", "f16", "i8"),
            "hnsw_metric": self.hnsw_metric in ("ip", "cos"),
            "rerank_oversample": self.rerank_oversample >= 1,
            "hnsw_i8_range": self.hnsw_i8_range > 0,
            "max_text_chars": self.max_text_chars >= 16,
            "sqlite_synchronous": self.sqlite_synchronous.upper()
            in ("OFF", "NORMAL", "FULL", "EXTRA"),
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            values = ", ".join(f"{name}={getattr(self, name)!r}" for name in bad)
            raise ConfigurationError(f"invalid {type(self).__name__} value(s): {values}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
