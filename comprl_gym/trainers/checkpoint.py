"""Checkpoints that resume a run exactly: weights, optimisers, RNG states, store, counters.

A checkpoint is a folder ``<output_dir>/checkpoints/step-<N>/`` holding ``trainer.pt`` (every
torch state and counter), ``rng.pt`` (Python, NumPy and torch generator states, from :mod:`comprl_gym.seeding`) and
``experience/`` (a copy of the experience store). It is built in a temporary folder and
renamed into place, and ``latest`` (a small text file, itself replaced atomically) names the
newest complete one, so a crash mid-save leaves the previous checkpoint intact.

Example:
    >>> import tempfile
    >>> root = tempfile.mkdtemp()
    >>> ckpt = CheckpointManager(root)
    >>> path = ckpt.save(3, {"counter": 3})
    >>> ckpt.latest_step(), ckpt.load()["state"]["counter"]
    (3, 3)
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from comprl_gym.core import DataError
from comprl_gym.seeding import capture_rng_state
from comprl_gym.utils import atomic_write_text

logger = logging.getLogger(__name__)


class CheckpointManager:
    """Saves and finds checkpoints under ``<root>/checkpoints``; keeps the newest ``keep``."""

    def __init__(self, root: str | Path, keep: int = 1):
        self.folder = Path(root) / "checkpoints"
        self.keep = keep

    def latest_step(self) -> int | None:
        pointer = self.folder / "latest"
        if not pointer.exists():
            return None
        name = pointer.read_text().strip()
        if not (self.folder / name / "trainer.pt").exists():
            raise DataError(
                self.folder / name, "the checkpoint named by 'latest' is missing or incomplete"
            )
        return int(name.split("-")[-1])

    def save(self, step: int, state: dict[str, Any], store_dir: str | Path | None = None) -> Path:
        """Write checkpoint ``step`` atomically (``state`` is anything ``torch.save`` takes)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        final = self.folder / f"step-{step}"
        tmp = Path(tempfile.mkdtemp(dir=self.folder, prefix=f".step-{step}."))
        try:
            torch.save({"step": step, "state": state}, tmp / "trainer.pt")
            torch.save(capture_rng_state(), tmp / "rng.pt")
            if store_dir is not None and Path(store_dir).exists():
                shutil.copytree(store_dir, tmp / "experience")
            if final.exists():
                shutil.rmtree(final)
            tmp.rename(final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        atomic_write_text(self.folder / "latest", final.name + "\n")
        self._prune(step)
        logger.info("saved checkpoint %s", final)
        return final

    def load(self, step: int | None = None) -> dict[str, Any]:
        """The saved ``{"step", "state", "rng", "path"}`` (newest when ``step`` is None)."""
        step = self.latest_step() if step is None else step
        if step is None:
            raise DataError(self.folder, "no checkpoint to resume from")
        path = self.folder / f"step-{step}"
        try:
            # Onto the CPU: load_state_dict copies weights and optimiser state onto the
            # devices of the model being resumed, so a GPU checkpoint resumes anywhere.
            data = torch.load(path / "trainer.pt", weights_only=False, map_location="cpu")
            data["rng"] = torch.load(path / "rng.pt", weights_only=False, map_location="cpu")
        except (OSError, RuntimeError, EOFError) as exc:
            raise DataError(path, f"cannot read the checkpoint: {exc}") from exc
        data["path"] = path
        return data

    def restore_store(self, step: int, store_dir: str | Path) -> None:
        """Replace ``store_dir`` by the store copy saved with checkpoint ``step``."""
        saved = self.folder / f"step-{step}" / "experience"
        store_dir = Path(store_dir)
        if store_dir.exists():
            shutil.rmtree(store_dir)
        if saved.exists():
            shutil.copytree(saved, store_dir)

    def _prune(self, newest: int) -> None:
        steps = sorted(
            int(p.name.split("-")[-1])
            for p in self.folder.glob("step-*")
            if p.is_dir() and p.name.split("-")[-1].isdigit()
        )
        for old in steps[: max(0, len(steps) - self.keep)]:
            if old != newest:
                shutil.rmtree(self.folder / f"step-{old}", ignore_errors=True)
