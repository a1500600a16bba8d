"""The arms: each arm's store and ``learn``, built from its name.

* ``none``: no lessons (always run: the reference every other arm is paired with);
* a fixed store, one lesson per task, written by the family
  (:meth:`~comprl_gym.families.FamilySpec.fixed_lesson`: ``oracle``, ``inverted``,
  ``placebo`` in the memory family);
* ``exemplar`` and ``cases``: memories without a model
  (:mod:`comprl_gym.lessons.memories`), filled between visits with each won episode's
  actions (``exemplar``) or every episode's actions and outcome (``cases``);
* the family's scripted memories, filled between visits like ``exemplar``
  (:meth:`~comprl_gym.families.FamilySpec.stream_memory`): arms that bound the result. In the
  memory family ``coin`` (the stem extractor's placebo: the oracle's sentence with a side a
  coin drew per (seed, dungeon)), ``coin_exemplar`` (the exemplar memory's placebo: each won
  episode's record on the coin's side) and ``outcome_aware`` (the ceiling of any extractor:
  the oracle's sentence with the side each episode shows);
* ``own``: a trained run's extractor distils each finished episode into the arm's store (the
  caller passes ``own``, a function of the store that returns the arm's ``learn``; the
  command builds it from ``--run DIR``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from comprl_gym.core import ConfigurationError
from comprl_gym.env_factory import EnvSpec, make_env
from comprl_gym.evaluation.stream.config import NONE, OWN, StreamConfig
from comprl_gym.evaluation.stream.play import Arm
from comprl_gym.experience import ExperienceConfig, ExperienceManager
from comprl_gym.families import FamilySpec, family_spec
from comprl_gym.lessons.memories import MEMORIES, ExemplarMemory, memory_named
from comprl_gym.registration import ENV_TABLE
from comprl_gym.rollouts import Trajectory


def env_family(config: StreamConfig) -> FamilySpec | None:
    """The family of ``config``'s env (read from an env when the id is not a comprl one)."""
    entry = ENV_TABLE.get(config.env_id)
    if entry is not None:
        return family_spec(entry.family)
    env = make_env(config.env_spec())
    try:
        return family_spec(env.unwrapped.env_family)
    finally:
        env.close()


def check_arms(config: StreamConfig, family: FamilySpec | None, has_own: bool) -> None:
    """A :class:`ConfigurationError` naming every arm ``config`` cannot stream, and why."""
    fixed = tuple(family.lessons.fixed) if family is not None else ()
    scripted = tuple(family.lessons.memories) if family is not None else ()
    known = (NONE, *fixed, *MEMORIES, *scripted, OWN)
    unknown = [a for a in config.arms if a not in known]
    if unknown:
        name = family.name if family is not None else "of no known family"
        raise ConfigurationError(
            f"unknown arm(s) {unknown} for {config.env_id} (family {name}); its arms: "
            f"{', '.join(known)}"
        )
    if OWN in config.arms and not has_own:
        raise ConfigurationError(
            "the 'own' arm is a trained run's extractor: pass --run DIR of a run that "
            "trained or froze one (GRPO has none), or drop 'own' from --arms"
        )
    compared = sorted({arm for pair in config.versus for arm in pair} - set(config.arms))
    if compared:
        raise ConfigurationError(f"--versus names arm(s) {compared} not in --arms {config.arms}")
    if config.tasks < 1 or config.visits < 1:
        raise ConfigurationError("--tasks and --visits must be at least 1")
    if config.first_task < 0:
        raise ConfigurationError(f"--first-task must be >= 0, got {config.first_task}")


def build_arms(
    config: StreamConfig,
    family: FamilySpec | None,
    own: Callable[[ExperienceManager], Callable[[Trajectory], None]] | None,
    stores: Path,
) -> list[Arm]:
    """The arms of ``config``, their stores under ``stores`` (fixed ones filled now)."""
    tasks = config.task_seeds
    fixed = [a for a in config.arms if family is not None and a in family.lessons.fixed]
    ids = task_ids(config.env_spec(), tasks) if fixed else []
    arms = []
    for name in config.arms:
        if name == NONE:
            arms.append(Arm(NONE))
            continue
        store = open_store(stores / name)
        if family is not None and name in fixed:
            store.add([family.fixed_lesson(name, i) for i in ids], env_family=family.name)
            arms.append(Arm(name, store))
        elif name in MEMORIES:
            arms.append(Arm(name, store, _learner(memory_named(name), store)))
        elif family is not None and name in family.lessons.memories:
            scripted = FamilyMemory(family.stream_memory(name, config.seed))
            arms.append(Arm(name, store, _learner(scripted, store)))
        else:  # own (check_arms made sure there is an extractor)
            assert own is not None
            arms.append(Arm(name, store, own(store)))
    return arms


def task_ids(spec: EnvSpec, tasks: list[int]) -> list[Any]:
    """Each task's ``info["task_id"]`` (one reset per task); a :class:`ConfigurationError`
    when two reset seeds play the same task (more tasks than the pool holds)."""
    env = make_env(spec)
    try:
        ids = [env.reset(seed=task)[1].get("task_id") for task in tasks]
    finally:
        env.close()
    seen: dict[Any, int] = {}
    for task, task_id in zip(tasks, ids):
        if task_id in seen:
            raise ConfigurationError(
                f"tasks {seen[task_id]} and {task} both play {task_id!r}: --tasks {len(tasks)} "
                f"is more than the pool of {spec.env_id} holds"
            )
        seen[task_id] = task
    return ids


def open_store(folder: Path) -> ExperienceManager:
    """An arm's store. Diversification is off: it drops a recently shown top hit at random and
    penalises often-retrieved lessons, which would hide a task's own lesson from its later
    visits; an arm shows the lesson its store ranks first."""
    return ExperienceManager(str(folder), config=ExperienceConfig(diversify=False))


class FamilyMemory(ExemplarMemory):
    """A family's scripted memory (:meth:`~comprl_gym.families.FamilySpec.stream_memory`: an
    object with ``name`` and ``lesson(episode)``) as a no-model memory: its lessons are stored
    as :meth:`ExemplarMemory.learn` stores the exemplar's (the episode's provenance with the
    memory's name as the policy version; episodes and declines counted)."""

    def __init__(self, scripted: Any):
        super().__init__()
        self.scripted = scripted

    @property
    def name(self) -> str:
        return str(self.scripted.name)

    def lesson(self, episode: Any) -> dict[str, str] | None:
        return self.scripted.lesson(episode)


def _learner(memory: Any, store: ExperienceManager) -> Callable[[Trajectory], None]:
    """A no-model memory's ``learn`` into ``store`` (:mod:`comprl_gym.lessons.memories`)."""
    return lambda episode: memory.learn(episode, store)
