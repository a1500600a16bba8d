"""The ExperienceManager: the one door to the experience store, for actors and extractors alike.

* Retrieval never makes the actor wait on writers for long: queries from any thread or event
  loop are queued, gathered into batches (``query_batch_size`` or ``query_batch_timeout_s``),
  embedded through an LRU cache and searched by a pool of workers under the read side of a
  writer-priority read/write lock.
* Results are diversified (score = -rank - lambda*log(1+retrievals) - recent-use penalty, with
  a chance of moving a recently used top hit to the end) so that near-equal experiences share
  the retrievals, as in the Complementary RL reference.
* Writes (extractor operations, outcomes, training marks, merges, de-duplication) take the
  write lock and commit one SQLite transaction each: all or nothing, with provenance.

Example:
    >>> import tempfile
    >>> from comprl_gym.experience import ExperienceManager, Provenance
    >>> manager = ExperienceManager(tempfile.mkdtemp())
    >>> ids = manager.add(["## Title: Stairs\\n## Description: MiniHack rooms\\n## Content: Walk to the '>'."],
    ...                   Provenance(task_ids=("room-1",), actor_step=3), env_family="minihack")
    >>> [hit.experience.title for hit in manager.retrieve("how do I leave the room?", env_family="minihack")]
    ['Stairs']
    >>> manager.report_outcome(ids, won=True)
    >>> manager.get(ids)[0].wins
    1
    >>> manager.close()
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import json
import logging
import math
import os
import queue
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from comprl_gym.core import ConfigurationError
from comprl_gym.experience import prompts
from comprl_gym.experience.config import ExperienceConfig
from comprl_gym.experience.embedding import Embedder, EmbeddingCache, clean_text
from comprl_gym.experience.merge import MergeReport, active_families, plan_dedupe, window_for
from comprl_gym.experience.operations import (
    EXTRACT_KINDS,
    MERGE_KINDS,
    ApplyResult,
    ExtractorOutputError,
    Operation,
    parse_extractor_output,
    parse_merge_output,
)
from comprl_gym.experience.records import (
    ACTIVE,
    DROPPED,
    MERGED,
    NO_PROVENANCE,
    Experience,
    Provenance,
    Retrieved,
)
from comprl_gym.experience.rwlock import RWLock
from comprl_gym.experience.store import ExperienceStore

logger = logging.getLogger(__name__)

#: ``extractor(window) -> str | list[Operation]``: the merge call (text in the merge format).
MergeExtractor = Callable[[list[Experience]], "str | list[Operation]"]


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


class ExperienceManager:
    """Thread-safe, asyncio-friendly access to an :class:`ExperienceStore`.

    Args:
        store: an open store, or a folder to open one in.
        config: every knob (defaults follow the reference); the store's config if omitted.
        embedder: model name/folder or :class:`Embedder` when ``store`` is a folder.
        repair: passed to :class:`ExperienceStore` when opening a folder.
    """

    def __init__(
        self,
        store: ExperienceStore | str | os.PathLike[str],
        config: ExperienceConfig | None = None,
        embedder: Embedder | str | None = None,
        *,
        repair: bool = False,
    ):
        if not isinstance(store, ExperienceStore):
            store = ExperienceStore(store, embedder, config, repair=repair)
        self.store = store
        self.config = config or store.config
        self._lock = RWLock()
        self._cache = EmbeddingCache(self.config.embedding_cache_size)
        self._usage: dict[int, list[float]] = {}  # id -> [pending count, last retrieval time]
        self._usage_lock = threading.Lock()
        self._last_flush = time.monotonic()
        self._rng = random.Random(self.config.seed)
        self._rng_lock = threading.Lock()
        self._queue: queue.Queue[Any] = queue.Queue()
        self._pool = concurrent.futures.ThreadPoolExecutor(
            self.config.search_workers, thread_name_prefix="experience-search"
        )
        self._background = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="experience-maintenance"
        )
        self._closed = False
        self.batch_stats = {"batches": 0, "queries": 0, "full_batches": 0}
        self._batcher = threading.Thread(
            target=self._batch_loop, name="experience-batcher", daemon=True
        )
        self._batcher.start()

    # ================================================================== reads
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

    def get(self, ids: Sequence[int]) -> list[Experience]:
        """Experiences by id (tombstoned ones included), in the order asked."""
        with self._lock.read():
            return self.store.get(ids)

    def get_one(self, experience_id: int) -> Experience | None:
        found = self.get([experience_id])
        return found[0] if found else None

    def experiences(
        self, env_family: str | None = None, include_inactive: bool = False
    ) -> list[Experience]:
        with self._lock.read():
            return list(self.store.iter_experiences(env_family, include_inactive))

    def __len__(self) -> int:
        with self._lock.read():
            return self.store.count()

    # ------------------------------------------------------------------ batching internals
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
            try:
                first = self._queue.get(timeout=cfg.stats_flush_interval_s)
            except queue.Empty:
                self._flush_usage_if_due()
                continue
            if first is _STOP:
                return
            batch = [first]
            stop = False
            deadline = first.enqueued + cfg.query_batch_timeout_s
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
            self._pool.submit(self._run_batch, batch)
            self._flush_usage_if_due()
            if stop:
                return

    def _run_batch(self, batch: list[_Query]) -> None:
        try:
            texts = [q.text for q in batch if q.vector is None]
            embedded = self._cache.encode(self.store.embedder, texts) if texts else None
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
                    width = max(
                        q.k * (self.config.candidate_multiplier if q.diversify else 1)
                        for q in (batch[m] for m in members)
                    )
                    ids, sims = self.store.search(vectors[members], width, keys)
                    candidates = {int(x) for x in ids.ravel() if x >= 0}
                    usage = (
                        self.store.usage(list(candidates))
                        if any(batch[m].diversify for m in members)
                        else {}
                    )
                    chosen: list[list[tuple[int, float]]] = []
                    for row, m in enumerate(members):
                        q = batch[m]
                        pairs = [(int(a), float(b)) for a, b in zip(ids[row], sims[row]) if a >= 0]
                        if q.diversify:
                            pairs = self._diversify(
                                pairs[: q.k * self.config.candidate_multiplier], usage
                            )
                        chosen.append(pairs[: q.k])
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

    def _diversify(
        self, pairs: list[tuple[int, float]], usage: dict[int, tuple[int, float]]
    ) -> list[tuple[int, float]]:
        """Re-rank ``(id, similarity)`` candidates by the reference's usage-penalised score."""
        cfg = self.config
        now = time.time()
        with self._usage_lock:
            pending = {eid: tuple(self._usage[eid]) for eid, _ in pairs if eid in self._usage}
        scored = []
        recent: dict[int, bool] = {}
        for rank, (eid, sim) in enumerate(pairs):
            count, last = usage.get(eid, (0, 0.0))
            if eid in pending:
                count += int(pending[eid][0])
                last = max(last, pending[eid][1])
            recent[eid] = last > 0 and now - last < cfg.diversity_recent_s
            score = (
                -rank
                - cfg.diversity_lambda * math.log1p(count)
                - (cfg.diversity_recent_penalty if recent[eid] else 0.0)
            )
            scored.append((score, rank, eid, sim))
        scored.sort(key=lambda s: (-s[0], s[1]))
        ranked = [(eid, sim) for _, _, eid, sim in scored]
        if ranked and cfg.diversity_dropout_p > 0 and recent[ranked[0][0]]:
            with self._rng_lock:
                drop = self._rng.random() < cfg.diversity_dropout_p
            if drop:
                ranked = ranked[1:] + ranked[:1]
        return ranked

    def _record_retrievals(self, ids: Sequence[int], now: float) -> None:
        with self._usage_lock:
            for eid in ids:
                slot = self._usage.setdefault(eid, [0, 0.0])
                slot[0] += 1
                slot[1] = now

    def _flush_usage_if_due(self, force: bool = False) -> None:
        if not force and time.monotonic() - self._last_flush < self.config.stats_flush_interval_s:
            return
        self._last_flush = time.monotonic()
        with self._usage_lock:
            pending, self._usage = self._usage, {}
        if not pending:
            return
        try:
            with self._lock.write():
                self.store.flush_usage({eid: (int(c), float(t)) for eid, (c, t) in pending.items()})
        except Exception:
            logger.exception("could not write retrieval counters; keeping them for the next flush")
            with self._usage_lock:
                for eid, (c, t) in pending.items():
                    slot = self._usage.setdefault(eid, [0, 0.0])
                    slot[0] += c
                    slot[1] = max(slot[1], t)

    # ================================================================== writes
    def add(
        self,
        items: Sequence[str | dict[str, Any]],
        provenance: Provenance = NO_PROVENANCE,
        env_family: str | None = None,
        vectors: np.ndarray | None = None,
    ) -> list[int]:
        """Add experiences (one atomic write); returns their ids. ``vectors`` skips embedding."""
        texts = self.store.to_texts(items)
        if not texts:
            return []
        vectors = (
            self.store.embed_texts(texts)
            if vectors is None
            else np.asarray(vectors, dtype=np.float32)
        )
        with self._lock.write(), self.store.transaction() as cursor:
            return self.store.insert(cursor, texts, vectors, provenance, env_family)

    def apply_operations(
        self,
        operations: Sequence[Operation],
        shown_ids: Sequence[int],
        provenance: Provenance = NO_PROVENANCE,
        env_family: str | None = None,
    ) -> ApplyResult:
        """Apply extractor operations atomically; ``idx`` in them index ``shown_ids`` (1-based).

        ``update`` writes a NEW experience whose ``merged_from`` lists the replaced ids and
        tombstones those. On any error nothing is changed and ``ok`` is False.
        """
        shown = [int(i) for i in shown_ids]
        family = env_family if env_family is not None else provenance.env_family
        try:
            for op in operations:
                if op.kind not in EXTRACT_KINDS:
                    raise ExtractorOutputError(
                        f"operation {op.kind!r} is not an extractor operation"
                    )
                if any(not 1 <= i <= len(shown) for i in op.idx):
                    raise ExtractorOutputError(f"idx {list(op.idx)} outside 1..{len(shown)}")
                if op.kind in ("add", "update") and op.text is None:
                    raise ExtractorOutputError(f"{op.kind} without a memory text")
            writes = [op for op in operations if op.kind in ("add", "update")]
            texts = self.store.to_texts([op.text for op in writes]) if writes else []  # type: ignore[misc]
            vectors = self.store.embed_texts(texts) if texts else None
            result = ApplyResult()
            with self._lock.write(), self.store.transaction() as cursor:
                w = 0
                for op in operations:
                    targets = [shown[i - 1] for i in op.idx]
                    if op.kind == "add":
                        [new_id] = self.store.insert(
                            cursor, [texts[w]], vectors[w : w + 1], provenance, family
                        )  # type: ignore[index]
                        result.added.append(new_id)
                        w += 1
                    elif op.kind == "update":
                        target_family = family
                        if target_family is None:
                            row = cursor.execute(
                                "SELECT env_family FROM experiences WHERE id = ?", (targets[0],)
                            ).fetchone()
                            target_family = row[0] if row else None
                        [new_id] = self.store.insert(
                            cursor,
                            [texts[w]],
                            vectors[w : w + 1],
                            provenance,  # type: ignore[index]
                            target_family,
                            merged_from=[targets],
                        )
                        self.store.retire(cursor, targets, MERGED, replaced_by=new_id)
                        result.updated[new_id] = targets
                        w += 1
                    elif op.kind == "drop":
                        result.dropped.extend(self.store.retire(cursor, targets, DROPPED))
                    else:
                        column = "upvotes" if op.kind == "upvote" else "downvotes"
                        cursor.executemany(
                            f"UPDATE experiences SET {column} = {column} + 1 WHERE id = ?",
                            [(t,) for t in targets],
                        )
                        result.voted.extend(targets)
            return result
        except Exception as exc:
            logger.warning("extractor operations rejected, nothing changed: %s", exc)
            return ApplyResult(ok=False, error=str(exc))

    def apply_extractor_output(
        self,
        output: str,
        shown_ids: Sequence[int],
        provenance: Provenance = NO_PROVENANCE,
        env_family: str | None = None,
    ) -> ApplyResult:
        """Parse an extractor reply and apply it; malformed output changes nothing (logged)."""
        try:
            operations = parse_extractor_output(output, len(shown_ids), self.config.max_text_chars)
        except ExtractorOutputError as exc:
            preview = (
                clean_text(output)[:200] if isinstance(output, str | bytes) else repr(output)[:200]
            )
            logger.warning("malformed extractor output ignored (%s): %r", exc, preview)
            return ApplyResult(ok=False, error=str(exc))
        return self.apply_operations(operations, shown_ids, provenance, env_family)

    def report_outcome(self, experience_ids: Sequence[int], won: bool) -> None:
        """One episode used ``experience_ids`` and was won or lost: ``uses += 1``, ``wins += won``."""
        ids = list(dict.fromkeys(int(i) for i in experience_ids))
        if not ids:
            return
        with self._lock.write(), self.store.transaction() as cursor:
            cursor.executemany(
                "UPDATE experiences SET uses = uses + 1, wins = wins + ? WHERE id = ?",
                [(1 if won else 0, eid) for eid in ids],
            )

    # ------------------------------------------------------------------ extractor training
    def training_weights(self, ids: Sequence[int], actor_step: int) -> list[float]:
        """Per-id sample weight: 0 inside the cooldown, else ``(1 + training_count)**-power``."""
        found = {e.id: e for e in self.get(list(ids))}
        return [self._weight(found.get(int(i)), actor_step) for i in ids]

    def _weight(self, exp: Experience | None, actor_step: int) -> float:
        cfg = self.config
        if exp is None:
            return 0.0
        if (
            cfg.train_cooldown_steps > 0
            and exp.last_trained_step >= 0
            and actor_step - exp.last_trained_step < cfg.train_cooldown_steps
        ):
            return 0.0
        return (
            float((1.0 + exp.training_count) ** (-cfg.train_weight_power))
            if cfg.train_weight_power > 0
            else 1.0
        )

    def sample_weights(self, id_groups: Sequence[Sequence[int]], actor_step: int) -> list[float]:
        """Weight of each extractor sample (the ids it wrote): the smallest of its ids' weights
        (the most-trained id decides, as in the reference's ``max train_count``)."""
        flat = list({int(i) for group in id_groups for i in group})
        weights = dict(zip(flat, self.training_weights(flat, actor_step)))
        return [min((weights[int(i)] for i in group), default=1.0) for group in id_groups]

    def select_for_training(self, ids: Sequence[int], actor_step: int) -> list[tuple[int, float]]:
        """``(id, weight)`` for the ids with a positive training weight."""
        return [(int(i), w) for i, w in zip(ids, self.training_weights(ids, actor_step)) if w > 0]

    def mark_trained(self, ids: Sequence[int], actor_step: int) -> None:
        """Record that the extractor was trained on samples that wrote ``ids`` at ``actor_step``."""
        unique = list(dict.fromkeys(int(i) for i in ids))
        if not unique:
            return
        with self._lock.write(), self.store.transaction() as cursor:
            cursor.executemany(
                "UPDATE experiences SET training_count = training_count + 1, "
                "last_trained_step = max(last_trained_step, ?) WHERE id = ?",
                [(int(actor_step), eid) for eid in unique],
            )

    # ------------------------------------------------------------------ maintenance
    def dedupe(self, threshold: float | None = None) -> list[int]:
        """Tombstone near-duplicates (cosine >= threshold, same family); the kept experience
        inherits their uses, wins and retrievals and lists them in ``merged_from``."""
        threshold = self.config.dedupe_threshold if threshold is None else threshold
        with self._lock.read():
            plan = plan_dedupe(self.store, threshold, self.config.dedupe_neighbors)
        if not plan:
            return []
        retired: list[int] = []
        with self._lock.write(), self.store.transaction() as cursor:
            for loser, keeper, _sim in plan:
                rows = {
                    r[0]: r
                    for r in cursor.execute(
                        "SELECT id, status, uses, wins, retrieval_count, merged_from FROM experiences WHERE id IN (?, ?)",
                        (loser, keeper),
                    )
                }
                if rows.get(loser, (0, ""))[1] != ACTIVE or rows.get(keeper, (0, ""))[1] != ACTIVE:
                    continue
                self.store.retire(cursor, [loser], MERGED, replaced_by=keeper)
                merged_from = [*json.loads(rows[keeper][5]), loser]
                cursor.execute(
                    "UPDATE experiences SET uses = uses + ?, wins = wins + ?, retrieval_count = retrieval_count + ?, "
                    "merged_from = ?, updated_at = ? WHERE id = ?",
                    (
                        rows[loser][2],
                        rows[loser][3],
                        rows[loser][4],
                        json.dumps(merged_from),
                        time.time(),
                        keeper,
                    ),
                )
                retired.append(loser)
        logger.info(
            "dedupe retired %d near-duplicate experiences (threshold %.3f)", len(retired), threshold
        )
        return retired

    def merge(
        self,
        extractor: MergeExtractor,
        max_windows: int | None = None,
        actor_step: int = 0,
        policy_version: str = "",
    ) -> MergeReport:
        """Slide over the store in windows of related experiences and let ``extractor`` keep,
        merge or drop them. Continues from where the previous call stopped; each window is
        applied atomically, a malformed reply leaves its window unchanged."""
        cfg = self.config
        max_windows = cfg.merge_max_windows if max_windows is None else max_windows
        report = MergeReport()
        with self._lock.read():
            cursor_id = int(self.store.get_meta("merge_cursor") or 0)
            families = active_families(self.store)
        visited: set[int] = set()
        seeds = [eid for eid in families if eid > cursor_id]
        for seed in seeds:
            if max_windows is not None and report.windows >= max_windows:
                break
            if seed in visited:
                continue
            with self._lock.read():
                members = window_for(self.store, seed, families, cfg.merge_window, visited)
                window = self.store.get(members)
            report.windows += 1
            if len(window) < 2:
                self._set_cursor(seed)
                continue
            try:
                reply = extractor(window)
                ops = (
                    parse_merge_output(reply, len(window), cfg.max_text_chars)
                    if isinstance(reply, str)
                    else list(reply)
                )
                for op in ops:
                    if op.kind not in MERGE_KINDS or any(not 1 <= i <= len(window) for i in op.idx):
                        raise ExtractorOutputError(f"bad merge operation {op}")
                    if op.kind == "merge" and op.text is None:
                        raise ExtractorOutputError("merge without merged_memory")
            except Exception as exc:
                report.failed_windows += 1
                report.errors.append(str(exc))
                logger.warning("merge window %s left unchanged: %s", [e.id for e in window], exc)
                self._set_cursor(seed)
                continue
            self._apply_merge(window, ops, report, actor_step, policy_version)
            self._set_cursor(seed)
        else:
            report.pass_complete = True
            self._set_cursor(0)
        return report

    def _apply_merge(
        self,
        window: list[Experience],
        ops: list[Operation],
        report: MergeReport,
        actor_step: int,
        policy_version: str,
    ) -> None:
        merges = [op for op in ops if op.kind == "merge"]
        texts = self.store.to_texts([op.text for op in merges]) if merges else []  # type: ignore[misc]
        vectors = self.store.embed_texts(texts) if texts else None
        with self._lock.write(), self.store.transaction() as cursor:
            ids = [e.id for e in window]
            alive = {
                r[0]
                for r in cursor.execute(
                    f"SELECT id FROM experiences WHERE status='active' AND id IN ({','.join('?' * len(ids))})",
                    ids,
                )
            }
            touched = {window[i - 1].id for op in ops if op.kind != "keep" for i in op.idx}
            if not touched <= alive:
                report.skipped_windows += 1  # changed by another writer since the window was read
                return
            merged: dict[int, list[int]] = {}
            dropped: list[int] = []
            for n, op in enumerate(merges):
                sources = [window[i - 1] for i in op.idx]
                provenance = Provenance(
                    task_ids=tuple(dict.fromkeys(t for s in sources for t in s.source_task_ids)),
                    trajectory_ids=tuple(
                        dict.fromkeys(t for s in sources for t in s.source_trajectory_ids)
                    ),
                    actor_step=actor_step,
                    policy_version=policy_version,
                )
                [new_id] = self.store.insert(
                    cursor,
                    [texts[n]],
                    vectors[n : n + 1],
                    provenance,  # type: ignore[index]
                    sources[0].env_family,
                    merged_from=[[s.id for s in sources]],
                )
                cursor.execute(
                    "UPDATE experiences SET uses = ?, wins = ?, retrieval_count = ? WHERE id = ?",
                    (
                        sum(s.uses for s in sources),
                        sum(s.wins for s in sources),
                        sum(s.retrieval_count for s in sources),
                        new_id,
                    ),
                )
                self.store.retire(cursor, [s.id for s in sources], MERGED, replaced_by=new_id)
                merged[new_id] = [s.id for s in sources]
            for op in ops:
                if op.kind == "drop":
                    dropped.extend(
                        self.store.retire(cursor, [window[i - 1].id for i in op.idx], DROPPED)
                    )
        report.merged.update(merged)
        report.dropped.extend(dropped)

    def _set_cursor(self, seed: int) -> None:
        with self._lock.write(), self.store.transaction() as cursor:
            self.store.set_meta({"merge_cursor": str(seed)}, cursor)

    def maybe_merge(
        self, actor_step: int, extractor: MergeExtractor, policy_version: str = ""
    ) -> MergeReport | None:
        """Run :meth:`merge` when ``merge_interval_steps`` actor steps passed since the last one."""
        interval = self.config.merge_interval_steps
        if interval <= 0:
            return None
        with self._lock.read():
            last = self.store.get_meta("last_merge_step")
        if last is not None and actor_step - int(last) < interval:
            return None
        with self._lock.write(), self.store.transaction() as cursor:
            self.store.set_meta({"last_merge_step": str(int(actor_step))}, cursor)
        return self.merge(extractor, actor_step=actor_step, policy_version=policy_version)

    def merge_in_background(
        self, actor_step: int, extractor: MergeExtractor, policy_version: str = ""
    ) -> concurrent.futures.Future:
        """:meth:`maybe_merge` on the maintenance thread: the actor loop never waits for it."""
        return self._background.submit(self.maybe_merge, actor_step, extractor, policy_version)

    # ------------------------------------------------------------------ search_and_ask
    def search_and_ask(
        self,
        question: str,
        k: int | None = None,
        env_family: str | None = None,
        refiner: prompts.Refiner | None = None,
        context: dict[str, Any] | None = None,
    ) -> tuple[str, list[int]]:
        """Retrieve for ``question`` and, with a ``refiner`` (the extractor), turn the hits into
        advice. Returns the answer text and the ids retrieved. A failing refiner falls back to
        the retrieved lessons (logged)."""
        hits = self.retrieve(question, k, env_family)
        return self._answer(question, hits, refiner, context), [h.id for h in hits]

    async def asearch_and_ask(
        self,
        question: str,
        k: int | None = None,
        env_family: str | None = None,
        refiner: Any = None,
        context: dict[str, Any] | None = None,
    ) -> tuple[str, list[int]]:
        hits = await self.aretrieve(question, k, env_family)
        if refiner is not None and inspect.iscoroutinefunction(refiner) and hits:
            try:
                answer = str(await refiner(question, [h.experience for h in hits], context or {}))
            except Exception:
                logger.exception(
                    "search_and_ask refiner failed; answering with the retrieved lessons"
                )
                answer = prompts.format_search_results([h.experience for h in hits])
            return answer, [h.id for h in hits]
        loop = asyncio.get_running_loop()
        answer = await loop.run_in_executor(None, self._answer, question, hits, refiner, context)
        return answer, [h.id for h in hits]

    @staticmethod
    def _answer(
        question: str, hits: list[Retrieved], refiner: Any, context: dict[str, Any] | None
    ) -> str:
        experiences = [h.experience for h in hits]
        if not experiences:
            return prompts.format_search_results([])
        if refiner is not None:
            try:
                answer = refiner(question, experiences, context or {})
                if isinstance(answer, str) and answer.strip():
                    return answer.strip()
                logger.warning(
                    "search_and_ask refiner returned no text; answering with the retrieved lessons"
                )
            except Exception:
                logger.exception(
                    "search_and_ask refiner failed; answering with the retrieved lessons"
                )
        return prompts.format_search_results(experiences)

    # ------------------------------------------------------------------ async twins of writes
    async def _in_thread(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, lambda: fn(*args, **kwargs))

    async def aadd(self, *args: Any, **kwargs: Any) -> list[int]:
        return await self._in_thread(self.add, *args, **kwargs)

    async def aapply_extractor_output(self, *args: Any, **kwargs: Any) -> ApplyResult:
        return await self._in_thread(self.apply_extractor_output, *args, **kwargs)

    async def aapply_operations(self, *args: Any, **kwargs: Any) -> ApplyResult:
        return await self._in_thread(self.apply_operations, *args, **kwargs)

    async def areport_outcome(self, experience_ids: Sequence[int], won: bool) -> None:
        await self._in_thread(self.report_outcome, experience_ids, won)

    async def amark_trained(self, ids: Sequence[int], actor_step: int) -> None:
        await self._in_thread(self.mark_trained, ids, actor_step)

    async def amerge(self, *args: Any, **kwargs: Any) -> MergeReport:
        return await self._in_thread(self.merge, *args, **kwargs)

    async def adedupe(self, threshold: float | None = None) -> list[int]:
        return await self._in_thread(self.dedupe, threshold)

    # ------------------------------------------------------------------ persistence
    def save(self) -> None:
        """Write buffered counters, save the indexes and checkpoint the database."""
        self._flush_usage_if_due(force=True)
        with self._lock.write():
            self.store.save()

    def export(self, folder: str | os.PathLike[str]) -> Path:
        self._flush_usage_if_due(force=True)
        with self._lock.read():
            return self.store.export(folder)

    def import_bank(self, folder: str | os.PathLike[str], reembed: bool = False) -> dict[int, int]:
        with self._lock.write():
            return self.store.import_bank(folder, reembed=reembed)

    def check_consistency(self) -> dict[str, Any]:
        with self._lock.read():
            return self.store.check_consistency()

    def stats(self) -> dict[str, Any]:
        batches = max(1, self.batch_stats["batches"])
        return {
            **self.batch_stats,
            "mean_batch_size": self.batch_stats["queries"] / batches,
            "cache_hits": self._cache.hits,
            "cache_misses": self._cache.misses,
        }

    def close(self) -> None:
        """Finish queued queries, write counters, save and close the store (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(_STOP)
        self._batcher.join(timeout=30)
        self._pool.shutdown(wait=True)
        self._background.shutdown(wait=True)
        with contextlib.suppress(Exception):
            self._flush_usage_if_due(force=True)
        with self._lock.write():
            self.store.close()

    def __enter__(self) -> ExperienceManager:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
