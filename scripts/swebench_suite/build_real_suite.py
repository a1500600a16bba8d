"""Maintainer tool: measure the real-repository suite and write its manifest.

Reads ``real_tasks.yaml`` beside this script (repositories: licence, sandbox environment;
tasks: fix commit and a hand-written problem statement), derives each task from the
``swe-repos`` bundles (base = the fix's parent, gold patch = its library diff, test patch = its
test diff; file lists from the bundles' ``candidates.json``), and runs the tests in the
bubblewrap sandbox: at the base with the test patch, then with the gold patch as well.
FAIL_TO_PASS = failing before and passing with the gold patch; PASS_TO_PASS = passing in both;
tests whose ids change between runs (made from the current time) are left out.
(Flaky tests show up when benchmarks/speed/swebench.py grades the suite again, in bubblewrap
and Docker.) A task is kept when FAIL_TO_PASS is not empty, the gold
patch then resolves it and the empty patch does not. The manifest keeps ids, shas, file names,
statements and test names only: nothing upstream.

Measurements are cached (``<cache>/swebench/real/measured.json``), so editing statements and
rerunning is quick. Run from the repository root, as root (bubblewrap sandbox)::

    python scripts/swebench_suite/build_real_suite.py --data-dir ../shared/data/swe-repos
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from comprl_gym.envs.swebench.env import SandboxFactory, SWEBenchConfig
from comprl_gym.envs.swebench.grading import _status_from_log, evaluate
from comprl_gym.envs.swebench.real_suite import (
    MANIFEST,
    _git,
    derive_instance,
    find_data_dir,
    mirror,
)
from comprl_gym.utils import atomic_write_json, cache_dir

SOURCES = Path(__file__).resolve().parent / "real_tasks.yaml"
PASSED = "PASSED"


def instance_id(repo: str, sha: str) -> str:
    return f"{repo.replace('/', '__')}-{sha[:8]}"


def task_entry(data_dir: Path, candidates: dict[str, Any], task: dict[str, Any]) -> dict[str, Any]:
    """The manifest's view of a task before measurement (no test names yet)."""
    found = candidates[task["fix_commit"]]
    source = mirror(data_dir, task["repo"])
    return {
        "instance_id": instance_id(task["repo"], task["fix_commit"]),
        "repo": task["repo"],
        "fix_commit": task["fix_commit"],
        "base_commit": _git(source, "rev-parse", f"{task['fix_commit']}^").strip(),
        "created_at": found["date"],
        "src_files": found["src_files"],
        "test_files": found["test_files"],
        "problem_statement": task["problem_statement"].strip(),
        "FAIL_TO_PASS": [],
        "PASS_TO_PASS": [],
    }


def run_tests(factory: SandboxFactory, instance: dict[str, Any], patch: str) -> dict[str, str]:
    sandbox = factory.make(instance)
    try:
        report = evaluate(sandbox, instance, patch, timeout=600)
    finally:
        sandbox.close()
    status, _ = _status_from_log(instance, report.test_log)
    return status


def measure(factory: SandboxFactory, instance: dict[str, Any]) -> dict[str, Any]:
    started = time.monotonic()
    before = run_tests(factory, instance, "")
    if not before:  # the tests did not even run at the base (collection error, hang)
        return {"FAIL_TO_PASS": [], "PASS_TO_PASS": [], "failing_with_gold": [],
                "seconds": round(time.monotonic() - started, 1), "base_ran": False}  # fmt: skip
    gold = run_tests(factory, instance, instance["patch"])
    # Both runs have the test patch, so every test has a result in both, unless its id
    # changes from run to run (a parametrize id made from the current time): those cannot be
    # graded and are dropped. Only a test file that failed to collect at the base leaves its
    # tests without a result there.
    broken_files = {t for t, status in before.items() if "::" not in t and status != PASSED}
    stable = [t for t in gold if t in before or t.split("::")[0] in broken_files]
    passing_after = [t for t in stable if gold[t] == PASSED]
    f2p = sorted(t for t in passing_after if before.get(t) != PASSED)
    p2p = sorted(t for t in passing_after if before.get(t) == PASSED)
    return {
        "FAIL_TO_PASS": f2p,
        "PASS_TO_PASS": p2p,
        "failing_with_gold": sorted(t for t in stable if t not in passing_after),
        "unstable_ids": sorted(set(gold) - set(stable)),
        "seconds": round(time.monotonic() - started, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--only", nargs="*", help="fix commits (prefixes) to (re)measure")
    args = parser.parse_args()
    data_dir = find_data_dir(args.data_dir)
    sources = yaml.safe_load(SOURCES.read_text())
    candidates = {c["sha"]: c for c in json.loads((data_dir / "candidates.json").read_text())}
    cache = cache_dir("swebench", "real") / "measured.json"
    measured = json.loads(cache.read_text()) if cache.exists() else {}
    config = SWEBenchConfig(sandbox="bubblewrap")
    config.repo_sources = {repo: str(mirror(data_dir, repo)) for repo in sources["repos"]}
    factory = SandboxFactory("bubblewrap", config)
    kept, dropped = [], []
    for task in sources["tasks"]:
        entry = task_entry(data_dir, candidates, task)
        spec = sources["repos"][task["repo"]]
        instance = derive_instance(Path(config.repo_sources[task["repo"]]), entry, spec)
        sha = task["fix_commit"]
        if sha not in measured or (args.only and any(sha.startswith(o) for o in args.only)):
            measured[sha] = measure(factory, instance)
            atomic_write_json(cache, measured)
        result = measured[sha]
        print(
            f"{entry['instance_id']}: F2P {len(result['FAIL_TO_PASS'])} "
            f"P2P {len(result['PASS_TO_PASS'])} failing-with-gold "
            f"{len(result['failing_with_gold'])} ({result['seconds']} s)",
            file=sys.stderr,
        )
        if result.get("base_ran") is False:
            dropped.append((entry["instance_id"], "the tests do not run at the base"))
            continue
        if not result["FAIL_TO_PASS"]:
            dropped.append((entry["instance_id"], "no test fails before and passes after"))
            continue
        if not entry["problem_statement"]:
            dropped.append((entry["instance_id"], "no problem statement written yet"))
            continue
        entry["FAIL_TO_PASS"] = result["FAIL_TO_PASS"]
        entry["PASS_TO_PASS"] = result["PASS_TO_PASS"]
        kept.append(entry)
    repos = {
        repo: spec
        for repo, spec in sources["repos"].items()
        if any(entry["repo"] == repo for entry in kept)
    }
    atomic_write_json(MANIFEST, {"format": 1, "repos": repos, "tasks": kept})
    for name, why in dropped:
        print(f"dropped {name}: {why}", file=sys.stderr)
    print(f"kept {len(kept)} tasks over {len(repos)} repositories -> {MANIFEST}", file=sys.stderr)


if __name__ == "__main__":
    main()
