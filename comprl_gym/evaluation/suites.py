"""Versioned benchmark suites: ``comprl-gym eval --suite NAME@VERSION``.

A suite (``suites/NAME@VERSION.json``) pins what is played: the env ids, their keyword
arguments (observation mode, split), step limits, the exact task seeds (task ``I`` of a task
entry is ``reset(seed=start + I)``) and the episodes per task (agent seeds). Its **content
hash** is one SHA-256 over the definition and everything that decides what is played, as
each family says (its spec's ``suite_content`` and ``suite_engines``,
:mod:`comprl_gym.families`): MiniHack's generated des-files, the engines' versions and the
first observation of every pinned seed; WebShop's catalog (products, prices, goals) and first
observations; ALFWorld's game files (official or generated) of every pinned seed; SWE-bench's
manifest (commit shas, tests, problem statements). :data:`PUBLISHED_HASHES`
(``suites/hashes.json``) holds the committed hash of each version: a test recomputes them, so
changing anything a suite pins without a new version fails. A run records the hash it played; the leaderboard never ranks
runs of different versions or hashes together.

Only data locations may be given at run time (``data_dir``, ``sandbox``): they change where
the content is read from, and the hash says whether it is the same content.

Example:
    >>> suite = load_suite("minihack-nav@1")
    >>> suite.key, len(suite.tasks), suite.tasks[0].seeds[:3]
    ('minihack-nav@1', 7, [10000, 10001, 10002])
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import gymnasium as gym

from comprl_gym.core import ConfigurationError, DataError
from comprl_gym.evaluation import eval as evaluation
from comprl_gym.families import FamilySpec, env_pool, family_spec
from comprl_gym.registration import ENV_TABLE
from comprl_gym.utils import atomic_write_json, atomic_write_text, json_sha256, jsonable

logger = logging.getLogger(__name__)

SUITES_DIR = Path(__file__).with_name("suites")
HASHES_FILE = SUITES_DIR / "hashes.json"
#: Env arguments a user may give a suite run: where data lives, which sandbox runs it.
LOCATION_KWARGS = frozenset({"data_dir", "sandbox", "generated_root"})
TASKS_DIR = "tasks"


@dataclass(frozen=True)
class SuiteTask:
    """One pinned entry: an env id with its arguments and its task seeds."""

    name: str
    env_id: str
    seeds: list[int]
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    max_steps: int | None = None


@dataclass(frozen=True)
class Suite:
    """A versioned suite (see the module docstring)."""

    name: str
    version: str
    description: str
    tasks: list[SuiteTask]
    episodes_per_task: int = 1
    requires_data: str | None = None
    definition: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def key(self) -> str:
        return f"{self.name}@{self.version}"

    @property
    def episodes(self) -> int:
        """Episodes of a complete run (per experience condition)."""
        return sum(len(t.seeds) for t in self.tasks) * self.episodes_per_task

    @property
    def published_hash(self) -> str | None:
        return published_hashes().get(self.key)


def split_key(key: str) -> tuple[str, str]:
    """``"name@1"`` -> ``("name", "1")``; a clear error for anything else."""
    name, sep, version = key.partition("@")
    if not sep or not name or not version:
        raise ConfigurationError(
            f"a suite is named NAME@VERSION (e.g. minihack-nav@1), got {key!r}; "
            f"known: {', '.join(suite_keys())}"
        )
    return name, version


def suite_keys() -> list[str]:
    """Every shipped suite version, sorted."""
    return sorted(p.stem for p in SUITES_DIR.glob("*@*.json"))


def published_hashes() -> dict[str, str]:
    """The committed content hash of every suite version."""
    if not HASHES_FILE.exists():
        return {}
    return json.loads(HASHES_FILE.read_text(encoding="utf-8"))


def load_suite(key: str) -> Suite:
    """The suite ``NAME@VERSION`` from :data:`SUITES_DIR`."""
    name, version = split_key(key)
    path = SUITES_DIR / f"{name}@{version}.json"
    if not path.exists():
        raise ConfigurationError(f"no suite {key!r}; known: {', '.join(suite_keys())}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        tasks = [
            SuiteTask(
                name=t["name"],
                env_id=t["env_id"],
                seeds=list(
                    range(
                        t["task_seeds"]["start"],
                        t["task_seeds"]["start"] + t["task_seeds"]["count"],
                    )
                ),
                env_kwargs=dict(t.get("env_kwargs", {})),
                max_steps=t.get("max_steps"),
            )
            for t in data["tasks"]
        ]
        suite = Suite(
            name=data["name"],
            version=str(data["version"]),
            description=data.get("description", ""),
            tasks=tasks,
            episodes_per_task=int(data.get("episodes_per_task", 1)),
            requires_data=data.get("requires_data"),
            definition=data,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(path, f"not a suite definition ({exc!r})") from exc
    if suite.key != key:
        raise DataError(path, f"names itself {suite.key!r}, not {key!r}")
    return suite


# --------------------------------------------------------------------------------------------
# Content hashing
# --------------------------------------------------------------------------------------------
def _env_kwargs(task: SuiteTask, locations: dict[str, Any]) -> dict[str, Any]:
    """The arguments ``task``'s env is made with: its pinned ones, the data locations and its
    step limit."""
    kwargs = {**task.env_kwargs, **locations}
    if task.max_steps is not None:
        kwargs["max_steps"] = task.max_steps
    return kwargs


def _engines(*names: str) -> dict[str, str]:
    from comprl_gym.evaluation.provenance import engine_versions

    found = engine_versions()
    return {name: found.get(name, "absent") for name in names}


def _family(task: SuiteTask) -> FamilySpec:
    entry = ENV_TABLE.get(task.env_id)
    spec = family_spec(entry.family) if entry is not None else None
    if spec is None:
        raise ConfigurationError(f"suite task {task.name!r}: {task.env_id} is not registered")
    return spec


def task_content(task: SuiteTask, locations: dict[str, Any] | None = None) -> dict[str, Any]:
    """What decides what ``task`` plays, as hashes: what its family says
    (:meth:`~comprl_gym.families.FamilySpec.content_of`) and its engines' versions."""
    spec = _family(task)
    kwargs = _env_kwargs(task, dict(locations or {}))
    content: dict[str, Any] = {
        "family": spec.name,
        **spec.content_of(task.seeds, kwargs, lambda: gym.make(task.env_id, **kwargs)),
    }
    if spec.suite_engines:
        content["engines"] = _engines(*spec.suite_engines)
    return content


