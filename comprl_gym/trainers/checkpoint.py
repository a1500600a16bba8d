"""Checkpoints that resume a run exactly: weights, optimisers, RNG states, store, counters.

:class:`CheckpointManager` writes and finds the folders; :class:`Checkpointing` is the
trainer's side (what goes into one, and putting all of it back on resume).

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
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from comprl_gym.core import DataError
from comprl_gym.evaluation.provenance import file_sha256, portable_path
from comprl_gym.seeding import capture_rng_state, restore_rng_state
from comprl_gym.utils import atomic_write_text

if TYPE_CHECKING:  # the trainer's parts, named only in Checkpointing's declarations
    import random

    from comprl_gym.env_factory import EnvSpec
    from comprl_gym.lessons.memories import ExemplarMemory
    from comprl_gym.trainers.background import ExperienceWorker, WaitClock
    from comprl_gym.trainers.config import TrainConfig
    from comprl_gym.trainers.extractor import ExperienceExtractor
    from comprl_gym.trainers.metrics import MetricsLogger
    from comprl_gym.trainers.policy import PolicyOptimizer

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


class Checkpointing:
    """The trainer's checkpoints: its whole state saved, and an exact resume (a part of
    :class:`~comprl_gym.trainers.base.Trainer`, whose ``__init__`` resumes when
    ``config.resume`` finds a checkpoint)."""

    # Set by Trainer.__init__; the store's manager is ExperienceSetup's, the push EngineSetup's.
    config: TrainConfig
    iteration: int
    rollouts_done: int
    task_rng: random.Random
    task_deck: list[int]
    revisit_next: list[tuple[str, int]]
    actor: PolicyOptimizer
    evaluation_before: dict[str, Any] | None
    warmup_record: dict[str, Any] | None
    actor_performance: dict[str, list[float]]
    tasks_played: dict[str, dict[str, int]]
    resumed_from: dict[str, str]
    manager: Any
    extractor: ExperienceExtractor | None
    memory: ExemplarMemory | None
    worker: ExperienceWorker | None
    merges: int
    clock: WaitClock
    metrics: MetricsLogger
    checkpoints: CheckpointManager
    _envs: dict[tuple[EnvSpec, int], Any]
    _open_manager: Callable[[], Any]
    _close_manager: Callable[[], None]
    push_weights: Callable[[], None]

    if TYPE_CHECKING:  # ExperienceSetup's property

        @property
        def store_dir(self) -> Path: ...

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {
            "config": self.config.to_dict(),
            "iteration": self.iteration,
            "rollouts_done": self.rollouts_done,
            "task_rng": self.task_rng.getstate(),
            "task_deck": list(self.task_deck),
            "revisit_next": [list(task) for task in self.revisit_next],
            "actor": self.actor.state_dict(),
            "evaluation_before": self.evaluation_before,
            "warmup": self.warmup_record,
            "actor_performance": self.actor_performance,
            "tasks_played": self.tasks_played,
        }
        if self.extractor is not None:
            state["extractor"] = self.extractor.state_dict()
            state["merges"] = self.merges
        if self.memory is not None:
            state["memory"] = self.memory.state_dict()
        return state

    def save_checkpoint(self) -> Path:
        if self.worker is not None:
            with self.clock.measure("checkpoint_drain"):
                self.worker.drain()
        store = None
        state = self.state_dict()
        if self.manager is not None:
            self.manager.save()
            store = self.store_dir
            # the store revision the actor trained against; resume checks the copy is at it
            state["store_revision"] = self.manager.revision
        return self.checkpoints.save(self.iteration, state, store_dir=store)

    def resume(self, step: int | None = None) -> None:
        """Continue from a checkpoint exactly: weights, optimisers, RNGs, store, counters."""
        data = self.checkpoints.load(step)
        state = data["state"]
        checkpoint = Path(data["path"]) / "trainer.pt"
        # hashed now: a later save prunes this checkpoint; named as another machine can read it
        self.resumed_from[portable_path(checkpoint)] = file_sha256(checkpoint)
        self.tasks_played = {k: dict(v) for k, v in state.get("tasks_played", {}).items()}
        self.iteration = int(state["iteration"])
        self.rollouts_done = int(state["rollouts_done"])
        self.task_rng.setstate(state["task_rng"])
        self.task_deck = list(state.get("task_deck", []))
        self.revisit_next = [(env_id, int(seed)) for env_id, seed in state.get("revisit_next", [])]
        self.evaluation_before = state.get("evaluation_before")
        self.warmup_record = state.get("warmup")
        self.actor_performance = {
            family: list(tally) for family, tally in state.get("actor_performance", {}).items()
        }
        self.actor.load_state_dict(state["actor"])
        if self.manager is not None and ("extractor" in state or "memory" in state):
            self._close_manager()
            self.checkpoints.restore_store(data["step"], self.store_dir)
            self.manager = self._open_manager()
            expected, found = state.get("store_revision"), self.manager.revision
            if expected is not None and found != expected:
                self._close_manager()
                raise DataError(
                    self.store_dir,
                    f"the restored store is at revision {found}, the checkpoint recorded "
                    f"{expected}",
                )
            if self.extractor is not None:
                self.extractor.manager = self.manager
                self.extractor.load_state_dict(state["extractor"])
            if self.memory is not None:
                self.memory.load_state_dict(state["memory"])
            self.merges = int(state.get("merges", 0))
            for key in [k for k in self._envs if k[0].experience is not None]:
                self._envs.pop(key).close()
        self.push_weights()
        restore_rng_state(data["rng"])
        self.metrics.truncate_after(self.iteration)
        logger.info("resumed from %s (iteration %d)", data["path"], self.iteration)
