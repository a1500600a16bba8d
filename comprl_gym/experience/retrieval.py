"""Retrieval: the query side of the experience manager.

Queries from any thread or event loop are queued, gathered into batches (``query_batch_size``;
a batch waits up to ``query_batch_timeout_s`` for more queries only while every worker is
busy, so a lone query runs at once and a burst still shares one call), embedded through an
LRU cache and searched by a pool of workers under the read side of the manager's
writer-priority lock, so the actor never waits on writers for long. Results are diversified
(score = -rank - lambda*log(1+retrievals) - recent-use penalty, with a chance of moving a
recently used top hit to the end) so that near-equal experiences share the retrievals, as in
the Complementary RL reference; with ``usefulness_weight`` the score also loses
``weight * (1 - posterior win rate)`` (a Beta prior on wins over uses), so lessons that misled
the actor sink and untried ones are still tried; the candidates are read in widening windows that give the
answer of the reference's full ``candidate_multiplier * k`` (:meth:`Retriever._choose`).
Retrieval counts are buffered and written to the store every ``stats_flush_interval_s`` by a
thread of their own, in transactions of ``FLUSH_CHUNK`` rows, so searches run between them.

Example:
    >>> import tempfile
    >>> from comprl_gym.experience import ExperienceStore
    >>> from comprl_gym.experience.rwlock import RWLock
    >>> store = ExperienceStore(tempfile.mkdtemp())
    >>> _ = store.add_texts(["## Title: Stairs\\n## Description: rooms\\n## Content: walk to >"])
    >>> retriever = Retriever(store, store.config, RWLock())
    >>> [hit.experience.title for hit in retriever.retrieve("where is the exit?")]
    ['Stairs']
    >>> retriever.close(); store.close()
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import math
import queue
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from comprl_gym.core import ConfigurationError
from comprl_gym.experience.config import ExperienceConfig
from comprl_gym.experience.embedding import EmbeddingCache, clean_text
from comprl_gym.experience.records import Retrieved, posterior_win_rate
from comprl_gym.experience.rwlock import RWLock
from comprl_gym.experience.store import ExperienceStore

logger = logging.getLogger(__name__)

#: Retrieval counters written per transaction (each holds the manager's write lock).
FLUSH_CHUNK = 500


@dataclass
class _Query:
    text: str | None
    vector: np.ndarray | None
    k: int
    env_family: str | None
    diversify: bool
    record: bool
    future: concurrent.futures.Future
    enqueued: float


_STOP = object()


class Retriever:
    """Batched, diversified, cached retrieval from a store.

    Args:
        store: the open store.
        config: batching, cache and diversification knobs.
        lock: the manager's read/write lock (searches take the read side).
    """

    def __init__(self, store: ExperienceStore, config: ExperienceConfig, lock: RWLock):
        self.store = store
        self.config = config
        self._lock = lock
        self.cache = EmbeddingCache(self.config.embedding_cache_size)
        self._usage: dict[int, list[float]] = {}  # id -> [pending count, last retrieval time]
        self._usage_lock = threading.Lock()
        self._rng = random.Random(self.config.seed)
        self._rng_lock = threading.Lock()
        self._queue: queue.Queue[Any] = queue.Queue()
        self._pool = concurrent.futures.ThreadPoolExecutor(
            self.config.search_workers, thread_name_prefix="experience-search"
        )
        self._busy = 0  # batches handed to the pool and not finished
        self._busy_lock = threading.Lock()
        self._closed = False
        self.batch_stats = {"batches": 0, "queries": 0, "full_batches": 0}
        self._batcher = threading.Thread(
            target=self._batch_loop, name="experience-batcher", daemon=True
        )
        self._batcher.start()
        self._flush_stop = threading.Event()
        self._flusher = threading.Thread(
            target=self._flush_loop, name="experience-counters", daemon=True
        )
        self._flusher.start()

    def retrieve(
        self,
        query: str,
        k: int | None = None,
        env_family: str | None = None,
        diversify: bool | None = None,
        record: bool = True,
        timeout: float | None = 60.0,
    ) -> list[Retrieved]:
        """The ``k`` experiences most relevant to ``query`` (restricted to ``env_family`` and
        the family-less ones when given). An empty query returns ``[]``."""
        return self._submit_text(query, k, env_family, diversify, record).result(timeout)

    def retrieve_batch(
        self,
        queries: Sequence[str],
        k: int | None = None,
        env_family: str | None = None,
        diversify: bool | None = None,
        record: bool = True,
        timeout: float | None = 60.0,
    ) -> list[list[Retrieved]]:
        futures = [self._submit_text(q, k, env_family, diversify, record) for q in queries]
        return [f.result(timeout) for f in futures]

    def retrieve_by_vector(
        self,
        vector: np.ndarray,
        k: int | None = None,
        env_family: str | None = None,
        diversify: bool | None = None,
        record: bool = True,
        timeout: float | None = 60.0,
    ) -> list[Retrieved]:
        """Like :meth:`retrieve` for a precomputed query embedding."""
        return self._submit(
            None, np.asarray(vector, np.float32), k, env_family, diversify, record
        ).result(timeout)

    async def aretrieve(
        self,
        query: str,
        k: int | None = None,
        env_family: str | None = None,
        diversify: bool | None = None,
        record: bool = True,
    ) -> list[Retrieved]:
        """Async :meth:`retrieve`: awaits the batch without blocking the event loop."""
        return await asyncio.wrap_future(self._submit_text(query, k, env_family, diversify, record))

    async def aretrieve_batch(
        self,
        queries: Sequence[str],
        k: int | None = None,
        env_family: str | None = None,
        diversify: bool | None = None,
        record: bool = True,
    ) -> list[list[Retrieved]]:
        futures = [
            asyncio.wrap_future(self._submit_text(q, k, env_family, diversify, record))
            for q in queries
        ]
        return list(await asyncio.gather(*futures))

    def _submit_text(
        self,
        query: str,
        k: int | None,
        env_family: str | None,
        diversify: bool | None,
        record: bool,
    ) -> concurrent.futures.Future:
        text = clean_text(query)[: self.config.max_query_chars].strip()
        if not text:
            future: concurrent.futures.Future = concurrent.futures.Future()
            future.set_result([])
            return future
        return self._submit(text, None, k, env_family, diversify, record)

    def _submit(
        self,
        text: str | None,
        vector: np.ndarray | None,
        k: int | None,
        env_family: str | None,
        diversify: bool | None,
        record: bool,
    ) -> concurrent.futures.Future:
        if self._closed:
            raise RuntimeError("the experience manager is closed")
        k = self.config.top_k if k is None else int(k)
        if k < 1:
            raise ConfigurationError(f"k must be at least 1, got {k}")
        if vector is not None and vector.shape[-1] != self.store.dim:
            raise ConfigurationError(
                f"query vector has dimension {vector.shape[-1]}, the store {self.store.dim}"
            )
        future: concurrent.futures.Future = concurrent.futures.Future()
        item = _Query(
            text,
            vector,
            k,
            env_family,
            self.config.diversify if diversify is None else diversify,
            record,
            future,
            time.monotonic(),
        )
        self._queue.put(item)
        return future

    def _batch_loop(self) -> None:
        cfg = self.config
        while True:
            first = self._queue.get()
            if first is _STOP:
                return
            batch = [first]
            stop = False
            with self._busy_lock:
                idle = self._busy < cfg.search_workers
            # A free worker takes what is queued now: waiting would only add latency. With all
            # workers busy the batch cannot start anyway, so it gathers until the deadline.
            deadline = first.enqueued + (0.0 if idle else cfg.query_batch_timeout_s)
            while len(batch) < cfg.query_batch_size:
                remaining = deadline - time.monotonic()
                try:
                    item = (
                        self._queue.get(timeout=remaining)
                        if remaining > 0
                        else self._queue.get_nowait()
                    )
                except queue.Empty:
                    break
                if item is _STOP:
                    stop = True
                    break
                batch.append(item)
            self.batch_stats["batches"] += 1
            self.batch_stats["queries"] += len(batch)
            self.batch_stats["full_batches"] += len(batch) >= cfg.query_batch_size
            with self._busy_lock:
                self._busy += 1
            self._pool.submit(self._run_batch, batch)
            if stop:
                return

    def _run_batch(self, batch: list[_Query]) -> None:
        try:
            texts = [q.text for q in batch if q.vector is None]
            embedded = self.cache.encode(self.store.embedder, texts) if texts else None
            vectors = np.zeros((len(batch), self.store.dim), dtype=np.float32)
            j = 0
            for i, q in enumerate(batch):
                if q.vector is None:
                    vectors[i] = embedded[j]  # type: ignore[index]
                    j += 1
                else:
                    vectors[i] = q.vector
            groups: dict[str | None, list[int]] = {}
            for i, q in enumerate(batch):
                groups.setdefault(q.env_family, []).append(i)
            results: list[list[Retrieved]] = [[] for _ in batch]
            with self._lock.read():
                for family, members in groups.items():
                    keys = self.store.family_keys(family)
                    if not keys:
                        continue
                    chosen = self._choose(vectors[members], [batch[m] for m in members], keys)
                    wanted = sorted({eid for pairs in chosen for eid, _ in pairs})
                    found = {e.id: e for e in self.store.get(wanted)}
                    for row, m in enumerate(members):
                        results[m] = [
                            Retrieved(found[eid], sim) for eid, sim in chosen[row] if eid in found
                        ]
            now = time.time()
            for q, hits in zip(batch, results):
                if q.record and hits:
                    self._record_retrievals([h.id for h in hits], now)
                q.future.set_result(hits)
        except BaseException as exc:  # hand every waiting caller the error, never hang them
            logger.exception("experience query batch failed")
            for q in batch:
                if not q.future.done():
                    q.future.set_exception(exc)
        finally:
            with self._busy_lock:
                self._busy -= 1

    def _choose(
        self, vectors: np.ndarray, queries: list[_Query], keys: list[str]
    ) -> list[list[tuple[int, float]]]:
        """Each query's answer, ``(id, similarity)`` best first.

        A diversified query ranks the reference's ``candidate_multiplier * k`` nearest
        candidates by the usage-penalised score, but reads them in widening windows: the
        candidate at similarity rank ``r`` scores at most ``-r``, so once the ``(k+1)``-th best
        score among the first ``w`` is at least ``-w`` no later candidate can enter the top
        ``k + 1`` (all that dropout may use) and the answer is the full width's. Otherwise the
        window doubles, up to the full width. With the usual counts the first window, ``2(k+1)``,
        decides: the index is searched ~``multiplier / 2`` times narrower and the usage of that
        many times fewer candidates is read.
        """
        full = [q.k * (self.config.candidate_multiplier if q.diversify else 1) for q in queries]
        width = [min(cap, 2 * (q.k + 1)) if q.diversify else cap for q, cap in zip(queries, full)]
        chosen: list[list[tuple[int, float]]] = [[] for _ in queries]
        usage: dict[int, tuple[int, float, int, int]] = {}
        pending = list(range(len(queries)))
        while pending:
            window = max(width[i] for i in pending)
            ids, sims = self.store.search(vectors[pending], window, keys)
            if any(queries[i].diversify for i in pending):
                new = {int(x) for x in ids.ravel() if x >= 0} - usage.keys()
                usage.update(self.store.usage(sorted(new)))
            widen = []
            for row, i in enumerate(pending):
                q = queries[i]
                pairs = [(int(a), float(b)) for a, b in zip(ids[row], sims[row]) if a >= 0]
                pairs = pairs[: full[i]]
                if not q.diversify:
                    chosen[i] = pairs[: q.k]
                    continue
                scored = self._scored(pairs, usage)
                decided = (
                    len(pairs) < window  # the index holds no more candidates
                    or len(pairs) >= full[i]
                    or (len(scored) > q.k and scored[q.k][0] >= -len(pairs))
                )
                if decided:
                    chosen[i] = self._dropout(scored)[: q.k]
                else:
                    width[i] = min(full[i], 2 * window)
                    widen.append(i)
            pending = widen
        return chosen

    def _scored(
        self, pairs: list[tuple[int, float]], usage: dict[int, tuple[int, float, int, int]]
    ) -> list[tuple[float, int, int, float, bool]]:
        """``(score, rank, id, similarity, recent)`` of ``(id, similarity)`` candidates (in
        similarity order), best first by the reference's usage-penalised score, less
        ``usefulness_weight * (1 - posterior win rate)``. Every term but ``-rank`` is <= 0,
        which :meth:`_choose`'s early stop relies on."""
        cfg = self.config
        now = time.time()
        with self._usage_lock:
            pending = {eid: tuple(self._usage[eid]) for eid, _ in pairs if eid in self._usage}
        scored = []
        for rank, (eid, sim) in enumerate(pairs):
            count, last, uses, wins = usage.get(eid, (0, 0.0, 0, 0))
            if eid in pending:
                count += int(pending[eid][0])
                last = max(last, pending[eid][1])
            recent = last > 0 and now - last < cfg.diversity_recent_s
            score = (
                -rank
                - cfg.diversity_lambda * math.log1p(count)
                - (cfg.diversity_recent_penalty if recent else 0.0)
                - cfg.usefulness_weight
                * (1.0 - posterior_win_rate(wins, uses, cfg.usefulness_prior))
            )
            scored.append((score, rank, eid, sim, recent))
        scored.sort(key=lambda s: (-s[0], s[1]))
        return scored

    def _dropout(
        self, scored: list[tuple[float, int, int, float, bool]]
    ) -> list[tuple[int, float]]:
        """The reference's dropout: with probability ``diversity_dropout_p`` a recently used
        top hit moves to the end of the list."""
        ranked = [(eid, sim) for _, _, eid, sim, _ in scored]
        if ranked and self.config.diversity_dropout_p > 0 and scored[0][4]:
            with self._rng_lock:
                drop = self._rng.random() < self.config.diversity_dropout_p
            if drop:
                ranked = ranked[1:] + ranked[:1]
        return ranked

    def _record_retrievals(self, ids: Sequence[int], now: float) -> None:
        with self._usage_lock:
            for eid in ids:
                slot = self._usage.setdefault(eid, [0, 0.0])
                slot[0] += 1
                slot[1] = now

    def _flush_loop(self) -> None:
        while not self._flush_stop.wait(self.config.stats_flush_interval_s):
            self.flush_usage()

    def flush_usage(self) -> None:
        """Write the buffered retrieval counters, ``FLUSH_CHUNK`` rows per transaction (the
        counter thread calls this every ``stats_flush_interval_s``; save, export and close too).

        Each transaction holds the manager's write lock, and a counter update rewrites the
        whole row (vector included): 10k rows in one transaction took 625 ms at 100k entries,
        a stall of every search. Chunked, searches run between the transactions. Counters of a
        failed transaction and those after it are kept for the next flush."""
        with self._usage_lock:
            pending, self._usage = self._usage, {}
        items = [(eid, (int(c), float(t))) for eid, (c, t) in sorted(pending.items())]
        for start in range(0, len(items), FLUSH_CHUNK):
            try:
                with self._lock.write():
                    self.store.flush_usage(dict(items[start : start + FLUSH_CHUNK]))
            except Exception:
                logger.exception(
                    "could not write retrieval counters; keeping them for the next flush"
                )
                with self._usage_lock:
                    for eid, (c, t) in items[start:]:
                        slot = self._usage.setdefault(eid, [0, 0.0])
                        slot[0] += c
                        slot[1] = max(slot[1], t)
                return

    def close(self) -> None:
        """Finish queued queries, stop the workers and write the buffered counters."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(_STOP)
        self._batcher.join(timeout=30)
        self._pool.shutdown(wait=True)
        self._flush_stop.set()
        self._flusher.join(timeout=60)
        self.flush_usage()
