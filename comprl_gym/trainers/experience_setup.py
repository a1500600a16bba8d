"""The experience half of a trainer: the extractor (or a memory), the store, the worker.

An experience trainer (``uses_experience``) writes lessons with an extractor model (or, with
``experience.memory`` other than ``extractor``, a memory without a model,
:mod:`comprl_gym.lessons.memories`) into the experience store, whose manager lives in this
process or, on Ray, behind the named experience service the env workers share. The background
:class:`~comprl_gym.trainers.background.ExperienceWorker` runs the algorithm's
``experience_job`` beside the actor's update. :class:`ExperienceSetup` builds, opens and closes
them; what they do in an iteration is the algorithm's (:mod:`comprl_gym.trainers.complementary`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

from comprl_gym.lessons.formats import LessonFormat
from comprl_gym.lessons.memories import ExemplarMemory, memory_named
from comprl_gym.trainers.background import ExperienceWorker
from comprl_gym.trainers.config import TrainConfig
from comprl_gym.trainers.engines import policy_backend
from comprl_gym.trainers.extractor import ExperienceExtractor
from comprl_gym.trainers.losses import Loss
from comprl_gym.trainers.policy import PolicyOptimizer


class ExperienceSetup:
    """Builds the extractor or memory, the store's manager and the experience worker (a part
    of :class:`~comprl_gym.trainers.base.Trainer`, whose ``__init__`` calls
    :meth:`_build_experience` for an experience trainer)."""

    # Set by Trainer (its class flags and __init__); the hooks are the algorithm's.
    trains_extractor: ClassVar[bool]
    config: TrainConfig
    output_dir: Path
    lesson_format: LessonFormat | None
    env_pool: Any
    manager: Any
    extractor: ExperienceExtractor | None
    memory: ExemplarMemory | None
    worker: ExperienceWorker | None
    extractor_loss: Callable[[], Loss]
    experience_job: Callable[[dict[str, Any]], None]
    _data_parallel: Callable[[PolicyOptimizer], Any]

    @property
    def store_dir(self) -> Path:
        return Path(self.config.experience.store_dir or self.output_dir / "experience")

    def _open_manager(self) -> Any:
        """The store's manager: in this process, or on Ray the named experience service (its
        client has the manager's methods) that the env workers share."""
        from comprl_gym.experience import ExperienceManager

        settings = self.config.experience
        # ExperienceSettings is an ExperienceConfig: the manager reads its knobs directly.
        config = replace(settings, seed=self.config.seed)
        if self.env_pool is not None:
            from comprl_gym.distributed.experience_service import start_experience_service

            return start_experience_service(
                self.store_dir, config, distributed=self.config.distributed
            )
        return ExperienceManager(str(self.store_dir), config=config)

    def _close_manager(self) -> None:
        """Close the store (and end the experience service on Ray)."""
        if self.env_pool is not None:
            from comprl_gym.distributed.experience_service import stop_experience_service

            stop_experience_service(self.manager)
        else:
            self.manager.close()

    def _build_experience(self) -> None:
        cfg = self.config
        extractor_settings = cfg.extractor
        if cfg.experience.memory == "extractor":
            optimizer = PolicyOptimizer.from_settings(
                extractor_settings,
                "extractor",
                loss=self.extractor_loss(),
                trainable=self.trains_extractor,
            )
            backend = policy_backend(optimizer)
            if cfg.distributed.enabled and self.trains_extractor:
                optimizer = self._data_parallel(optimizer)
        else:
            # A memory without a model: no extractor, no optimiser, nothing to train.
            self.memory = memory_named(cfg.experience.memory)
        self.manager = self._open_manager()
        self._warm_up_embedder()
        if self.memory is None:
            self.extractor = ExperienceExtractor(
                backend,
                optimizer,
                self.manager,
                cfg.experience,
                max_new_tokens=extractor_settings.max_new_tokens,
                temperature=extractor_settings.temperature,
                output_format=self.lesson_format,
                seed=cfg.seed,
            )
        self.worker = ExperienceWorker(self.experience_job, cfg.experience.async_extraction)
        self.extractor_stats: list[dict[str, float]] = []
        self.merges = 0

    def _warm_up_embedder(self) -> None:
        """Load the embedding model now, not inside the first rollout (where it would count as
        actor wait time)."""
        embedder = getattr(getattr(self.manager, "store", None), "embedder", None)
        if embedder is not None and hasattr(embedder, "encode"):
            embedder.encode(["warm up"])
