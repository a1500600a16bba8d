"""The real-repository suite: SWE-bench tasks derived from upstream bug fixes at build time.

The package ships only a manifest (``tasks/real_suite.json``): per repository its licence and
what its tests need in the sandbox (pinned PyPI requirements, import path); per task the fix
commit, its parent (the base), the library and test files the fix touched, a problem statement
written from the commit message and changelog, and FAIL_TO_PASS / PASS_TO_PASS measured by
running the tests. Upstream code never enters the package: the gold patch (the fix's library
diff) and the test patch (its test diff) are derived from the ``swe-repos`` git bundles into
the cache, with each repository's licence files copied beside them.

The sandbox's checkout is the base commit with every later commit, ref and reflog removed
(:data:`~comprl_gym.envs.swebench.instances.HISTORY_SCRUB`), so the fix is not in ``.git``.

Example (needs the bundles):
    import gymnasium as gym, comprl_gym
    env = gym.make("comprl/SWEBench-v0", suite="real", data_dir="../shared/data/swe-repos")

Example:
    >>> from comprl_gym.envs.swebench.real_suite import load_manifest
    >>> manifest = load_manifest()
    >>> len(manifest["tasks"]) >= 24, len(manifest["repos"]) >= 6
    (True, True)
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from comprl_gym.core import ConfigurationError, DataError, EnvBackendError
from comprl_gym.envs.swebench.instances import TASKS_DIR
from comprl_gym.utils import atomic_write_json, cache_dir, file_lock

MANIFEST = TASKS_DIR / "real_suite.json"
#: Environment variable naming the ``swe-repos`` folder (bundles, ``licenses/``).
DATA_DIR_ENV = "COMPRL_SWE_REPOS"


def load_manifest(path: Path = MANIFEST) -> dict[str, Any]:
    """The committed manifest: ``repos`` (licence, bundle, environment) and ``tasks``."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise DataError(path, f"cannot read the real-suite manifest: {exc}") from exc


def find_data_dir(data_dir: str | os.PathLike[str] | None = None) -> Path:
    """The ``swe-repos`` folder: ``data_dir``, ``$COMPRL_SWE_REPOS`` or
    ``$COMPRL_SHARED_DATA/swe-repos``; a clear error when none holds the bundles.

    ``data_dir`` may also name the folder above ``swe-repos`` (the shared data folder).
    """
    candidates = [data_dir, os.environ.get(DATA_DIR_ENV)]
    if os.environ.get("COMPRL_SHARED_DATA"):
        candidates.append(Path(os.environ["COMPRL_SHARED_DATA"]) / "swe-repos")
    for candidate in candidates:
        if not candidate:
            continue
        path = Path(candidate)
        if (path / "swe-repos").is_dir():
            path = path / "swe-repos"
        if any(path.glob("*.bundle")):
            return path
        if data_dir is not None:
            raise ConfigurationError(f"data_dir={str(data_dir)!r} holds no git bundles (*.bundle)")
    raise ConfigurationError(
        "the real-repository suite is derived from the swe-repos git bundles: pass "
        f"data_dir='/path/to/swe-repos' or set {DATA_DIR_ENV} (nothing is downloaded)"
    )


def _git(repo: Path, *args: str) -> str:
    run = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if run.returncode != 0:
        raise EnvBackendError(f"git {' '.join(args[:3])} in {repo} failed: {run.stderr.strip()}")
    return run.stdout


def _bundle_name(repo: str) -> str:
    return repo.replace("/", "__")


def mirror(data_dir: Path, repo: str) -> Path:
    """A bare clone of ``repo``'s bundle in the cache (host only; never enters a sandbox)."""
    bundle = data_dir / f"{_bundle_name(repo)}.bundle"
    if not bundle.exists():
        raise ConfigurationError(f"{bundle} is missing: the real suite needs the bundle of {repo}")
    stamp = hashlib.sha256(f"{bundle.resolve()}|{bundle.stat().st_size}".encode()).hexdigest()[:8]
    target = cache_dir("swebench", "real", "mirrors") / f"{_bundle_name(repo)}-{stamp}.git"
    if (target / "HEAD").exists():
        return target
    with file_lock(target.with_suffix(".lock")):
        if (target / "HEAD").exists():
            return target
        partial = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        try:
            run = subprocess.run(
                ["git", "clone", "-q", "--bare", str(bundle), str(partial / "m.git")],
                capture_output=True,
                text=True,
            )
            if run.returncode != 0:
                raise EnvBackendError(f"cloning {bundle} failed: {run.stderr.strip()}")
            os.rename(partial / "m.git", target)
        finally:
            shutil.rmtree(partial, ignore_errors=True)
    return target


def repo_sources(data_dir: Path, manifest: dict[str, Any] | None = None) -> dict[str, str]:
    """``{"owner/name": mirror}`` for every repository of the manifest."""
    manifest = manifest or load_manifest()
    return {repo: str(mirror(data_dir, repo)) for repo in manifest["repos"]}


def derive_instance(
    source: Path, task: dict[str, Any], repo_spec: dict[str, Any]
) -> dict[str, Any]:
    """One SWE-bench instance from a manifest task: gold patch = the fix's library diff, test
    patch = its test diff, both against the fix's parent (the base)."""
    base, fix = task["base_commit"], task["fix_commit"]
    parent = _git(source, "rev-parse", f"{fix}^").strip()
    if parent != base:
        raise DataError(MANIFEST, f"{task['instance_id']}: base {base} is not the parent of {fix}")
    patch = _git(source, "diff", "--no-color", "--no-ext-diff", base, fix, "--", *task["src_files"])
    test_patch = _git(
        source, "diff", "--no-color", "--no-ext-diff", base, fix, "--", *task["test_files"]
    )
    if not patch or not test_patch:
        raise DataError(MANIFEST, f"{task['instance_id']}: the fix has no library or test diff")
    return {
        **task,
        "patch": patch,
        "test_patch": test_patch,
        "hints_text": "",
        "version": "",
        "environment_setup_commit": base,
        "environment": repo_spec.get("environment", {}),
        "license": repo_spec["license"],
    }


