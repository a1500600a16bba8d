"""Maintenance: the write-side upkeep of an experience store.

* merging: slide over the store in windows of related experiences and let the extractor keep,
  merge or drop them (:meth:`Maintenance.merge`), on one schedule (:meth:`Maintenance.maybe_merge`,
  every ``merge_interval_steps`` actor steps); a merged entry inherits the tallies of what it
  merged;
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
from collections.abc import Callable, Sequence

from comprl_gym.experience.config import ExperienceConfig
from comprl_gym.experience.merge import MergeReport, plan_dedupe, window_for
from comprl_gym.experience.operations import (
    MERGE_KINDS,
    ExtractorOutputError,
    Operation,
    parse_merge_output,
)
from comprl_gym.experience.records import DROPPED, MERGED, Experience, Provenance
from comprl_gym.experience.rwlock import RWLock
from comprl_gym.experience.store import ExperienceStore

logger = logging.getLogger(__name__)

#: ``extractor(window) -> str | list[Operation]``: the merge call (text in the merge format).
MergeExtractor = Callable[[list[Experience]], "str | list[Operation]"]


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
            families = self.store.active_families()
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
            alive = self.store.active_among(cursor, [e.id for e in window])
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
                # the merged entry inherits the tallies of what it merged (as committed now)
                self.store.inherit(cursor, new_id, [s.id for s in sources])
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
