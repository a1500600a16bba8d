"""Training metrics: one JSON line per iteration, optionally mirrored to TensorBoard.

Example:
    >>> import tempfile, json, pathlib
    >>> folder = tempfile.mkdtemp()
    >>> log = MetricsLogger(folder, tensorboard=False)
    >>> log.log(1, {"success": 0.5, "minihack/success": 1.0})
    >>> log.close()
    >>> json.loads((pathlib.Path(folder) / "metrics.jsonl").read_text())["success"]
    0.5
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from comprl_gym.utils import atomic_write_text

logger = logging.getLogger(__name__)

#: A training run's metrics log: one JSON line per iteration.
METRICS_FILE = "metrics.jsonl"

#: Below this mean entropy (nats per trained token) an update's policy is all but
#: deterministic at the tokens it trains: its samples no longer explore, and a policy
#: gradient on them can no longer move it elsewhere.
ENTROPY_FLOOR = 0.02
#: At or above this fraction of groups with one reward the actor's batch carries almost no
#: signal (every rollout of a task ended alike).
ZERO_VARIANCE_CEILING = 0.9


def collapse_warnings(record: dict[str, Any]) -> list[str]:
    """What in one iteration's metrics says training has collapsed: an entropy under
    :data:`ENTROPY_FLOOR` (actor or extractor, on an update that trained some token), or a
    zero-variance fraction at :data:`ZERO_VARIANCE_CEILING` or more.

    Example:
        >>> collapse_warnings({"actor/entropy": 0.001, "actor/tokens": 12})  # doctest: +ELLIPSIS
        ['actor policy entropy 0.001 nats per trained token (under 0.02): ...']
        >>> collapse_warnings({"actor/entropy": 0.5, "actor/tokens": 12, "extractor/entropy": 0.0})
        []
    """
    out = []
    for who in ("actor", "extractor"):
        entropy = record.get(f"{who}/entropy")
        if entropy is not None and record.get(f"{who}/tokens", 0) and entropy < ENTROPY_FLOOR:
            out.append(
                f"{who} policy entropy {entropy:.3g} nats per trained token (under "
                f"{ENTROPY_FLOOR}): its samples no longer explore; consider a lower lr, "
                f"{who}.entropy_coef or {who}.score: sampled"
            )
    for key, value in record.items():
        if key.endswith("sensitivity/inverted") and value == 0:
            out.append(
                f"{key} is 0: the actor's first move is the same whatever its lesson says "
                "(lesson-deaf)"
            )
    zero = record.get("actor/zero_variance_groups")
    if zero is not None and zero == zero and zero >= ZERO_VARIANCE_CEILING:
        out.append(
            f"{zero:.0%} of the actor's task groups ended with one reward for every rollout: "
            "they carry no learning signal"
        )
    return out


def warn_on_collapse(record: dict[str, Any], iteration: int) -> None:
    """Log :func:`collapse_warnings` of iteration ``iteration``'s ``record`` as warnings."""
    for message in collapse_warnings(record):
        logger.warning("iteration %s: %s", iteration, message)


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The records of a metrics log (``metrics.jsonl``), one per line, in order."""
    text = Path(path).read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


class MetricsLogger:
    """Append-only ``metrics.jsonl`` plus TensorBoard scalars under ``<folder>/tensorboard``.

    Each line is flushed and fsync'ed, so a crash loses at most the line being written. On
    resume, lines with a step beyond the checkpoint are dropped (:meth:`truncate_after`).
    """

    def __init__(self, folder: str | Path, tensorboard: bool = True):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.path = self.folder / METRICS_FILE
        self._writer = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._writer = SummaryWriter(str(self.folder / "tensorboard"))
            except ImportError:  # pragma: no cover - tensorboard is in the train extra
                logger.warning("tensorboard is not installed; metrics go to JSONL only")

    def log(self, step: int, values: dict[str, Any]) -> None:
        record = {"step": step, "time": time.time(), **values}
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, sort_keys=True) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        if self._writer is not None:
            for key, value in values.items():
                if isinstance(value, int | float) and not isinstance(value, bool):
                    self._writer.add_scalar(key, value, step)
            self._writer.flush()

    def truncate_after(self, step: int) -> None:
        """Drop records logged after ``step`` (they belong to a run that was not checkpointed)."""
        if not self.path.exists():
            return
        kept = [
            line
            for line in self.path.read_text(encoding="utf-8").splitlines()
            if line.strip() and json.loads(line).get("step", 0) <= step
        ]
        atomic_write_text(self.path, "".join(line + "\n" for line in kept))

    def read(self) -> list[dict[str, Any]]:
        return read_metrics(self.path) if self.path.exists() else []

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
