"""Maintenance: the write-side upkeep of an experience store.

* merging as the reference does it (:meth:`Maintenance.merge`): every entry of a family, in
  store order, in sequential chunks of ``merge_window``, each chunk's merged items carried into
  the next; on one schedule (:meth:`Maintenance.maybe_merge`, every ``merge_interval_steps``
  actor steps); a merged entry inherits the tallies of what it merged;
* de-duplication of near-identical experiences;
* the one training-weight policy of extractor samples: 0 inside the cooldown
  (``train_cooldown_steps``), else ``(1 + training_count) ** -train_weight_power``.

Every change is one store transaction under the manager's write lock.

Example (the weight policy, worked by hand):
    >>> import tempfile
    >>> from comprl_gym.experience import ExperienceConfig, ExperienceStore
    >>> from comprl_gym.experience.rwlock import RWLock
    >>> config = ExperienceConfig(train_weight_power=1.0, train_cooldown_steps=2)
    >>> store = ExperienceStore(tempfile.mkdtemp(), config=config)
    >>> [eid] = store.add_texts(["## Title: Stairs\\n## Description: rooms\\n## Content: walk to >"])
    >>> upkeep = Maintenance(store, config, RWLock())
    >>> store.mark_trained([eid], actor_step=5)
    >>> upkeep.training_weights([eid], actor_step=6), upkeep.training_weights([eid], actor_step=7)
    ([0.0], [0.5])
    >>> store.close()
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from comprl_gym.experience.config import ExperienceConfig
from comprl_gym.experience.merge import MergeReport, ScopeMerge, plan_dedupe
from comprl_gym.experience.operations import (
    ExperienceText,
    parse_experience_text,
    parse_merge_items,
)
from comprl_gym.experience.prompts import memory_text
from comprl_gym.experience.records import MERGED, Experience, Provenance
from comprl_gym.experience.rwlock import RWLock
from comprl_gym.experience.store import ExperienceStore

logger = logging.getLogger(__name__)

#: ``extractor(texts) -> str | list[str]``: one merge call on a chunk of knowledge texts; the
#: reply in the merge format (``<<<KNOWLEDGE_ITEM>>>`` blocks or ``return``), or the items.
MergeExtractor = Callable[[list[str]], "str | list[str]"]
#: A merge pass as a generator: yields each chunk's texts, is sent the reply, returns the report.
MergeSteps = Generator[list[str], Any, MergeReport]


def run_merge(steps: Any, extractor: MergeExtractor) -> Any:
    """Drive a merge pass (:meth:`Maintenance.merge_steps` or anything with ``__next__`` and
    ``send``) with ``extractor``: each chunk goes to it, its reply (or the exception it raised)
    goes back; returns what the pass returns (the report, or ``None`` when no merge was due)."""
    try:
        texts = next(steps)
        while True:
            try:
                reply: Any = extractor(texts)
            except Exception as exc:  # the pass records the failure and keeps the chunk
                reply = exc
            texts = steps.send(reply)
    except StopIteration as stop:
        return stop.value


@dataclass
class _Item:
    """A knowledge item of a merge pass: a stored entry, or a merged text not yet stored.

    ``sources`` are the stored entries whose tallies the item carries (itself for a stored one).
    """

    text: str
    vector: np.ndarray
    sources: tuple[int, ...]
    parsed: ExperienceText | None = None

    @property
    def stored(self) -> bool:
        return self.parsed is None


class Maintenance:
    """Merging, de-duplication and training weights of one store.

    Args:
        store: the open store.
        config: merge, dedupe and training-weight knobs.
        lock: the manager's read/write lock.
    """

    def __init__(self, store: ExperienceStore, config: ExperienceConfig, lock: RWLock):
        self.store = store
        self.config = config
        self._lock = lock

    def training_weights(self, ids: Sequence[int], actor_step: int) -> list[float]:
        """Per-id sample weight: 0 inside the cooldown, else ``(1 + training_count)**-power``."""
        with self._lock.read():
            found = {e.id: e for e in self.store.get(list(ids))}
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
                if self.store.fold_into(cursor, loser, keeper, MERGED):
                    retired.append(loser)
        logger.info(
            "dedupe retired %d near-duplicate experiences (threshold %.3f)", len(retired), threshold
        )
        return retired

    def merge(
        self, extractor: MergeExtractor, actor_step: int = 0, policy_version: str = ""
    ) -> MergeReport:
        """Merge every family with two or more entries; see :meth:`merge_steps`."""
        return run_merge(self.merge_steps(actor_step, policy_version), extractor)

    def merge_steps(self, actor_step: int = 0, policy_version: str = "") -> MergeSteps:
        """Merge every family with two or more entries, as the reference does.

        A generator: it yields each chunk of knowledge texts for one merge call and is sent
        the reply (``str`` or items; an ``Exception`` for a failed call), so the extractor can
        live elsewhere than the store (the experience service answers calls from the caller's
        side); :func:`run_merge` drives it with a local extractor. It returns the report.

        Reference ``async_memory_manager.py::merge_memory`` / ``_merge_single_task``
        (l.2353-2642): the entries of a scope in store order are cut into chunks of
        ``merge_window`` (``max_merging_item_per_call``); chunk i goes to the extractor and the
        items it answers are appended to chunk i+1, so knowledge rolls forward and the last
        chunk's answer is the result. A ``return`` or an unparseable answer keeps that chunk as
        it is (its items are not carried). The family's result is applied in one transaction,
        only if every entry it replaces is still active (the reference's optimistic check).

        The reference keeps no per-entry tallies; ours are the truth for r(m), so every input
        of a successful call hands its tallies to exactly one output, the nearest by cosine
        similarity of the embeddings (discarded items included): tallies are conserved, and a
        merged entry inherits those of the entries it absorbed.
        """
        report = MergeReport()
        with self._lock.read():
            families = self.store.active_families()
        scopes: dict[str, list[int]] = {}
        for eid, key in families.items():
            scopes.setdefault(key, []).append(eid)
        for key, ids in scopes.items():
            if len(ids) >= 2:
                yield from self._merge_scope(key, ids, report, actor_step, policy_version)
        return report

    def _merge_scope(
        self,
        key: str,
        ids: list[int],
        report: MergeReport,
        actor_step: int,
        policy_version: str,
    ) -> Generator[list[str], Any, None]:
        cfg = self.config
        with self._lock.read():
            entries = {e.id: e for e in self.store.get(ids)}
            vectors = self.store.vectors(ids)
        items = [_Item(memory_text(entries[i]), vectors[n], (i,)) for n, i in enumerate(ids)]
        chunks = [items[i : i + cfg.merge_window] for i in range(0, len(items), cfg.merge_window)]
        scope = ScopeMerge(family=key)
        final: list[_Item] = []
        for n, chunk in enumerate(chunks):
            scope.calls.append(report.calls)
            report.calls += 1
            try:
                reply = yield [item.text for item in chunk]
                if isinstance(reply, Exception):
                    raise reply
                texts = (
                    parse_merge_items(reply, cfg.max_text_chars)
                    if isinstance(reply, str)
                    else [parse_experience_text(t, cfg.max_text_chars) for t in reply]
                )
            except Exception as exc:  # a bad answer keeps its chunk
                report.failed_calls += 1
                report.errors.append(str(exc))
                logger.warning("merge call on %d items left them unchanged: %s", len(chunk), exc)
                texts = []
            if not texts:  # ``return`` or a failure: keep the chunk as it is
                final.extend(chunk)
                continue
            scope.answer_call = scope.calls[-1]
            outputs = self._attribute(chunk, texts)
            if n + 1 < len(chunks):
                chunks[n + 1].extend(outputs)
            else:
                final.extend(outputs)
        new_items = [item for item in final if not item.stored]
        if new_items:
            self._apply_scope(scope, new_items, entries, report, actor_step, policy_version)
        report.scopes.append(scope)

    def _attribute(self, chunk: list[_Item], texts: list[ExperienceText]) -> list[_Item]:
        """The merged items, each with the sources of the inputs nearest to it."""
        parsed = self.store.to_texts(texts)
        vectors = self.store.embed_texts(parsed)
        nearest = np.argmax(np.stack([item.vector for item in chunk]) @ vectors.T, axis=1)
        return [
            _Item(
                memory_text(parsed[k]),
                vectors[k],
                tuple(s for item, j in zip(chunk, nearest) if j == k for s in item.sources),
                parsed[k],
            )
            for k in range(len(parsed))
        ]

    def _apply_scope(
        self,
        scope: ScopeMerge,
        new_items: list[_Item],
        entries: dict[int, Experience],
        report: MergeReport,
        actor_step: int,
        policy_version: str,
    ) -> None:
        replaced = [s for item in new_items for s in item.sources]
        family = entries[next(iter(entries))].env_family
        with self._lock.write(), self.store.transaction() as cursor:
            if set(replaced) - self.store.active_among(cursor, replaced):
                report.skipped_scopes += 1  # another writer changed the scope meanwhile
                return
            for item in new_items:
                sources = [entries[s] for s in item.sources]
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
                    [item.parsed],  # type: ignore[list-item]
                    item.vector[None, :],
                    provenance,
                    family,
                    merged_from=[list(item.sources)],
                    kind="merge",
                )
                if item.sources:
                    # the merged entry inherits the tallies of what it merged (as committed now)
                    self.store.inherit(cursor, new_id, list(item.sources))
                    self.store.retire(
                        cursor, list(item.sources), MERGED, replaced_by=new_id, kind="replaced"
                    )
                scope.new_ids.append(new_id)
                report.merged[new_id] = list(item.sources)
        scope.retired = replaced

    def maybe_merge(
        self, actor_step: int, extractor: MergeExtractor, policy_version: str = ""
    ) -> MergeReport | None:
        """Run :meth:`merge` when ``merge_interval_steps`` actor steps passed since the last one."""
        return run_merge(self.maybe_merge_steps(actor_step, policy_version), extractor)

    def maybe_merge_steps(
        self, actor_step: int, policy_version: str = ""
    ) -> Generator[list[str], Any, MergeReport | None]:
        """:meth:`merge_steps` when a merge is due; returns ``None`` at once when it is not."""
        interval = self.config.merge_interval_steps
        if interval <= 0:
            return None
        with self._lock.read():
            last = self.store.get_meta("last_merge_step")
        if last is not None and actor_step - int(last) < interval:
            return None
        with self._lock.write(), self.store.transaction() as cursor:
            self.store.set_meta({"last_merge_step": str(int(actor_step))}, cursor)
        return (yield from self.merge_steps(actor_step, policy_version))
