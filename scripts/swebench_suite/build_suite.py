"""Maintainer tool: regenerate the embedded SWE-bench suite (git bundles + instances.json).

The suite is three small Python libraries with a few commits of history each, described in
``repos/*.yaml`` beside this script: the files each commit writes, and the tasks. Every task
is a real bug present at the repository's base commit, with a GitHub-issue-style report, a
gold fix (exact text replacements; the patch is their ``git diff``), new tests (text appended
to test files; the test patch is their diff), and FAIL_TO_PASS / PASS_TO_PASS measured by
running pytest on the host before and after the gold fix.

The fixes are never committed, so an agent cannot find them in the shipped history. The
output is deterministic (fixed author, committer and dates), so a rebuild of unchanged YAML
reproduces the shipped bundles byte for byte.

Run from the repository root (needs git, pytest and swebench; writes into the package)::

    python scripts/swebench_suite/build_suite.py [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml
from swebench.harness.log_parsers.python import parse_log_pytest

from comprl_gym.envs.swebench.instances import EMBEDDED_INSTANCES, TASKS_DIR

REPOS_DIR = Path(__file__).resolve().parent / "repos"
#: The repositories in the order their instances are listed.
REPOS = ("textkit", "intervals", "kvconf")
OWNER = "comprl-gym"
VERSION = "0.1"
_IDENTITY = {
    "GIT_AUTHOR_NAME": "comprl-gym",
    "GIT_AUTHOR_EMAIL": "suite@comprl-gym.invalid",
    "GIT_COMMITTER_NAME": "comprl-gym",
    "GIT_COMMITTER_EMAIL": "suite@comprl-gym.invalid",
}


def load_repo(name: str) -> dict[str, Any]:
    """One repository's description: ``name``, ``commits`` (message, files) and ``tasks``."""
    return yaml.safe_load((REPOS_DIR / f"{name}.yaml").read_text(encoding="utf-8"))


def _git(cwd: Path, *args: str, date: str | None = None) -> str:
    env = dict(os.environ, **_IDENTITY)
    if date:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = date
    out = subprocess.run(
        ["git", "-c", "init.defaultBranch=main", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout


def _pytest_status(repo_dir: Path, test_files: list[str]) -> dict[str, str]:
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", *test_files],
        cwd=repo_dir,
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"),
    )
    return parse_log_pytest(run.stdout, None)


def _edit(repo_dir: Path, path: str, old: str, new: str) -> None:
    file = repo_dir / path
    text = file.read_text()
    if text.count(old) != 1:
        raise SystemExit(f"{path}: the text to replace occurs {text.count(old)} times: {old!r}")
    file.write_text(text.replace(old, new))


def build_repo(repo: dict[str, Any], workdir: Path, out_dir: Path) -> list[dict[str, Any]]:
    """Commit the repository's history, bundle it into ``out_dir``, measure its tasks."""
    repo_dir = workdir / repo["name"]
    repo_dir.mkdir()
    _git(repo_dir, "init", "-q")
    for index, commit in enumerate(repo["commits"]):
        for path, content in commit["files"].items():
            (repo_dir / path).parent.mkdir(parents=True, exist_ok=True)
            (repo_dir / path).write_text(content)
        _git(repo_dir, "add", "-A")
        _git(
            repo_dir,
            "commit",
            "-q",
            "-m",
            commit["message"],
            date=f"2025-0{index + 1}-15T10:00:00+00:00",
        )
    base_commit = _git(repo_dir, "rev-parse", "HEAD").strip()
    _git(repo_dir, "bundle", "create", str(out_dir / f"{repo['name']}.bundle"), "HEAD", "main")
    instances = []
    for task in repo["tasks"]:
        for test in task["tests"]:
            with open(repo_dir / test["path"], "a") as handle:
                handle.write(test["append"])
        test_patch = _git(repo_dir, "diff")
        test_files = sorted({test["path"] for test in task["tests"]})
        before = _pytest_status(repo_dir, test_files)
        for fix in task["fix"]:
            _edit(repo_dir, fix["path"], fix["old"], fix["new"])
        after = _pytest_status(repo_dir, test_files)
        _git(repo_dir, "checkout", "-q", "--", *test_files)
        patch = _git(repo_dir, "diff")
        _git(repo_dir, "checkout", "-q", "--", ".")
        passed = sorted(t for t, s in after.items() if s == "PASSED")
        fail_to_pass = [t for t in passed if before.get(t) != "PASSED"]
        pass_to_pass = [t for t in passed if before.get(t) == "PASSED"]
        if not fail_to_pass or len(passed) != len(after):
            raise SystemExit(f"{repo['name']}-{task['number']}: gold patch does not pass: {after}")
        instances.append(
            {
                "instance_id": f"{OWNER}__{repo['name']}-{task['number']}",
                "repo": f"{OWNER}/{repo['name']}",
                "base_commit": base_commit,
                "environment_setup_commit": base_commit,
                "version": VERSION,
                "problem_statement": task["problem_statement"],
                "hints_text": task.get("hints_text", ""),
                "patch": patch,
                "test_patch": test_patch,
                "FAIL_TO_PASS": json.dumps(fail_to_pass),
                "PASS_TO_PASS": json.dumps(pass_to_pass),
                "created_at": f"2025-06-{task['number']:02d}T12:00:00Z",
            }
        )
    return instances


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out", type=Path, default=TASKS_DIR, help="where bundles and instances.json go"
    )
    out_dir = parser.parse_args(argv).out
    out_dir.mkdir(parents=True, exist_ok=True)
    instances: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in REPOS:
            instances.extend(build_repo(load_repo(name), Path(tmp), out_dir))
    (out_dir / EMBEDDED_INSTANCES.name).write_text(json.dumps(instances, indent=1) + "\n")
    print(f"wrote {len(instances)} instances and {len(REPOS)} bundles to {out_dir}")


if __name__ == "__main__":
    main()
