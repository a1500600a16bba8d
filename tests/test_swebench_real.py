"""The real-repository SWE-bench suite (issue 16): tasks derived from upstream fixes in the
``swe-repos`` bundles, no reward hacking through history or test edits, gold/empty/sibling
patches graded in real sandboxes.

The bundles live in ``../shared/data/swe-repos`` (or ``$COMPRL_SHARED_DATA/swe-repos``);
without them the tests that need them skip and say why. Grading every task is the job of
``benchmarks/bench_swebench.py --suite real`` (results in benchmarks/results/); here a small
sample keeps CI short.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from conftest import require_sandbox as _require
from conftest import shared_data_dir

from comprl_gym.envs.swebench import SWEBenchEnv
from comprl_gym.envs.swebench.expert import SWEBenchExpert
from comprl_gym.envs.swebench.grading import evaluate, patched_files
from comprl_gym.envs.swebench.real_suite import MANIFEST, load_manifest, load_real_suite
from comprl_gym.utils import cache_dir

MANIFEST_DATA = load_manifest()
#: Tasks with small test files (quick to grade), from two repositories.
SAMPLE = ["mahmoud__boltons-ec1ff9f6", "jd__tenacity-0bdf1d9e"]


@pytest.fixture(scope="module")
def data_dir() -> Path:
    try:
        path = shared_data_dir() / "swe-repos"
    except FileNotFoundError as exc:
        pytest.skip(f"the swe-repos bundles are not here ({exc})")
    if not path.is_dir():
        pytest.skip(f"{path} is missing: the real-repository suite is derived from its bundles")
    return path


@pytest.fixture(scope="module")
def suite(data_dir) -> tuple[dict[str, dict], dict[str, str]]:
    instances, sources = load_real_suite(data_dir)
    return {inst["instance_id"]: inst for inst in instances}, sources


def _git(repo: str | Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout


# ---- the manifest: ours only ------------------------------------------------------------------
def test_manifest_covers_enough_real_repositories_and_holds_no_upstream_code():
    tasks = MANIFEST_DATA["tasks"]
    assert len(tasks) >= 24
    per_repo = {repo: sum(t["repo"] == repo for t in tasks) for repo in MANIFEST_DATA["repos"]}
    assert len(per_repo) >= 6 and min(per_repo.values()) >= 1, per_repo
    assert len({t["instance_id"] for t in tasks}) == len(tasks)
    text = MANIFEST.read_text()
    # No patch, diff hunk or test source travels in the package: names and shas only.
    assert "diff --git" not in text and "@@ " not in text and '"patch"' not in text
    assert "def test" not in text
    for task in tasks:
        assert re.fullmatch(r"[0-9a-f]{40}", task["fix_commit"])
        assert re.fullmatch(r"[0-9a-f]{40}", task["base_commit"])
        assert task["FAIL_TO_PASS"] and len(task["problem_statement"]) > 80
        assert not set(task["FAIL_TO_PASS"]) & set(task["PASS_TO_PASS"])
    for spec in MANIFEST_DATA["repos"].values():
        assert spec["license"] in ("MIT", "BSD-3-Clause", "Apache-2.0") and spec["license_files"]
        assert all("==" in req for req in spec["environment"]["requirements"])  # pinned


# ---- derivation from the bundles --------------------------------------------------------------
def test_tasks_are_derived_from_the_fix_commits_with_their_licences(suite, data_dir):
    instances, sources = suite
    assert len(instances) == len(MANIFEST_DATA["tasks"])
    for inst in instances.values():
        mirror = sources[inst["repo"]]
        assert _git(mirror, "rev-parse", f"{inst['fix_commit']}^").strip() == inst["base_commit"]
        assert patched_files(inst["patch"]) == inst["src_files"]
        assert patched_files(inst["test_patch"]) == inst["test_files"]
        # The gold and test patches together are exactly the fix's code changes.
        whole = _git(mirror, "diff", inst["base_commit"], inst["fix_commit"], "--",
                     *inst["src_files"], *inst["test_files"])  # fmt: skip
        assert sorted(whole.split("diff --git")) == sorted(
            (inst["patch"] + inst["test_patch"]).split("diff --git")
        )
        assert inst["license"] == MANIFEST_DATA["repos"][inst["repo"]]["license"]
    derived = list(cache_dir("swebench", "real").glob("*/instances.json"))
    assert derived
    for folder in (p.parent for p in derived):
        names = {p.name for p in (folder / "licenses").iterdir()}
        for spec in MANIFEST_DATA["repos"].values():
            assert set(spec["license_files"]) <= names


def test_missing_data_dir_is_a_clear_error(tmp_path, monkeypatch):
    from comprl_gym.core import ConfigurationError

    monkeypatch.delenv("COMPRL_SWE_REPOS", raising=False)
    monkeypatch.delenv("COMPRL_SHARED_DATA", raising=False)
    with pytest.raises(ConfigurationError, match="swe-repos"):
        SWEBenchEnv(suite="real", sandbox="bubblewrap")
    with pytest.raises(ConfigurationError, match="no git bundles"):
        SWEBenchEnv(suite="real", data_dir=str(tmp_path), sandbox="bubblewrap")


# ---- no reward hacking ------------------------------------------------------------------------
def _fix_blobs(mirror: str, inst: dict) -> dict[str, str]:
    """Blob hash -> path of every file the fix commit wrote (library and tests)."""
    listing = _git(mirror, "ls-tree", inst["fix_commit"], "--", *inst["src_files"],
                   *inst["test_files"])  # fmt: skip
    return {line.split()[2]: line.split("\t")[1] for line in listing.splitlines()}


def _added_test_line(inst: dict) -> str:
    """The longest line the test patch adds: a needle for a search of the file system."""
    added = [
        line[1:].strip()
        for line in inst["test_patch"].splitlines()
        if line.startswith("+") and not line.startswith("+++")
    ]
    return max(added, key=len)


def _assert_sandbox_holds_no_fix(sandbox, inst: dict, mirror: str) -> None:
    blobs = _fix_blobs(mirror, inst)
    assert blobs
    objects = sandbox.run(
        "git cat-file --batch-all-objects --batch-check='%(objectname)' && echo DONE",
        120, head_bytes=64 << 20, tail_bytes=0,
    ).output  # fmt: skip
    assert objects.rstrip().endswith("DONE") and len(objects.splitlines()) > 100
    assert not set(objects.split()) & set(blobs), "a file of the fix is in .git"
    assert inst["fix_commit"] not in objects
    history = sandbox.run(
        "git for-each-ref; git stash list; git reflog --all; ls .git/logs 2>&1;"
        " echo commits $(git rev-list --all | wc -l) $(git rev-list HEAD | wc -l)",
        60,
    ).output
    counts = re.search(r"commits (\d+) (\d+)", history)
    assert counts and counts[1] == counts[2], history  # nothing beyond HEAD's ancestors
    assert history.strip().startswith("ls: cannot access"), history  # no refs, stash, reflog
    assert _git(mirror, "rev-parse", "HEAD").strip() not in objects  # upstream tip is gone
    # The file system: no file has the content of a fixed file, and no file holds a line the
    # hidden tests add.
    hashed = sandbox.run(
        "find /testbed /tmp /home /opt /run -type f -print0 2>/dev/null"
        " | xargs -0 -r git hash-object --no-filters 2>/dev/null | sort -u; echo DONE",
        300, head_bytes=64 << 20, tail_bytes=0,
    ).output  # fmt: skip
    assert hashed.rstrip().endswith("DONE") and not set(hashed.split()) & set(blobs)
    needle = _added_test_line(inst)
    found = sandbox.run(
        "grep -rIlF --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev -e "
        f"{json.dumps(needle)} / 2>/dev/null; echo DONE",
        300,
    ).output
    assert found.strip() == "DONE", f"a hidden test line is on the sandbox's disk: {found}"


@pytest.mark.slow
@pytest.mark.parametrize("kind", [pytest.param("docker", marks=pytest.mark.docker), "bubblewrap"])
def test_the_sandbox_holds_no_later_history_gold_patch_or_hidden_tests(kind, suite):
    _require(kind)
    instances, sources = suite
    # Every repository in bubblewrap (cheap); one in Docker (an image per repository).
    ids = [next(i for i in instances if i.startswith(repo.replace("/", "__")))
           for repo in MANIFEST_DATA["repos"]]  # fmt: skip
    env = SWEBenchEnv(
        suite="real", data_dir=str(shared_data_dir() / "swe-repos"), sandbox=kind,
        instance_ids=ids if kind == "bubblewrap" else SAMPLE[:1],
    )  # fmt: skip
    try:
        for inst in env.unwrapped.instances:
            env.reset(options={"task_id": inst["instance_id"]})
            _assert_sandbox_holds_no_fix(env.unwrapped.sandbox, inst, sources[inst["repo"]])
    finally:
        env.close()


@pytest.mark.slow
def test_an_agent_that_edits_the_tests_is_graded_on_the_original_tests(suite):
    instances, _ = suite
    inst = instances[SAMPLE[0]]
    env = SWEBenchEnv(
        suite="real", data_dir=str(shared_data_dir() / "swe-repos"), sandbox="bubblewrap",
        instance_ids=[inst["instance_id"]],
    )  # fmt: skip
    test_file = inst["test_files"][0]
    gut_tests = f"printf 'def test_nothing():\\n    pass\\n' > {test_file}"
    try:
        # Tests emptied, no fix: their own (gutted) tests would pass; the hidden ones fail.
        env.reset(options={"task_id": inst["instance_id"]})
        env.step(gut_tests)
        _, reward, terminated, _, info = env.step("submit")
        assert terminated and reward == 0.0
        assert test_file in info["patch"]  # the edit was graded, not ignored
        f2p = info["report"]["tests_status"]["FAIL_TO_PASS"]
        assert f2p["failure"] == inst["FAIL_TO_PASS"]
        # The fix plus gutted tests: graded on the original tests, which the fix passes.
        env.reset(options={"task_id": inst["instance_id"]})
        env.unwrapped.sandbox.write_file("/tmp/fix.patch", inst["patch"].encode())
        env.step("git apply /tmp/fix.patch")
        env.step(gut_tests)
        _, reward, terminated, _, info = env.step("submit")
        assert reward == 1.0 and test_file in info["patch"]
    finally:
        env.close()


# ---- gold, empty and a sibling's patch --------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("kind", [pytest.param("docker", marks=pytest.mark.docker), "bubblewrap"])
def test_gold_resolves_while_empty_and_sibling_patches_do_not(kind, suite):
    _require(kind)
    instances, _ = suite
    env = SWEBenchEnv(
        suite="real", data_dir=str(shared_data_dir() / "swe-repos"), sandbox=kind,
        instance_ids=SAMPLE if kind == "bubblewrap" else SAMPLE[:1],
    )  # fmt: skip
    factory = env.unwrapped.factory
    try:
        for inst in env.unwrapped.instances:
            sibling = next(
                other for other in instances.values()
                if other["repo"] == inst["repo"] and other["instance_id"] != inst["instance_id"]
            )  # fmt: skip
            for patch, expected in ((inst["patch"], True), ("", False), (sibling["patch"], False)):
                grader = factory.make(inst)
                try:
                    report = evaluate(grader, inst, patch, timeout=600)
                finally:
                    grader.close()
                assert report.resolved is expected, (inst["instance_id"], report.test_log[-2000:])
    finally:
        env.close()


@pytest.mark.slow
def test_expert_plays_a_real_task_through_the_experience_wrapper(suite, tmp_path):
    import gymnasium as gym

    import comprl_gym  # noqa: F401 - registers the ids
    from comprl_gym.experience import ExperienceManager
    from comprl_gym.experience.embedding import default_embedder
    from comprl_gym.rollouts import run_episode
    from comprl_gym.wrappers import ExperienceAugmentedEnv

    inner = gym.make(
        "comprl/SWEBench-v0", suite="real", data_dir=str(shared_data_dir() / "swe-repos"),
        sandbox="bubblewrap", instance_ids=[SAMPLE[1]],
    )  # fmt: skip
    manager = ExperienceManager(tmp_path / "bank", embedder=default_embedder())
    manager.add(
        ["## Title: Reproduce first\n## Description: SWE tasks\n## Content: run the failing "
         "test before editing"],
        env_family="swebench",
    )  # fmt: skip
    env = ExperienceAugmentedEnv(inner, manager, inject_top_k=1)
    try:
        result = run_episode(env, SWEBenchExpert(env), seed=0)
        assert result.won and result.total_reward == 1.0
    finally:
        env.close()
        manager.close()
