"""A run's folder, read: :class:`Run` is the one reader of what a run leaves behind.

``comprl-gym train`` leaves in its ``output_dir`` its checkpoints (``checkpoints/step-N/``,
:mod:`~comprl_gym.trainers.checkpoint`), ``metrics.jsonl``, ``provenance.json``, and when it
ends ``summary.json`` and its evaluations (``eval/before``, ``eval/after``); ``comprl-gym
eval`` and ``comprl-gym stream`` leave ``config.json``, ``episodes.jsonl``, ``summary.json``
and ``provenance.json``. A :class:`Run` reads either as typed objects and rebuilds, from a
checkpoint, what a training run trained: its actor, its extractor and its store. It never
writes into the folder (:meth:`Run.trainer` works in a folder of the caller's).
:func:`build_extractor` is the one way an extractor is built from its settings.

Example:
    >>> import tempfile
    >>> from comprl_gym.evaluation.eval import EvalConfig, run_eval
    >>> out = tempfile.mkdtemp()
    >>> summary = run_eval(EvalConfig(env_ids=["comprl/MiniHack-Room-5x5-v0"], agent="expert",
    ...                               episodes=2, out_dir=out, progress=False))
    >>> run = Run(out)
    >>> run.kind, run.config.agent, [episode["won"] for episode in run.episodes()]
    ('eval', 'expert', [True, True])
    >>> run.checkpoint()  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    comprl_gym.core.ConfigurationError: ... is a `comprl-gym eval` run: only a training run has checkpoints
    >>> Run(tempfile.mkdtemp())  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    comprl_gym.core.ConfigurationError: ... is not a run folder: ...
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from comprl_gym.core import ConfigurationError, DataError
from comprl_gym.evaluation.eval import (
    CONFIG_FILE,
    EPISODES_FILE,
    SUMMARY_FILE,
    EvalConfig,
    load_episodes,
)
from comprl_gym.evaluation.provenance import PROVENANCE_FILE, file_sha256, portable_path
from comprl_gym.trainers.config import (
    ExperienceSettings,
    ModelSettings,
    TrainConfig,
    apply_overrides,
)
from comprl_gym.trainers.metrics import METRICS_FILE, read_metrics

if TYPE_CHECKING:
    from comprl_gym.evaluation.stream import StreamConfig
    from comprl_gym.experience.database import ExperienceDatabase
    from comprl_gym.trainers.base import Trainer
    from comprl_gym.trainers.extractor import ExperienceExtractor
    from comprl_gym.trainers.losses import Loss
    from comprl_gym.trainers.policy import PolicyOptimizer
# torch loads only when a checkpoint is read: a run's metrics and summary are read without it.

#: What made a run folder: ``comprl-gym train``, ``comprl-gym eval`` or ``comprl-gym stream``.
TRAIN, EVAL, STREAM = "train", "eval", "stream"
#: Where a training run keeps its checkpoints (:class:`~comprl_gym.trainers.checkpoint.
#: CheckpointManager`) and the store a checkpoint saved (beside its ``trainer.pt``).
CHECKPOINTS, STORE_COPY = "checkpoints", "experience"
#: Where a training run's evaluations are: ``eval/before`` and ``eval/after``.
EVALUATIONS = "eval"


class RunFileMissing(DataError, FileNotFoundError):
    """A run folder lacks a piece: the message names the file (a :class:`~comprl_gym.core.
    DataError`, which the CLI reports, and a :class:`FileNotFoundError`)."""

    def __init__(self, path: Any, problem: str, hint: str | None = None):
        super().__init__(path, problem, hint)
        self.filename = str(path)

    def __str__(self) -> str:  # DataError's message, not OSError's "[Errno None] ..."
        return str(self.args[0])


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint of a training run: its step, its folder and the trainer's state it saved
    (:meth:`Trainer.state_dict <comprl_gym.trainers.base.Trainer.state_dict>`), read through
    the properties below rather than by its keys."""

    step: int
    path: Path
    state: dict[str, Any]

    @property
    def config(self) -> TrainConfig:
        """The config the run trained with up to this checkpoint."""
        return TrainConfig.from_dict(self.state["config"])

    @property
    def iteration(self) -> int:
        return int(self.state["iteration"])

    @property
    def actor_weights(self) -> dict[str, Any]:
        """The actor model's state dict (LoRA adapters included under LoRA)."""
        return self.state["actor"]["model"]

    @property
    def extractor_weights(self) -> dict[str, Any] | None:
        """The extractor model's state dict, or ``None`` for a run without an extractor."""
        extractor = self.state.get("extractor")
        return extractor["optimizer"]["model"] if extractor else None

    @property
    def batch_log(self) -> list[dict[str, Any]]:
        """One record per sample of every extractor batch the run took (``[]`` without an
        extractor): :attr:`ExperienceExtractor.batch_log <comprl_gym.trainers.extractor.
        ExperienceExtractor.batch_log>`."""
        return list((self.state.get("extractor") or {}).get("batch_log", []))

    @property
    def store_revision(self) -> int | None:
        """The store revision the checkpoint's store copy is at (``None`` without a store)."""
        return self.state.get("store_revision")

    def files(self) -> dict[str, str]:
        """The sha256 of each of the checkpoint's files (``trainer.pt``, ``rng.pt``)."""
        return {p.name: file_sha256(p) for p in sorted(self.path.glob("*.pt"))}


