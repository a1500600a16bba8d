"""The ExperienceManager: the one door to the experience store, for actors and extractors alike.

It serialises access with one writer-priority read/write lock and hands each job to its owner:

* :class:`~comprl_gym.experience.retrieval.Retriever`: batched, cached, diversified queries
  that never make the actor wait on writers for long;
* :class:`~comprl_gym.experience.maintenance.Maintenance`: merging (on one schedule),
  de-duplication and the one training-weight policy;
* the store itself for writes (extractor operations, outcomes, training marks): one SQLite
  transaction each, all or nothing, with provenance.

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
import contextlib
import dataclasses
import inspect
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from comprl_gym.experience import prompts
from comprl_gym.experience.config import ExperienceConfig
from comprl_gym.experience.embedding import Embedder, clean_text
from comprl_gym.experience.maintenance import Maintenance, MergeExtractor
from comprl_gym.experience.merge import CleanupReport, MergeReport
from comprl_gym.experience.operations import (
    EXTRACT_KINDS,
    ApplyResult,
    ExtractorOutputError,
    Operation,
    parse_extractor_output,
)
from comprl_gym.experience.records import (
    EXPIRED,
    MERGED,
    NO_PROVENANCE,
    Experience,
    Provenance,
    Retrieved,
)
from comprl_gym.experience.retrieval import Retriever
from comprl_gym.experience.rwlock import RWLock
from comprl_gym.experience.store import ExperienceStore

logger = logging.getLogger(__name__)


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
        self._gate = threading.Condition()
        self._suspensions = 0  # writes wait while > 0 (see suspended())
        self.retrieval = Retriever(store, self.config, self._lock)
        self.maintenance = Maintenance(store, self.config, self._lock)
        self._closed = False

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
        return self.retrieval.retrieve(query, k, env_family, diversify, record, timeout)

    def retrieve_batch(
        self,
        queries: Sequence[str],
        k: int | None = None,
        env_family: str | None = None,
        diversify: bool | None = None,
        record: bool = True,
        timeout: float | None = 60.0,
    ) -> list[list[Retrieved]]:
        return self.retrieval.retrieve_batch(queries, k, env_family, diversify, record, timeout)

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
        return self.retrieval.retrieve_by_vector(vector, k, env_family, diversify, record, timeout)

    async def aretrieve(
        self,
        query: str,
        k: int | None = None,
        env_family: str | None = None,
        diversify: bool | None = None,
        record: bool = True,
    ) -> list[Retrieved]:
        """Async :meth:`retrieve`: awaits the batch without blocking the event loop."""
        return await self.retrieval.aretrieve(query, k, env_family, diversify, record)

    async def aretrieve_batch(
        self,
        queries: Sequence[str],
        k: int | None = None,
        env_family: str | None = None,
        diversify: bool | None = None,
        record: bool = True,
    ) -> list[list[Retrieved]]:
        return await self.retrieval.aretrieve_batch(queries, k, env_family, diversify, record)

    @property
    def batch_stats(self) -> dict[str, int]:
        return self.retrieval.batch_stats

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

    # ================================================================== writes
    def add(
        self,
        items: Sequence[str | dict[str, Any]],
        provenance: Provenance = NO_PROVENANCE,
        env_family: str | None = None,
        vectors: np.ndarray | None = None,
        request_id: str | None = None,
    ) -> list[int]:
        """Add experiences (one atomic write); returns their ids. ``vectors`` skips embedding.

        ``request_id`` makes the write idempotent: a second call with the same id (a retry of
        a call whose answer was lost) changes nothing and returns the first call's ids.
        """
        texts = self.store.to_texts(items)
        if not texts:
            return []
        vectors = (
            self.store.embed_texts(texts)
            if vectors is None
            else np.asarray(vectors, dtype=np.float32)
        )
        return self._write(
            request_id,
            lambda cursor: self.store.insert(cursor, texts, vectors, provenance, env_family),
        )

    def _write(
        self,
        request_id: str | None,
        write: Callable[[Any], Any],
        encode: Callable[[Any], Any] = lambda result: result,
        decode: Callable[[Any], Any] = lambda recorded: recorded,
    ) -> Any:
        """Run ``write(cursor)`` in one transaction under the write lock; with a ``request_id``
        the id and the (``encode``d, JSON-able) result are recorded in that same transaction, and
        a repeated id returns the recorded result (``decode``d) without writing again."""
        with self._gate:
            self._gate.wait_for(lambda: self._suspensions == 0)
        with self._lock.write(), self.store.transaction() as cursor:
            if request_id is not None:
                done, recorded = self.store.request_result(cursor, request_id)
                if done:
                    return decode(recorded)
            result = write(cursor)
            if request_id is not None:
                self.store.record_request(cursor, request_id, encode(result))
            return result

    def apply_operations(
        self,
        operations: Sequence[Operation],
        shown_ids: Sequence[int],
        provenance: Provenance = NO_PROVENANCE,
        env_family: str | None = None,
        request_id: str | None = None,
    ) -> ApplyResult:
        """Apply extractor operations atomically; ``idx`` in them index ``shown_ids`` (1-based).

        ``update`` writes a NEW experience whose ``merged_from`` lists the replaced ids and
        tombstones those (reference ``_execute_functional_operations``: delete the targets, add
        one entry). On any error nothing is changed and ``ok`` is False. ``request_id``: as in
        :meth:`add`.
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

            def write(cursor: Any) -> ApplyResult:
                result = ApplyResult()
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
                        if target_family is None and targets:
                            target_family = self.store.family_of(cursor, targets[0])
                        [new_id] = self.store.insert(
                            cursor,
                            [texts[w]],
                            vectors[w : w + 1],
                            provenance,  # type: ignore[index]
                            target_family,
                            merged_from=[targets],
                            kind="update",
                        )
                        if targets:
                            self.store.retire(
                                cursor, targets, MERGED, replaced_by=new_id, kind="replaced"
                            )
                        result.updated[new_id] = targets
                        w += 1
                    else:
                        self.store.add_votes(cursor, targets, up=op.kind == "upvote")
                        result.voted.extend(targets)
                return result

            return self._write(request_id, write, dataclasses.asdict, _apply_result_from_dict)
        except Exception as exc:
            logger.warning("extractor operations rejected, nothing changed: %s", exc)
            return ApplyResult(ok=False, error=str(exc))

    def apply_extractor_output(
        self,
        output: str,
        shown_ids: Sequence[int],
        provenance: Provenance = NO_PROVENANCE,
        env_family: str | None = None,
        request_id: str | None = None,
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
        return self.apply_operations(operations, shown_ids, provenance, env_family, request_id)

    def report_outcome(
        self, experience_ids: Sequence[int], won: bool, request_id: str | None = None
    ) -> None:
        """One episode used ``experience_ids`` and was won or lost: ``uses += 1``, ``wins += won``
        (each id once). ``request_id``: as in :meth:`add`."""
        if experience_ids:
            self._write(request_id, lambda c: self.store.add_outcomes(c, experience_ids, won))

    def mark_trained(
        self, ids: Sequence[int], actor_step: int, request_id: str | None = None
    ) -> None:
        """Record that the extractor was trained on samples that wrote ``ids`` at ``actor_step``.
        ``request_id``: as in :meth:`add`."""
        if ids:
            self._write(request_id, lambda c: self.store.add_training_marks(c, ids, actor_step))

    # ------------------------------------------------------------------ lifecycle
    def delete(self, ids: Sequence[int]) -> list[int]:
        """Remove lessons (any status) for good: rows and index entries; each a ``delete``
        revision keeping a snapshot. Returns the ids removed (unknown ones are skipped, so a
        repeat changes nothing)."""
        return self._write(None, lambda c: self.store.remove(c, ids, "delete"))

    def expire(self, ids: Sequence[int]) -> list[int]:
        """Hide active lessons: out of retrieval and the index, row and vector kept (status
        ``expired``, an ``expire`` revision each); :meth:`restore` brings them back."""
        return self._write(None, lambda c: self.store.retire(c, ids, EXPIRED, kind="expire"))

    def restore(self, ids: Sequence[int]) -> list[int]:
        """Bring expired lessons back (a ``restore`` revision each); returns those restored."""
        return self._write(None, lambda c: self.store.restore(c, ids))

    def cleanup(self, dry_run: bool = True, now: float | None = None) -> CleanupReport:
        """Expire lessons idle past ``expire_after_s``, evict those over ``max_entries``
        (``eviction_policy`` order) and purge merged tombstones retired
        ``tombstone_retention_s`` ago, in one transaction (a ``purge`` revision each, keeping
        the row's snapshot). With ``dry_run`` (the default) nothing changes and the report lists
        what would be removed; ``now`` (a time) is for tests."""
        now = time.time() if now is None else float(now)
        if dry_run:
            with self._lock.read():
                reader = self.store.database.reader()
                expire, evict = self.store.plan_cleanup(reader, now)
                purge = self.store.plan_purge(reader, now)
                return CleanupReport(True, expire, evict, self.store.revision, purge)

        def write(cursor: Any) -> CleanupReport:
            expire, evict = self.store.plan_cleanup(cursor, now)
            purge = self.store.plan_purge(cursor, now)
            self.store.retire(cursor, expire, EXPIRED, kind="expire")
            self.store.remove(cursor, evict, "evict", {"policy": self.config.eviction_policy})
            retention = self.config.tombstone_retention_s
            self.store.remove(cursor, purge, "purge", {"retention_s": retention})
            return CleanupReport(False, expire, evict, purged=purge)

        report = self._write(None, write)
        report.revision = self.revision
        return report

    # ------------------------------------------------------------------ revisions and fences
    @property
    def revision(self) -> int:
        """The latest committed store revision (see :attr:`ExperienceStore.revision`)."""
        return self.store.revision

    def revisions(self, experience_id: int | None = None, since: int = 0) -> list[dict[str, Any]]:
        """The kept revisions after ``since`` (one lesson's when ``experience_id`` is given)."""
        with self._lock.read():
            return self.store.revisions(experience_id, since)

    def check_revisions(self) -> dict[str, Any]:
        with self._lock.read():
            return self.store.check_revisions()

    def fence(self) -> int:
        """A write fence, as the reference takes one before the extractor's asynchronous
        training step: the buffered retrieval counters are written and every write under way
        finishes; returns the revision the store is at. The actor waits only while the fence
        holds the write lock (the counters and one empty critical section)."""
        self.retrieval.flush_usage()
        with self._lock.write():
            return self.store.revision

    @contextlib.contextmanager
    def suspended(self) -> Iterator[int]:
        """Hold writes (adds, operations, outcomes, lifecycle) while the block runs, after a
        :meth:`fence`; reads and retrieval go on. Yields the fenced revision: the store stays at
        it until the block ends (the reference suspends its manager while the extractor trains).

        Example:
            >>> import tempfile
            >>> with ExperienceManager(tempfile.mkdtemp()) as manager:
            ...     with manager.suspended() as revision:
            ...         revision == manager.revision
            True
        """
        with self._gate:
            self._suspensions += 1
        try:
            yield self.fence()
        finally:
            with self._gate:
                self._suspensions -= 1
                self._gate.notify_all()

    # ------------------------------------------------------------------ maintenance
    def training_weights(self, ids: Sequence[int], actor_step: int) -> list[float]:
        """Per-id sample weight: 0 inside the cooldown, else ``(1 + training_count)**-power``."""
        return self.maintenance.training_weights(ids, actor_step)

    def sample_weights(self, id_groups: Sequence[Sequence[int]], actor_step: int) -> list[float]:
        """Weight of each extractor sample (the smallest weight of the ids it wrote)."""
        return self.maintenance.sample_weights(id_groups, actor_step)

    def select_for_training(self, ids: Sequence[int], actor_step: int) -> list[tuple[int, float]]:
        """``(id, weight)`` for the ids with a positive training weight."""
        return self.maintenance.select_for_training(ids, actor_step)

    def dedupe(self, threshold: float | None = None) -> list[int]:
        """Tombstone near-duplicates; see :meth:`Maintenance.dedupe`."""
        return self.maintenance.dedupe(threshold)

    def merge(
        self, extractor: MergeExtractor, actor_step: int = 0, policy_version: str = ""
    ) -> MergeReport:
        """Merge each family in sequential chunks; see :meth:`Maintenance.merge`."""
        return self.maintenance.merge(extractor, actor_step, policy_version)

    def maybe_merge(
        self, actor_step: int, extractor: MergeExtractor, policy_version: str = ""
    ) -> MergeReport | None:
        """:meth:`merge` when ``merge_interval_steps`` actor steps passed since the last one."""
        return self.maintenance.maybe_merge(actor_step, extractor, policy_version)

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
        return self.compose_answer(question, hits, refiner, context), [h.id for h in hits]

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
        answer = await loop.run_in_executor(
            None, self.compose_answer, question, hits, refiner, context
        )
        return answer, [h.id for h in hits]

    @staticmethod
    def compose_answer(
        question: str, hits: list[Retrieved], refiner: Any, context: dict[str, Any] | None
    ) -> str:
        """The ``search_and_ask`` answer to ``question`` from its hits: the ``refiner``'s text
        (e.g. the extractor) or, without one or when it fails, the retrieved lessons."""
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

    async def areport_outcome(
        self, experience_ids: Sequence[int], won: bool, request_id: str | None = None
    ) -> None:
        await self._in_thread(self.report_outcome, experience_ids, won, request_id)

    # ------------------------------------------------------------------ persistence
    def save(self) -> None:
        """Write buffered counters, save the indexes and checkpoint the database."""
        self.retrieval.flush_usage()
        with self._lock.write():
            self.store.save()

    def export(self, folder: str | os.PathLike[str]) -> Path:
        self.retrieval.flush_usage()
        with self._lock.read():
            return self.store.export(folder)

    def import_bank(self, folder: str | os.PathLike[str], reembed: bool = False) -> dict[int, int]:
        with self._lock.write():
            return self.store.import_bank(folder, reembed=reembed)

    def check_consistency(self) -> dict[str, Any]:
        with self._lock.read():
            return self.store.check_consistency()

    def stats(self) -> dict[str, Any]:
        """Retrieval batching and cache counters, and the store's cap: ``evicted`` (lessons
        evicted over the store's life), ``max_entries`` and ``eviction_policy``."""
        batches = max(1, self.batch_stats["batches"])
        with self._lock.read():
            evicted = self.store.evicted_count()
        return {
            **self.batch_stats,
            "evicted": evicted,
            "max_entries": self.config.max_entries,
            "eviction_policy": self.config.eviction_policy,
            "mean_batch_size": self.batch_stats["queries"] / batches,
            "cache_hits": self.retrieval.cache.hits,
            "cache_misses": self.retrieval.cache.misses,
        }

    def close(self) -> None:
        """Finish queued queries, write counters, save and close the store (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self.retrieval.close()
        with self._lock.write():
            self.store.close()

    def __enter__(self) -> ExperienceManager:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _apply_result_from_dict(recorded: dict[str, Any]) -> ApplyResult:
    """The ApplyResult a recorded (JSON) one stood for (JSON made the ``updated`` keys text)."""
    return ApplyResult(
        ok=recorded["ok"],
        added=list(recorded["added"]),
        updated={int(k): list(v) for k, v in recorded["updated"].items()},
        voted=list(recorded["voted"]),
        error=recorded["error"],
    )