def suite_content(suite: Suite, locations: dict[str, Any] | None = None) -> dict[str, Any]:
    """Per task, what decides what it plays (:func:`task_content`)."""
    return {task.name: task_content(task, locations) for task in suite.tasks}


def suite_hash(suite: Suite, locations: dict[str, Any] | None = None) -> str:
    """The content hash: the definition and :func:`suite_content`, as one SHA-256."""
    return json_sha256({"definition": suite.definition, "content": suite_content(suite, locations)})


# --------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------
def _locations(suite: Suite, env_kwargs: dict[str, Any]) -> dict[str, Any]:
    pinned = sorted(set(env_kwargs) - LOCATION_KWARGS)
    if pinned:
        raise ConfigurationError(
            f"suite {suite.key} pins the env arguments; only {sorted(LOCATION_KWARGS)} may be "
            f"given, not {pinned} (a different setting is a different benchmark: write a suite)"
        )
    return dict(env_kwargs)


def _check_data(suite: Suite, task: SuiteTask, locations: dict[str, Any]) -> None:
    """A clear refusal when a suite that needs data (``requires_data``) would play games that
    are not here (the family's :meth:`~comprl_gym.families.FamilySpec.data_missing`)."""
    if not suite.requires_data:
        return
    missing = _family(task).data_missing(_env_kwargs(task, locations))
    if missing:
        raise ConfigurationError(f"suite {suite.key} plays {missing}")


def suite_record(suite: Suite, content_hash: str) -> dict[str, Any]:
    """What a run stores about its suite (provenance, config.json)."""
    published = suite.published_hash
    return {
        "name": suite.name,
        "version": suite.version,
        "key": suite.key,
        "hash": content_hash,
        "published_hash": published,
        "matches_published": content_hash == published,
        "episodes_expected": suite.episodes,
        "tasks": [asdict(t) for t in suite.tasks],
    }