def build_extractor(
    model: ModelSettings,
    settings: ExperienceSettings,
    seed: int = 0,
    model_state: dict[str, Any] | None = None,
    *,
    manager: Any = None,
    loss: Loss | None = None,
    trainable: bool = False,
) -> ExperienceExtractor:
    """The one way an extractor is built from its settings: ``model`` writing as ``settings``
    say, frozen (``trainable=False``, in eval mode) or trained by ``loss`` (the policy
    optimiser's default without one), with the weights of ``model_state`` when given (a
    checkpoint's extractor weights), writing into ``manager``'s store when given (else each
    write names its store, ``into=``). The trainer builds its own in ``Trainer._build_
    experience``, with the same arguments."""
    from comprl_gym.trainers.engines import policy_backend
    from comprl_gym.trainers.extractor import ExperienceExtractor
    from comprl_gym.trainers.policy import PolicyOptimizer

    optimizer = PolicyOptimizer.from_settings(model, "extractor", loss=loss, trainable=trainable)
    if model_state is not None:
        optimizer.model.load_state_dict(model_state)
    if not trainable:
        optimizer.model.eval()
    return ExperienceExtractor(
        policy_backend(optimizer),
        optimizer,
        manager,
        settings,
        max_new_tokens=model.max_new_tokens,
        temperature=model.temperature,
        seed=seed,
    )


def _kind(path: Path) -> str:
    # What a trainer leaves: checkpoints, its metrics log, or (never iterated) an evaluation.
    if any((path / name).exists() for name in (CHECKPOINTS, METRICS_FILE, EVALUATIONS)):
        return TRAIN
    if (path / CONFIG_FILE).is_file():
        return STREAM if _read_json(path / CONFIG_FILE).get("kind") == STREAM else EVAL
    if (path / EPISODES_FILE).is_file():  # a training run's eval/after: episodes, no config
        return EVAL
    raise ConfigurationError(
        f"{path} is not a run folder: it holds no {CHECKPOINTS}/, {METRICS_FILE} or "
        f"{EVALUATIONS}/ (a `comprl-gym train` run) and no {CONFIG_FILE} or {EPISODES_FILE} "
        "(a `comprl-gym eval` or `comprl-gym stream` run)"
    )


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RunFileMissing(path, "not there") from None
    except json.JSONDecodeError as exc:
        raise DataError(path, f"not valid JSON ({exc})") from exc


