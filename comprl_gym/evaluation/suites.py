"""Versioned benchmark suites: ``comprl-gym eval --suite NAME@VERSION``.

A suite (``suites/NAME@VERSION.json``) pins what is played: the env ids, their keyword
arguments (observation mode, split), step limits, the exact task seeds (task ``I`` of a task
entry is ``reset(seed=start + I)``) and the episodes per task (agent seeds). Its **content
hash** is one SHA-256 over the definition and everything that decides what is played, by
family: MiniHack's generated des-files, the engines' versions and the first observation of
every pinned seed; WebShop's catalog (products, prices, goals) and first observations;
ALFWorld's game files (official or generated) of every pinned seed; SWE-bench's manifest
(commit shas, tests, problem statements). :data:`PUBLISHED_HASHES` (``suites/hashes.json``)
holds the committed hash of each version: a test recomputes them, so changing anything a suite
pins without a new version fails. A run records the hash it played; the leaderboard never ranks
runs of different versions or hashes together.

Only data locations may be given at run time (``data_dir``, ``sandbox``): they change where
the content is read from, and the hash says whether it is the same content.

Example:
    >>> suite = load_suite("minihack-nav@1")
    >>> suite.key, len(suite.tasks), suite.tasks[0].seeds[:3]
    ('minihack-nav@1', 7, [10000, 10001, 10002])
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from comprl_gym.core import ConfigurationError, DataError
from comprl_gym.utils import atomic_write_json, atomic_write_text, jsonable

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
def _sha(obj: Any) -> str:
    text = json.dumps(jsonable(obj), sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _make(task: SuiteTask, locations: dict[str, Any]) -> Any:
    import gymnasium as gym

    import comprl_gym  # noqa: F401 - registers the ids

    kwargs = {**task.env_kwargs, **locations}
    if task.max_steps is not None:
        kwargs["max_steps"] = task.max_steps
    return gym.make(task.env_id, **kwargs)


def _first_observations(env: Any, seeds: list[int]) -> str:
    """What every pinned seed starts with: its task, task id and first observation."""
    digest = hashlib.sha256()
    for seed in seeds:
        obs, info = env.reset(seed=seed)
        digest.update(f"{seed}\0{info['task_id']}\0{info['task']}\0{obs}\0".encode())
    return digest.hexdigest()


def _engines(*names: str) -> dict[str, str]:
    from comprl_gym.evaluation.provenance import engine_versions

    found = engine_versions()
    return {name: found.get(name, "absent") for name in names}


def task_content(task: SuiteTask, locations: dict[str, Any] | None = None) -> dict[str, Any]:
    """What decides what ``task`` plays, as hashes (see the module docstring)."""
    from comprl_gym.evaluation.provenance import files_sha256
    from comprl_gym.registration import ENV_TABLE

    locations = dict(locations or {})
    if task.env_id not in ENV_TABLE:
        raise ConfigurationError(f"suite task {task.name!r}: {task.env_id} is not registered")
    family = ENV_TABLE[task.env_id].family
    content: dict[str, Any] = {"family": family}
    if family == "swebench":
        from comprl_gym.envs.swebench.real_suite import MANIFEST

        if task.env_kwargs.get("suite") == "real":
            content["manifest"] = files_sha256([Path(MANIFEST)])
        else:
            content["instances"] = files_sha256(
                sorted(Path(MANIFEST).parent.glob("instances.json"))
                + sorted(Path(MANIFEST).parent.glob("*.bundle"))
            )
        content["engines"] = _engines("swebench")
        return content
    env = _make(task, locations)
    try:
        inner = env.unwrapped
        if family == "alfworld":
            content["data_source"] = inner.data_source
            records = [inner.game_record(seed) for seed in task.seeds]
            content["games"] = _sha(
                [
                    (r.task_id.split("/", 1)[-1], files_sha256([r.game_file, r.traj_file]))
                    for r in records
                ]
            )
            content["engines"] = _engines("alfworld", "textworld")
            return content
        if family == "minihack":
            from comprl_gym.envs.minihack.layouts import LAYOUTS

            content["des_files"] = _sha(LAYOUTS)
            content["engines"] = _engines("minihack", "nle")
        elif family == "memory":
            from comprl_gym.envs.memory import dungeon
            from comprl_gym.envs.memory.dungeons import dungeon_des_file

            # Each task's dungeon (its side and landmark) as the des-file NetHack plays, and the
            # step limit: what the first observations cannot show.
            played = [dungeon(inner.pool[seed % len(inner.pool)]) for seed in task.seeds]
            content["des_files"] = _sha(
                [dungeon_des_file(inner.variant, d, inner.branch_length) for d in played]
            )
            content["max_steps"] = inner.max_steps
            content["engines"] = _engines("minihack", "nle")
        elif family == "webshop":
            catalog = inner.catalog
            content["catalog"] = _sha([catalog.products, catalog.prices, catalog.goals])
            content["engines"] = _engines("bm25s", "spacy")
        content["first_observations"] = _first_observations(env, task.seeds)
        return content
    finally:
        env.close()


def suite_content(suite: Suite, locations: dict[str, Any] | None = None) -> dict[str, Any]:
    """Per task, what decides what it plays (:func:`task_content`)."""
    return {task.name: task_content(task, locations) for task in suite.tasks}


def suite_hash(suite: Suite, locations: dict[str, Any] | None = None) -> str:
    """The content hash: the definition and :func:`suite_content`, as one SHA-256."""
    return _sha({"definition": suite.definition, "content": suite_content(suite, locations)})


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
    if suite.requires_data != "alfworld":
        return
    from comprl_gym.envs.alfworld.data import find_split_dir

    split = task.env_kwargs.get("split", "train")
    if find_split_dir(locations.get("data_dir"), split) is None:
        raise ConfigurationError(
            f"suite {suite.key} plays ALFWorld's official {split} games, which are not here: "
            "pass --env-arg data_dir=FOLDER (holding json_2.1.1/), or run alfworld-generated@1 "
            "(a different suite)"
        )


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
    from comprl_gym.evaluation import eval as evaluation
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
