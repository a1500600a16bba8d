"""``comprl-gym stream``: a streaming evaluation (:mod:`.streaming`) as a run folder.

Any env id, ``tasks`` held-out tasks (reset seeds ``0..tasks-1`` of the env's pool; a
``split`` env argument chooses the pool where the family has one), ``visits`` visits each, one
arm per lesson source, every (task, visit) episode on the same seeds in every arm
(:func:`~comprl_gym.evaluation.streaming.episode_seeds`). The arms:

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

The folder is the one ``comprl-gym eval`` writes (``config.json``, ``episodes.jsonl`` whose
records also carry ``arm``, ``visit``, ``reset_seed`` and ``sampling_seed``, ``summary.json`` /
``summary.md``, ``provenance.json``), plus ``stream.png`` (success by visit per arm) and
``stores/<arm>/`` (each arm's store as the stream left it). ``summary.json`` is eval's summary
(one group per arm: the arm is the record's ``condition``) with ``streaming``
(:func:`~comprl_gym.evaluation.streaming.streaming_summary`), ``stream`` (what was streamed)
and, for a family that judges lessons, ``store_verdicts`` (per store, its lessons' verdicts)
and ``shown_verdicts`` (:func:`shown_verdicts`: what each arm showed a task at a later visit,
by how its previous visit ended).
``comprl-gym leaderboard`` reads it, with a per-visit table.

Example (a random agent; no arm carries information, so every arm plays like ``none``):
    >>> import tempfile
    >>> config = StreamConfig("comprl/Memory-Fork-v0", "random", tasks=1, visits=2,
    ...                       arms=["exemplar"], env_kwargs={"split": "test"},
    ...                       out_dir=tempfile.mkdtemp(), progress=False)
    >>> summary = run_stream(config)
    >>> list(summary["streaming"]), summary["streaming"]["exemplar"]["visits"]["2"]["episodes"]
    (['none', 'exemplar'], 1)
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from comprl_gym.agents.base import make_agent
from comprl_gym.agents.llm_agent import agent_from_spec
from comprl_gym.core import ConfigurationError
from comprl_gym.env_factory import EnvSpec, make_env
from comprl_gym.evaluation.eval import (
    CONFIG_FILE,
    EPISODES_FILE,
    SUMMARY_MD,
    _is_llm_spec,
    summarize,
    summary_markdown,
    write_run,
)
from comprl_gym.evaluation.provenance import PROVENANCE_FILE, write_provenance
from comprl_gym.evaluation.streaming import (
    Arm,
    plot_streaming,
    run_streaming,
    streaming_markdown,
    streaming_summary,
    versus_markdown,
    versus_summary,
)
from comprl_gym.experience import ExperienceConfig, ExperienceManager
from comprl_gym.families import (
    FamilySpec,
    env_pool,
    family_spec,
    held_out_kwargs,
    verdict_counts,
)
from comprl_gym.lessons.memories import MEMORIES, ExemplarMemory, memory_named
from comprl_gym.registration import ENV_TABLE
from comprl_gym.rollouts import Trajectory, append_jsonl
from comprl_gym.utils import atomic_write_json, atomic_write_text, jsonable

#: The reference arm, always streamed.
NONE = "none"
#: The arm a trained run's extractor fills.
OWN = "own"
PLOT_FILE = "stream.png"
STORES = "stores"


@dataclass
class StreamConfig:
    """One stream.

    Attributes:
        env_id: the env (any registered id).
        agent: the agent spec (as ``comprl-gym eval`` takes it), or a label for an agent the
            caller passes to :func:`run_stream` (a trained run's actor).
        tasks: held-out tasks: reset seeds ``0..tasks-1``.
        visits: visits to each task.
        arms: lesson sources (see the module docstring); ``none`` is added first if missing.
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

    def __post_init__(self) -> None:
        self.arms = [NONE, *(a for a in dict.fromkeys(self.arms) if a != NONE)]
        self.versus = [(str(a), str(b)) for a, b in self.versus]

    @property
    def seeds(self) -> list[int]:
        """The run's seeds, as provenance records them for an eval."""
        return [self.seed]

    #: No shared store: each arm's store is in ``stores/`` of the run folder.
    experience = None

    def env_spec(self) -> EnvSpec:
        return EnvSpec.of(self.env_id, {**self.env_kwargs, "max_steps": self.max_steps})


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


def build_arms(
    config: StreamConfig,
    family: FamilySpec | None,
    own: Callable[[ExperienceManager], Callable[[Trajectory], None]] | None,
    stores: Path,
) -> list[Arm]:
    """The arms of ``config``, their stores under ``stores`` (fixed ones filled now)."""
    tasks = list(range(config.tasks))
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


def spec_agent(spec: str, env_spec: EnvSpec, seed: int) -> Any:
    """The agent of an eval spec, as :func:`~comprl_gym.evaluation.streaming.run_streaming`
    takes it: a batched LLM agent, or a factory of one scripted agent per episode (seeded by
    the episode's sampling seed)."""
    if _is_llm_spec(spec):
        env = make_env(env_spec)
        try:
            return agent_from_spec(spec, env, seed=seed)
        finally:
            env.close()
    return lambda env, sampling_seed: make_agent(spec, env, seed=sampling_seed)


def run_stream(
    config: StreamConfig,
    agent: Any = None,
    own: Callable[[ExperienceManager], Callable[[Trajectory], None]] | None = None,
    run: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Stream ``config`` and write its run folder; returns the summary.

    ``agent`` defaults to ``config.agent`` read as an eval spec (:func:`spec_agent`); ``own``
    makes the ``own`` arm's ``learn`` from its store (a trained extractor's ``write``);
    ``run`` is the agent's origin for ``provenance.json``
    (:meth:`comprl_gym.trainers.run.Run.origin` or
    :func:`~comprl_gym.evaluation.provenance.config_provenance`).
    """
    started = time.time()
    out = Path(config.out_dir)
    if (out / EPISODES_FILE).exists():
        raise ConfigurationError(
            f"{out} already holds results; a stream cannot resume (its memories learn in "
            "order): choose another --output-dir"
        )
    family = env_family(config)
    check_arms(config, family, own is not None)
    # A family with pools streams its held-out pool unless a split is named; the split is
    # then in env_kwargs, so config.json and the summary record the pool played.
    pool = env_pool(config.env_id, config.env_kwargs)
    config.env_kwargs = held_out_kwargs(config.env_id, config.env_kwargs)
    spec = config.env_spec()
    if agent is None:
        agent = spec_agent(config.agent, spec, config.seed)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(
        out / CONFIG_FILE,
        {
            "kind": "stream",
            "identity": {"agent": config.agent},
            "config": jsonable(asdict(config)),
            "env_ids": [config.env_id],
            "pool": asdict(pool) if pool else None,
        },
    )
    arms = build_arms(config, family, own, out / STORES)
    try:
        records = run_streaming(
            spec,
            list(range(config.tasks)),
            config.visits,
            arms,
            agent,
            inject_top_k=config.inject_top_k,
            seed=config.seed,
            agent_label=config.agent,
            progress=config.progress,
            parallel=config.parallel,
            # Saved as played; write_run rewrites the file whole at the end.
            on_visit=lambda played: append_jsonl(out / EPISODES_FILE, jsonable(played)),
        )
        texts = {
            a.name: [e.text for e in a.manager.experiences()] for a in arms if a.manager is not None
        }
    finally:
        for arm in arms:
            if arm.manager is not None:
                arm.manager.close()
    summary = summarize(records)
    summary["stream"] = {
        "env_id": config.env_id,
        "env_kwargs": config.env_kwargs,
        "tasks": config.tasks,
        "visits": config.visits,
        "arms": config.arms,
        "seed": config.seed,
        "run": config.run,
        "pool": asdict(pool) if pool else None,
    }
    summary["streaming"] = streaming_summary(records)
    if config.versus:
        summary["versus"] = versus_summary(records, config.versus)
    if family is not None and family.lessons.judge is not None:
        summary["store_verdicts"] = {
            name: verdict_counts(family, lessons) for name, lessons in texts.items()
        }
        summary["shown_verdicts"] = shown_verdicts(records, family)
    write_run(out, records, summary)
    atomic_write_text(out / SUMMARY_MD, summary_markdown(summary) + stream_markdown(summary))
    plot_streaming(
        summary["streaming"], out / PLOT_FILE, f"{config.env_id}: success by visit, per arm"
    )
    write_provenance(out, config, time.time() - started, run=run)
    return summary


#: How :func:`shown_verdicts` counts an episode (its verdict,
#: :func:`~comprl_gym.lessons.core.episode_verdict`, when ``right`` or ``wrong``; any other,
#: no side, both, only other tasks or no lesson, is ``no_side``).
SHOWN_KINDS = ("right", "wrong", "no_side")


def shown_verdicts(records: list[dict[str, Any]], family: FamilySpec) -> dict[str, Any]:
    """Per arm with lessons, what it showed each task at visits after the first, by how the
    arm's previous visit to that task ended: ``{"after_won": {"right": n, "wrong": n,
    "no_side": n}, "after_lost": {...}}``, each episode's verdict from the family's judge on
    the lessons it was shown (:func:`~comprl_gym.lessons.core.episode_verdict`). An
    outcome-aware memory shows the right side after a win and after a loss; one that copies
    the walked side is right after wins only; a constant side is right about half the time
    either way. The check behind any sentence on why an arm helped.

    Example:
        >>> from comprl_gym.envs.memory import inverted_lesson, oracle_lesson
        >>> from comprl_gym.families import family_spec
        >>> task = "You are in the Vault of Marrow."
        >>> shown = lambda text: [{"content": text}] if text else []
        >>> records = [
        ...     {"arm": "copy", "visit": 1, "task_index": 0, "won": False, "task": task,
        ...      "experiences": []},
        ...     {"arm": "copy", "visit": 2, "task_index": 0, "won": False, "task": task,
        ...      "experiences": shown(inverted_lesson("fork/vault-of-marrow"))}]
        >>> shown_verdicts(records, family_spec("memory"))["copy"]["after_lost"]
        {'right': 0, 'wrong': 1, 'no_side': 0}
    """
    from comprl_gym.lessons.core import episode_verdict

    outcome = {(r["arm"], r["task_index"], int(r["visit"])): bool(r["won"]) for r in records}
    out: dict[str, Any] = {}
    for r in records:
        visit = int(r["visit"])
        if r["arm"] == NONE or visit < 2:
            continue
        task = family.judge(r["task"])
        lessons = [family.judge(e["content"]) for e in r.get("experiences") or []]
        verdict = episode_verdict(lessons, None if task is None else task.task_id)
        after = "after_won" if outcome[(r["arm"], r["task_index"], visit - 1)] else "after_lost"
        row = out.setdefault(
            r["arm"], {a: dict.fromkeys(SHOWN_KINDS, 0) for a in ("after_won", "after_lost")}
        )
        row[after][verdict if verdict in SHOWN_KINDS else "no_side"] += 1
    return out


def stream_result(folder: str | os.PathLike[str], keys: tuple[str, ...]) -> dict[str, Any]:
    """A finished stream folder as a benchmark commits it: the ``keys`` of its
    ``summary.json`` (``streaming``, ``versus``, ``store_verdicts``, ...; a key the stream did
    not write is ``{}``) and its ``provenance.json``. Its episodes are
    :func:`~comprl_gym.evaluation.eval.load_episodes`."""
    folder = Path(folder)
    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    provenance = json.loads((folder / PROVENANCE_FILE).read_text(encoding="utf-8"))
    return {**{k: summary.get(k, {}) for k in keys}, "provenance": provenance}


def stream_markdown(summary: dict[str, Any]) -> str:
    """The stream's part of ``summary.md``: success by visit per arm and, where the family
    judges lessons, each store's verdicts."""
    lines = [
        "\n## Success by visit, per arm (paired with none)\n",
        streaming_markdown(summary["streaming"]),
    ]
    if summary.get("versus"):
        lines += [
            "\n## Treatment minus placebo (paired episode by episode)\n",
            versus_markdown(summary["versus"]),
        ]
    verdicts = summary.get("store_verdicts")
    if verdicts:
        lines += [
            "\n## What each store's lessons say (the family's judge)\n",
            "| store | " + " | ".join(next(iter(verdicts.values()))) + " |",
            "| --- |" + " --- |" * len(next(iter(verdicts.values()))),
        ]
        lines += [
            f"| {name} | " + " | ".join(str(n) for n in counts.values()) + " |"
            for name, counts in verdicts.items()
        ]
    shown = summary.get("shown_verdicts")
    if shown:
        lines += [
            "\n## What each arm showed at a later visit, by how its previous visit ended\n",
            "| arm | after a win: right | wrong | no side | after a loss: right | wrong | no side |",
            "| --- |" + " --- |" * 6,
        ]
        lines += [
            f"| {arm} | "
            + " | ".join(str(n) for after in row.values() for n in after.values())
            + " |"
            for arm, row in shown.items()
        ]
    return "\n".join(lines) + "\n"