def _typed(cls: type, data: dict[str, Any], path: Path) -> Any:
    """A config dataclass from its saved fields (a field this version no longer has is
    left out)."""
    known = {f.name for f in dataclasses.fields(cls)}
    try:
        return cls(**{k: v for k, v in data.items() if k in known})
    except TypeError as exc:
        raise DataError(path, f"not a {cls.__name__} ({exc})") from exc


class Run:
    """A run folder, read-only (see the module docstring).

    Args:
        path: a ``comprl-gym train`` output_dir, or a folder ``comprl-gym eval`` /
            ``comprl-gym stream`` wrote.

    Raises:
        ConfigurationError: ``path`` is no run folder (nor a folder).
        RunFileMissing: (when read) a piece the folder lacks, named.
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        if not self.path.is_dir():
            raise ConfigurationError(f"{self.path} is not a run folder: no such folder")
        #: :data:`TRAIN`, :data:`EVAL` or :data:`STREAM`.
        self.kind = _kind(self.path)
        self._loaded: Checkpoint | None = None  # the last checkpoint read (they are large)

    def __repr__(self) -> str:
        return f"Run({str(self.path)!r}, kind={self.kind!r})"

    def _require_training(self) -> None:
        if self.kind != TRAIN:
            raise ConfigurationError(
                f"{self.path} is a `comprl-gym {self.kind}` run: only a training run has "
                "checkpoints"
            )

    # ------------------------------------------------------------------ what it wrote
    @cached_property
    def config(self) -> TrainConfig | EvalConfig | StreamConfig:
        """The config the run ran with: a :class:`~comprl_gym.trainers.config.TrainConfig`
        (its latest checkpoint's, else its summary's), an :class:`~comprl_gym.evaluation.
        eval.EvalConfig` or a :class:`~comprl_gym.evaluation.stream.config.StreamConfig`."""
        if self.kind == TRAIN:
            if self.latest_step is not None:
                return self.checkpoint().config
            if "config" not in self.summary:
                raise DataError(self.path / SUMMARY_FILE, "no config, and no checkpoint beside it")
            return TrainConfig.from_dict(self.summary["config"])
        saved = _read_json(self.path / CONFIG_FILE)["config"]
        if self.kind == STREAM:
            from comprl_gym.evaluation.stream import StreamConfig

            saved = {**saved, "versus": [tuple(pair) for pair in saved.get("versus", [])]}
            return _typed(StreamConfig, saved, self.path / CONFIG_FILE)
        return _typed(EvalConfig, saved, self.path / CONFIG_FILE)

    @property
    def finished(self) -> bool:
        """Whether the run ran to its end (``summary.json`` is written last)."""
        return (self.path / SUMMARY_FILE).is_file()

    @cached_property
    def summary(self) -> dict[str, Any]:
        """``summary.json``: a training run's or an evaluation's summary."""
        if not self.finished:
            raise RunFileMissing(self.path / SUMMARY_FILE, "not there: the run has not finished")
        return _read_json(self.path / SUMMARY_FILE)

    @cached_property
    def provenance(self) -> dict[str, Any]:
        """``provenance.json``: where the run's models, tasks and code came from."""
        return _read_json(self.path / PROVENANCE_FILE)

    @property
    def metrics(self) -> list[dict[str, Any]]:
        """A training run's ``metrics.jsonl``: one dict per iteration logged, in order."""
        self._require_training()
        path = self.path / METRICS_FILE
        if not path.is_file():
            raise RunFileMissing(path, "not there: the run logged no iteration")
        return read_metrics(path)

    def episodes(self, phase: str | None = None) -> Iterator[dict[str, Any]]:
        """The episode records of the run (:func:`~comprl_gym.evaluation.eval.load_episodes`,
        one ``episodes.jsonl`` line each, read without repairing it): an evaluation's, a
        stream's, or those of a training run's evaluation ``phase`` (``"after"``, the
        default, or ``"before"`` training)."""
        if self.kind == TRAIN:
            folder = self.path / EVALUATIONS / (phase or "after")
        elif phase is not None:
            raise ConfigurationError(f"{self.path}: a `comprl-gym {self.kind}` run has no phases")
        else:
            folder = self.path
        if not (folder / EPISODES_FILE).is_file():
            raise RunFileMissing(folder / EPISODES_FILE, "not there: no episode was recorded")
        return iter(load_episodes(folder, repair=False))

    # ------------------------------------------------------------------ checkpoints
    @property
    def steps(self) -> list[int]:
        """The steps of the checkpoints a training run keeps, oldest first."""
        self._require_training()
        folder = self.path / CHECKPOINTS
        names = [p.name.removeprefix("step-") for p in folder.glob("step-*")]
        return sorted(int(n) for n in names if n.isdigit() and (folder / f"step-{n}").is_dir())

    @property
    def latest_step(self) -> int | None:
        """The step of the newest complete checkpoint (``None``: none saved yet)."""
        self._require_training()
        from comprl_gym.trainers.checkpoint import CheckpointManager

        return CheckpointManager(self.path).latest_step()

    def _step(self, step: int | None) -> int:
        """``step``, or the latest, checked to be there."""
        found = self.latest_step if step is None else step
        if found is None:
            raise RunFileMissing(
                self.path / CHECKPOINTS / "latest",
                "no checkpoint there",
                "pass the output_dir of a `comprl-gym train` run that saved one",
            )
        if not (self.path / CHECKPOINTS / f"step-{found}" / "trainer.pt").is_file():
            raise RunFileMissing(
                self.path / CHECKPOINTS / f"step-{found}" / "trainer.pt",
                f"no checkpoint of step {found} (the run keeps steps {self.steps})",
            )
        return found

    def checkpoint(self, step: int | None = None) -> Checkpoint:
        """Checkpoint ``step`` (the latest when ``None``), read onto the CPU."""
        self._require_training()
        step = self._step(step)
        if self._loaded is None or self._loaded.step != step:
            from comprl_gym.trainers.checkpoint import CheckpointManager

            self._loaded = None  # one checkpoint in memory at a time
            data = CheckpointManager(self.path).load(step)
            self._loaded = Checkpoint(step, Path(data["path"]), data["state"])
        return self._loaded

    def origin(self) -> dict[str, Any]:
        """Where an agent rebuilt from this run comes from, as a stream's ``provenance.json``
        records it: the run, its latest checkpoint's files with their sha256 (they hold the
        trained weights) and, from its ``provenance.json``, the models it started from and
        the tasks it trained on."""
        folder = self.path / CHECKPOINTS / f"step-{self._step(None)}"
        trained = self.provenance
        return {
            "path": portable_path(self.path),
            "checkpoint": {
                "name": folder.name,
                "files": {p.name: file_sha256(p) for p in sorted(folder.glob("*.pt"))},
            },
            "models": trained.get("models"),
            "training_tasks": trained.get("training_tasks"),
        }

    # ------------------------------------------------------------------ rebuilt
    def actor(self, step: int | None = None) -> PolicyOptimizer:
        """The actor with checkpoint ``step``'s weights, frozen and in eval mode."""
        from comprl_gym.trainers.policy import PolicyOptimizer

        checkpoint = self.checkpoint(step)
        # The checkpoint holds every trained weight: the init_weights file is not read.
        settings = dataclasses.replace(checkpoint.config.actor, init_weights="")
        actor = PolicyOptimizer.from_settings(settings, "actor", trainable=False)
        actor.model.load_state_dict(checkpoint.actor_weights)
        actor.model.eval()
        return actor

    def extractor(self, step: int | None = None, *, initial: bool = False) -> ExperienceExtractor:
        """The run's extractor (:func:`build_extractor`, frozen, writing where each write
        says): with checkpoint ``step``'s weights, or with ``initial`` the weights it started
        from (its model and ``init_weights``), the frozen baseline."""
        checkpoint = self.checkpoint(step)
        config = checkpoint.config
        if checkpoint.extractor_weights is None:
            raise ConfigurationError(
                f"{self.path}: the run has no extractor (its algorithm, {config.algorithm}, "
                "uses none)"
            )
        if initial:
            return build_extractor(config.extractor, config.experience, config.seed)
        settings = dataclasses.replace(config.extractor, init_weights="")
        return build_extractor(
            settings, config.experience, config.seed, checkpoint.extractor_weights
        )

    def store(self, step: int | None = None, *, arm: str | None = None) -> ExperienceDatabase:
        """A training run's store as checkpoint ``step`` (the latest when ``None``) saved it,
        or the store a stream's ``arm`` left, opened read-only (:class:`~comprl_gym.
        experience.database.ExperienceDatabase`): its lessons (``iter_experiences``), their
        history (``revisions``). Close it, or use it as a context manager."""
        from comprl_gym.experience.database import DB_NAME, ExperienceDatabase

        if self.kind == STREAM:
            from comprl_gym.evaluation.stream import STORES

            if arm is None or step is not None:
                raise ConfigurationError(f"{self.path}: a stream keeps one store per arm: name it")
            path = self.path / STORES / arm / DB_NAME
        else:
            self._require_training()
            if arm is not None:
                raise ConfigurationError(f"{self.path}: a training run has no arms")
            path = self.path / CHECKPOINTS / f"step-{self._step(step)}" / STORE_COPY / DB_NAME
        if not path.is_file():
            raise RunFileMissing(path, "not there: the run keeps no experience store")
        return ExperienceDatabase(path, readonly=True)

    def trainer(self, work: str | os.PathLike[str], overrides: list[str] | None = None) -> Trainer:
        """The run's trainer at its latest checkpoint (weights, extractor, store, counters:
        :meth:`Trainer.resume <comprl_gym.trainers.base.Trainer.resume>`), working in
        ``work`` (its output and store there; this folder is only read), its config changed
        by ``KEY=VALUE`` ``overrides`` as ``comprl-gym train --set`` changes it."""
        from comprl_gym.trainers import make_trainer
        from comprl_gym.trainers.checkpoint import CheckpointManager

        work = Path(work)
        data = self.checkpoint().config.to_dict()
        data.update(output_dir=str(work / "run"), resume=False, progress=False, tensorboard=False)
        data["experience"]["store_dir"] = str(work / "store")
        self._loaded = None  # the trainer reads the checkpoint itself: not two copies held
        trainer = make_trainer(TrainConfig.from_dict(apply_overrides(data, overrides)))
        # Weights, extractor and store come from this run's checkpoint; the store is restored
        # into ``work``, so nothing is written here.
        trainer.checkpoints = CheckpointManager(self.path)
        trainer.resume()
        return trainer


def run_extractors(
    run_dir: str | os.PathLike[str], frozen: bool = True
) -> tuple[TrainConfig, dict[str, Any], list[tuple[str, ExperienceExtractor]]]:
    """A saved run's config, where its weights came from, and its extractors: the trained one
    (its newest checkpoint) and, with ``frozen``, the same model with its initial weights
    (what ``comprl-gym probe --run`` probes)."""
    run = Run(run_dir)
    checkpoint = run.checkpoint()
    config = checkpoint.config
    trainer_file = checkpoint.path / "trainer.pt"
    source = {"checkpoint": portable_path(trainer_file), "sha256": checkpoint.files()["trainer.pt"]}
    extractors = [(f"trained extractor (step {checkpoint.step})", run.extractor())]
    if frozen:
        extractors.append(
            (f"frozen extractor ({config.extractor.model})", run.extractor(initial=True))
        )
    return config, source, extractors


__all__ = [
    "EVAL",
    "STREAM",
    "TRAIN",
    "Checkpoint",
    "Run",
    "RunFileMissing",
    "build_extractor",
    "run_extractors",
]