def load_real_suite(
    data_dir: str | os.PathLike[str] | None = None, manifest_path: Path = MANIFEST
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Derive (once, into the cache) the suite's instances; return them and the repository
    sources (``repo_sources`` for :class:`~comprl_gym.envs.swebench.env.SWEBenchConfig`).

    The derived ``instances.json`` sits in ``<cache>/swebench/real/<manifest hash>/`` with
    ``licenses/`` (every repository's licence and notice files) beside it.
    """
    root = find_data_dir(data_dir)
    manifest = load_manifest(manifest_path)
    sources = repo_sources(root, manifest)
    digest = hashlib.sha256(Path(manifest_path).read_bytes()).hexdigest()[:12]
    folder = cache_dir("swebench", "real", digest)
    derived = folder / "instances.json"
    if not derived.exists():
        with file_lock(folder / ".lock"):
            if not derived.exists():
                _copy_licences(root, manifest, folder / "licenses")
                instances = [
                    derive_instance(
                        Path(sources[task["repo"]]), task, manifest["repos"][task["repo"]]
                    )
                    for task in manifest["tasks"]
                ]
                atomic_write_json(derived, instances)
    return json.loads(derived.read_text()), sources


def _copy_licences(data_dir: Path, manifest: dict[str, Any], target: Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    for repo, spec in manifest["repos"].items():
        for name in spec["license_files"]:
            source = data_dir / "licenses" / name
            if not source.exists():
                raise ConfigurationError(
                    f"{source} is missing: derived tasks of {repo} must carry its licence"
                )
            shutil.copy2(source, target / name)


def _fix_blobs(source: Path, instance: dict[str, Any]) -> set[str]:
    """Hashes of every file as the fix commit wrote it (library and tests)."""
    files = [*instance["src_files"], *instance["test_files"]]
    listing = _git(source, "ls-tree", instance["fix_commit"], "--", *files)
    return {line.split()[2] for line in listing.splitlines()}


def _new_test_line(source: Path, instance: dict[str, Any]) -> str | None:
    """The longest line the test patch adds that no file of the base commit holds (``None``
    when every added line exists already, e.g. a one-line change to a parametrize list)."""
    added = {
        line[1:].strip()
        for line in instance["test_patch"].splitlines()
        if line.startswith("+") and not line.startswith("+++") and line[1:].strip()
    }
    for line in sorted(added, key=len, reverse=True):
        found = subprocess.run(
            ["git", "-C", str(source), "grep", "-qF", "-e", line, instance["base_commit"]],
            capture_output=True,
        )
        if found.returncode == 1:
            return line
    return None


def audit_sandbox(sandbox: Any, instance: dict[str, Any], source: Path) -> list[str]:
    """What an agent in ``sandbox`` could find of the task's answer; empty when nothing.

    Looks for: commits, refs, reflogs or stashes beyond the base's ancestry; any git object
    (loose or packed) whose hash is a file of the fix (library or tests) or the fix commit or
    the upstream tip; any file under the writable and added folders with such content; and
    anywhere on the file system, a line only the hidden tests add.
    """
    source = Path(source)
    leaks = []
    blobs = _fix_blobs(source, instance)
    tip = _git(source, "rev-parse", "HEAD").strip()
    objects = sandbox.run(
        "git cat-file --batch-all-objects --batch-check='%(objectname)' && echo DONE",
        300, head_bytes=256 << 20, tail_bytes=0,
    ).output.split()  # fmt: skip
    if objects[-1:] != ["DONE"] or len(objects) < 10:
        return [f"could not list the objects of .git: {' '.join(objects[-5:])}"]
    found = set(objects)
    leaks += [f"a file of the fix is in .git: {blob}" for blob in sorted(found & blobs)]
    leaks += [f"commit {sha} is in .git" for sha in (instance["fix_commit"], tip) if sha in found]
    history = sandbox.run(
        "git for-each-ref; git stash list; git reflog --all 2>/dev/null; "
        "ls .git/logs 2>/dev/null; echo commits $(git rev-list --all | wc -l) "
        "$(git rev-list HEAD | wc -l)",
        120,
    ).output.strip()
    counts = re.search(r"commits (\d+) (\d+)$", history)
    if not counts or counts[1] != counts[2]:
        leaks.append(f"commits beyond the base's ancestry: {history[-300:]}")
    if counts and history[: counts.start()].strip():
        leaks.append(f"refs, stashes or reflogs: {history[: counts.start()].strip()[:300]}")
    hashed = sandbox.run(
        "find /testbed /tmp /home /opt /run -type f -print0 2>/dev/null"
        " | xargs -0 -r git hash-object --no-filters 2>/dev/null | sort -u; echo DONE",
        600, head_bytes=256 << 20, tail_bytes=0,
    ).output.split()  # fmt: skip
    leaks += [f"a file with the fix's content: {blob}" for blob in sorted(set(hashed) & blobs)]
    needle = _new_test_line(source, instance)
    if needle is not None:
        grep = sandbox.run(
            "grep -rIlF --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev -e "
            f"{shlex.quote(needle)} / 2>/dev/null; echo DONE",
            600,
        ).output.split()
        leaks += [f"a hidden test line is in {path}" for path in grep if path != "DONE"]
    return leaks
