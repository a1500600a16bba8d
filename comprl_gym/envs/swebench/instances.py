"""SWE-bench instances: the embedded suite, JSON/JSONL/parquet files, or a Hugging Face dataset.

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
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from comprl_gym.core import ConfigurationError, DataError, EnvBackendError
from comprl_gym.envs.swebench.images import DEPS_MOUNT

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
    if path.suffix == ".parquet":
        return _read_parquet(path)
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


def _read_parquet(path: Path) -> list[dict[str, Any]]:
    """Rows of a parquet file (the format of SWE-bench's Hugging Face datasets)."""
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise ConfigurationError(f"reading {path} needs pyarrow (pip install pyarrow)") from exc
    try:
        return pq.read_table(path).to_pylist()
    except (OSError, ValueError) as exc:  # pyarrow.ArrowInvalid is a ValueError
        raise DataError(path, f"not a readable parquet file: {exc}") from exc


def _offline() -> bool:
    return any(
        os.environ.get(v, "") not in ("", "0") for v in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")
    )


def _read_hf(name: str, split: str) -> list[dict[str, Any]]:
    """A Hugging Face dataset: from the local cache, downloaded first when online."""
    try:
        import datasets
    except ImportError as exc:
        raise ConfigurationError(
            f"dataset={name!r} is neither a file nor loadable: the 'datasets' package is not "
            "installed (pip install datasets)"
        ) from exc
    offline = _offline()
    try:
        return [dict(row) for row in datasets.load_dataset(name, split=split)]
    except Exception as exc:  # noqa: BLE001 - datasets raises many kinds
        if offline:
            raise ConfigurationError(
                f"dataset {name!r} (split {split!r}) is not in the local Hugging Face cache "
                f"and this process is offline (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE) "
                f"({type(exc).__name__}: {exc}); download it once with network access, or "
                "pass a JSON/JSONL/parquet file of instances"
            ) from exc
        raise ConfigurationError(
            f"dataset {name!r} (split {split!r}) could not be loaded or downloaded "
            f"({type(exc).__name__}: {exc}); check the name and the network, or pass a "
            "JSON/JSONL/parquet file of instances"
        ) from exc


def load_instances(
    dataset: str | Path | list[dict[str, Any]] | None = None,
    instance_ids: list[str] | None = None,
    split: str = "test",
) -> list[dict[str, Any]]:
    """Load instances: ``None`` = the embedded suite, a ``.json``/``.jsonl``/``.parquet`` path,
    or a Hugging Face dataset name (from the local ``datasets`` cache, downloaded first when
    online), or instance dicts themselves."""
    if isinstance(dataset, list):
        source, rows = "<instances>", dataset
    elif dataset is None:
        source, rows = str(EMBEDDED_INSTANCES), _read_file(EMBEDDED_INSTANCES)
    elif Path(dataset).suffix in (".json", ".jsonl", ".parquet") or Path(dataset).exists():
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


@dataclass(frozen=True)
class TestbedEnv:
    """What a repository needs in the sandbox beyond the base (an instance's ``environment``).

    Attributes:
        requirements: pinned PyPI requirements, mounted read-only at ``/opt/comprl-deps``.
        pythonpath: folders of the repository (relative to ``/testbed``) put on ``PYTHONPATH``.
        generated_files: files a build step would write (a ``_version.py`` of hatch-vcs), written
            into the checkout and kept out of ``git diff`` by ``.git/info/exclude``.
        pytest_args: extra arguments of the grading ``pytest`` run.

    Example:
        >>> env = TestbedEnv.of({"environment": {"requirements": ["pytest==9.0.2"],
        ...                                      "pythonpath": ["src"]}})
        >>> env.pythonpath_value()
        '/testbed/src:/opt/comprl-deps'
        >>> TestbedEnv.of({}).pythonpath_value()
        '/testbed'
    """

    __test__ = False  # not a pytest test class, whatever its name says

    requirements: tuple[str, ...] = ()
    pythonpath: tuple[str, ...] = (".",)
    generated_files: dict[str, str] = field(default_factory=dict)
    pytest_args: tuple[str, ...] = ()

    @classmethod
    def of(cls, instance: dict[str, Any]) -> TestbedEnv:
        raw = instance.get("environment") or {}
        return cls(
            requirements=tuple(raw.get("requirements", ())),
            pythonpath=tuple(raw.get("pythonpath", (".",))),
            generated_files=dict(raw.get("generated_files", {})),
            pytest_args=tuple(raw.get("pytest_args", ())),
        )

    def pythonpath_value(self) -> str:
        """The sandbox's ``PYTHONPATH``: the repository first, then its dependencies."""
        paths = ["/testbed" if p in (".", "") else f"/testbed/{p}" for p in self.pythonpath]
        return ":".join(paths + ([DEPS_MOUNT] if self.requirements else []))

    def write_generated_files(self, testbed: Path) -> None:
        """Write :attr:`generated_files` into a checkout, excluded from its ``git diff``."""
        if not self.generated_files:
            return
        exclude = testbed / ".git" / "info" / "exclude"
        exclude.parent.mkdir(parents=True, exist_ok=True)
        with open(exclude, "a") as handle:
            for path, text in self.generated_files.items():
                (testbed / path).parent.mkdir(parents=True, exist_ok=True)
                (testbed / path).write_text(text)
                handle.write(f"/{path}\n")


def embedded_repo_source(repo: str) -> Path | None:
    """The git bundle the project ships for an embedded repository, if any."""
    owner, _, name = repo.partition("/")
    bundle = TASKS_DIR / f"{name}.bundle"
    return bundle if owner == "comprl-gym" and bundle.exists() else None


#: Leaves a clone with nothing later than its checked-out commit: every ref, reflog, stash and
#: remote goes, then a repack keeps only what HEAD (detached at the base) reaches. Future
#: commits of the upstream history (where the fix lives) are then gone from ``.git``, not just
#: hidden (agents were seen to ``git log --all`` their way to the fix).
HISTORY_SCRUB = r"""
set -e
for remote in $(git remote); do git remote remove "$remote"; done
git for-each-ref --format='%(refname)' | while read -r ref; do git update-ref -d "$ref"; done
git stash clear
git reflog expire --expire=now --expire-unreachable=now --all
rm -rf .git/logs .git/ORIG_HEAD .git/FETCH_HEAD .git/MERGE_HEAD .git/refs/original
git -c gc.auto=0 repack -a -d -q
git prune --expire=now
"""


def checkout_testbed(source: Path, base_commit: str, target: Path) -> Path:
    """Clone ``source`` (a git repository or bundle) into ``target`` at ``base_commit``, with
    the history after it removed (see :data:`HISTORY_SCRUB`)."""
    steps = [
        ["git", "clone", "-q", "--no-checkout", str(source), str(target)],
        ["git", "-C", str(target), "checkout", "-q", "--detach", base_commit],
        ["bash", "-c", HISTORY_SCRUB],
    ]
    for step in steps:
        run = subprocess.run(
            step, capture_output=True, text=True, cwd=target if step[0] == "bash" else None
        )
        if run.returncode != 0:
            raise EnvBackendError(f"{' '.join(step[:3])} failed: {run.stderr.strip()}")
    return target