def run_suite(config: Any) -> dict[str, Any]:
    """Play ``config.suite`` (an ``EvalConfig``): one eval run per task entry under
    ``OUT/tasks/<name>/``, merged into ``OUT/episodes.jsonl`` with keys ``<task>|...``; the
    summary and ``provenance.json`` (with the suite's hash) are written into ``OUT``."""
    from comprl_gym.evaluation.provenance import write_provenance

    started = time.time()
    suite = load_suite(config.suite)
    locations = _locations(suite, config.env_kwargs)
    if config.env_ids:
        raise ConfigurationError("give either env ids or --suite, not both")
    if config.max_steps is not None or config.task_seed_offset:
        raise ConfigurationError(f"suite {suite.key} pins step limits and task seeds")
    seeds = list(config.seeds)
    if len(seeds) != suite.episodes_per_task:
        raise ConfigurationError(
            f"suite {suite.key} plays each task {suite.episodes_per_task} time(s): give "
            f"{suite.episodes_per_task} agent seed(s), not {len(seeds)}"
        )
    for task in suite.tasks:
        _check_data(suite, task, locations)
    out = Path(config.out_dir)
    if (out / evaluation.EPISODES_FILE).exists() and not config.resume:
        raise ConfigurationError(
            f"{out} already holds results; pass --resume to continue that run, or choose another --out"
        )
    logger.info("hashing the content of %s", suite.key)
    content_hash = suite_hash(suite, locations)
    record = suite_record(suite, content_hash)
    if not record["matches_published"]:
        logger.warning(
            "%s: the content here hashes to %s, not the published %s: its rows rank apart",
            suite.key,
            content_hash[:12],
            (suite.published_hash or "none")[:12],
        )
    merged: list[dict[str, Any]] = []
    for task in suite.tasks:
        part = replace(
            config,
            suite=None,
            env_ids=[task.env_id],
            episodes=len(task.seeds),
            task_seed_offset=task.seeds[0],
            max_steps=task.max_steps,
            env_kwargs={**task.env_kwargs, **locations},
            out_dir=out / TASKS_DIR / task.name,
            resume=config.resume and (out / TASKS_DIR / task.name).exists(),
        )
        evaluation.run_eval(part)
        for episode in evaluation.load_episodes(part.out_dir):
            episode["key"] = f"{task.name}|{episode['key']}"
            episode["suite_task"] = task.name
            merged.append(episode)
    atomic_write_text(
        out / evaluation.EPISODES_FILE,
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in merged),
    )
    atomic_write_json(
        out / evaluation.CONFIG_FILE,
        {
            "identity": config.identity(),
            "config": jsonable(asdict(config)),
            "env_ids": sorted({t.env_id for t in suite.tasks}),
            "suite": record,
            # each pinned task's pool, by task name (the leaderboard shows them)
            "pools": {
                task.name: asdict(pool)
                for task in suite.tasks
                if (pool := env_pool(task.env_id, task.env_kwargs)) is not None
            },
        },
    )
    summary = evaluation.summarize(merged, paired=config.paired_experience)
    summary["suite"] = {k: record[k] for k in ("key", "hash", "matches_published")}
    evaluation.write_summary(out, summary)
    write_provenance(out, config, time.time() - started, suite=record)
    return summary


def main_hashes(write: bool = False) -> dict[str, str]:
    """Recompute every suite's hash (``python -m comprl_gym.evaluation.suites --write`` after a
    version bump writes them to :data:`HASHES_FILE`)."""
    from tqdm import tqdm

    hashes = {}
    for key in tqdm(suite_keys(), desc="hashing suites", unit="suite"):
        suite = load_suite(key)
        locations = _default_locations(suite)
        if locations is None:
            logger.warning("%s: its data is not here; hash kept as published", key)
            if suite.published_hash:
                hashes[key] = suite.published_hash
            continue
        hashes[key] = suite_hash(suite, locations)
    if write:
        atomic_write_json(HASHES_FILE, hashes)
    return hashes


def _default_locations(suite: Suite) -> dict[str, Any] | None:
    """Where this machine keeps a suite's data (``$ALFWORLD_OFFICIAL``), or ``None``."""
    if suite.requires_data != "alfworld":
        return {}
    root = os.environ.get("COMPRL_ALFWORLD_OFFICIAL")
    return {"data_dir": root} if root else None


if __name__ == "__main__":  # pragma: no cover
    import sys

    for key, value in main_hashes(write="--write" in sys.argv).items():
        print(f"{key}  {value}")
