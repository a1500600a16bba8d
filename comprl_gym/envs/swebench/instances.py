"""SWE-bench instances: the embedded suite, JSON/JSONL files, or a cached Hugging Face dataset.

Instances keep SWE-bench's classic schema (``instance_id, repo, base_commit, patch,
test_patch, problem_statement, hints_text, version, FAIL_TO_PASS, PASS_TO_PASS,
environment_setup_commit``); FAIL_TO_PASS/PASS_TO_PASS may be JSON strings or lists and are
returned as lists.

Example:
    >>> from comprl_gym.envs.swebench.instances import load_instances
    >>> suite = load_instances()
    >>> len(suite) >= 12, suite[0]["repo"]
    (True, 'comprl-gym/textkit')
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from comprl_gym.core import ConfigurationError, DataError, EnvBackendError

TASKS_DIR = Path(__file__).resolve().parent / "tasks"
EMBEDDED_INSTANCES = TASKS_DIR / "instances.json"

REQUIRED_KEYS = (
    "instance_id",
    "repo",
    "base_commit",
    "patch",
    "test_patch",
    "problem_statement",
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
)


def _normalise(raw: dict[str, Any], source: str) -> dict[str, Any]:
    missing = [key for key in REQUIRED_KEYS if key not in raw]
    if missing:
        raise DataError(
            source,
            f"instance {raw.get('instance_id', '?')!r} lacks {', '.join(missing)}",
            "instances use SWE-bench's classic schema",
        )
    instance = dict(raw)
    for key in ("FAIL_TO_PASS", "PASS_TO_PASS"):
        value = instance[key]
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError as exc:
                raise DataError(source, f"{instance['instance_id']}: {key} is not JSON") from exc
        instance[key] = list(value)
    instance.setdefault("hints_text", "")
    instance.setdefault("version", "")
    instance.setdefault("environment_setup_commit", instance["base_commit"])
    return instance


def _read_file(path: Path) -> list[dict[str, Any]]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise DataError(path, f"cannot read: {exc}") from exc
    if path.suffix == ".jsonl":
        rows = []
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except ValueError as exc:
                    raise DataError(path, f"line {number} is not JSON: {exc}") from exc
        return rows
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise DataError(path, f"not JSON: {exc}", "use a JSON list or JSONL") from exc
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        raise DataError(path, "expected a list of instances")
    return data


def _read_hf(name: str, split: str) -> list[dict[str, Any]]:
    try:
        import datasets
    except ImportError as exc:
        raise ConfigurationError(
            f"dataset={name!r} is neither a file nor loadable: the 'datasets' package is not "
            "installed (pip install datasets), and nothing is downloaded at run time"
        ) from exc
    try:
        datasets.config.HF_DATASETS_OFFLINE = True
        return [dict(row) for row in datasets.load_dataset(name, split=split)]
    except Exception as exc:  # noqa: BLE001 - datasets raises many kinds
        raise ConfigurationError(
            f"dataset {name!r} (split {split!r}) is not in the local Hugging Face cache "
            f"({type(exc).__name__}: {exc}); download it once with network access, or pass a "
            "JSON/JSONL file of instances"
        ) from exc


def load_instances(
    dataset: str | Path | None = None,
    instance_ids: list[str] | None = None,
    split: str = "test",
) -> list[dict[str, Any]]:
    """Load instances: ``None`` = the embedded suite, a ``.json``/``.jsonl`` path, or a Hugging
    Face dataset name found in the local ``datasets`` cache."""
    if dataset is None:
        source, rows = str(EMBEDDED_INSTANCES), _read_file(EMBEDDED_INSTANCES)
    elif Path(dataset).suffix in (".json", ".jsonl") or Path(dataset).exists():
        source, rows = str(dataset), _read_file(Path(dataset))
    else:
        source, rows = str(dataset), _read_hf(str(dataset), split)
    instances = [_normalise(row, source) for row in rows]
    if instance_ids is not None:
        by_id = {inst["instance_id"]: inst for inst in instances}
        unknown = [i for i in instance_ids if i not in by_id]
        if unknown:
            raise ConfigurationError(f"unknown instance ids {unknown} in {source}")
        instances = [by_id[i] for i in instance_ids]
    if not instances:
        raise DataError(source, "no instances")
    return instances


def embedded_repo_source(repo: str) -> Path | None:
    """The git bundle the project ships for an embedded repository, if any."""
    owner, _, name = repo.partition("/")
    bundle = TASKS_DIR / f"{name}.bundle"
    return bundle if owner == "comprl-gym" and bundle.exists() else None


def checkout_testbed(source: Path, base_commit: str, target: Path) -> Path:
    """Clone ``source`` (a git repository or bundle) into ``target`` at ``base_commit``."""
    steps = [
        ["git", "clone", "-q", "--no-checkout", str(source), str(target)],
        ["git", "-C", str(target), "checkout", "-q", "--detach", base_commit],
        ["git", "-C", str(target), "remote", "remove", "origin"],
    ]
    for step in steps:
        run = subprocess.run(step, capture_output=True, text=True)
        if run.returncode != 0:
            raise EnvBackendError(f"{' '.join(step)} failed: {run.stderr.strip()}")
    return target
