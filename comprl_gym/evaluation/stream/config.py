"""What a stream is: :class:`StreamConfig`, and the two arms of any family (``none``, ``own``)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from comprl_gym.env_factory import EnvSpec

#: The reference arm, always streamed.
NONE = "none"
#: The arm a trained run's extractor fills.
OWN = "own"


@dataclass
class StreamConfig:
    """One stream.

    Attributes:
        env_id: the env (any registered id).
        agent: the agent spec (as ``comprl-gym eval`` takes it), or a label for an agent the
            caller passes to :func:`~comprl_gym.evaluation.stream.run.run_stream` (a trained
            run's actor).
        tasks: held-out tasks: reset seeds ``first_task..first_task+tasks-1``.
        visits: visits to each task.
        arms: lesson sources (:mod:`~comprl_gym.evaluation.stream.arms`); ``none`` is added
            first if missing.
        env_kwargs: ``gym.make`` arguments; ``split`` chooses the pool of a family with pools,
            which is its held-out pool when none is named (:func:`~comprl_gym.families.
            held_out_kwargs`).
        max_steps: the env's step limit (``None``: its default).
        seed: the base of every episode's sampling seed.
        inject_top_k: lessons shown per episode.
        parallel: episodes of an LLM agent played at once.
        out_dir: the run folder (it must hold no results yet).
        progress: show a progress bar.
        run: the training run the actor or the ``own`` arm's extractor came from.
        versus: ``(treatment, control)`` pairs of arms compared episode by episode besides
            every arm against ``none``: a memory against its placebo (``("own", "coin")``).
        first_task: the first reset seed: a pool's later tasks, never touched by a stream of
            its first ones (a second sealed table on the rest of a sealed pool).
    """

    env_id: str
    agent: str
    tasks: int
    visits: int = 2
    arms: list[str] = field(default_factory=lambda: [NONE])
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    max_steps: int | None = None
    seed: int = 0
    inject_top_k: int = 1
    parallel: int = 32
    out_dir: str | os.PathLike[str] = "results"
    progress: bool = True
    run: str | None = None
    versus: list[tuple[str, str]] = field(default_factory=list)
    first_task: int = 0

    def __post_init__(self) -> None:
        self.arms = [NONE, *(a for a in dict.fromkeys(self.arms) if a != NONE)]
        self.versus = [(str(a), str(b)) for a, b in self.versus]

    @property
    def task_seeds(self) -> list[int]:
        """The reset seeds of the tasks streamed, in order."""
        return list(range(self.first_task, self.first_task + self.tasks))

    @property
    def seeds(self) -> list[int]:
        """The run's seeds, as provenance records them for an eval."""
        return [self.seed]

    #: No shared store: each arm's store is in ``stores/`` of the run folder.
    experience = None

    def env_spec(self) -> EnvSpec:
        return EnvSpec.of(self.env_id, {**self.env_kwargs, "max_steps": self.max_steps})
