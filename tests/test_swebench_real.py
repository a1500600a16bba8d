"""The real-repository SWE-bench suite (issue 16): tasks derived from upstream fixes in the
``swe-repos`` bundles, no reward hacking through history or test edits, gold/empty/sibling
patches graded in real sandboxes.

The bundles live in ``../shared/data/swe-repos`` (or ``$COMPRL_SHARED_DATA/swe-repos``);
without them the tests that need them skip and say why. Grading every task is the job of
``benchmarks/speed/swebench.py --suite real`` (results in benchmarks/results/); here a small
sample keeps CI short.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from conftest import require_sandbox as _require
from conftest import shared_data_dir

from comprl_gym.envs.swebench import SWEBenchEnv
from comprl_gym.envs.swebench.expert import SWEBenchExpert
from comprl_gym.envs.swebench.grading import evaluate, patched_files
from comprl_gym.envs.swebench.real_suite import (
    MANIFEST,
    audit_sandbox,
    load_manifest,
    load_real_suite,
)
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
            assert audit_sandbox(env.unwrapped.sandbox, inst, sources[inst["repo"]]) == []
    finally:
        env.close()


@pytest.mark.slow
def test_the_audit_finds_the_fix_in_an_unscrubbed_clone(suite, tmp_path):
    """The audit can fail: a plain clone (history up to upstream's tip) gives the fix away."""
    from comprl_gym.envs.swebench import images
    from comprl_gym.envs.swebench.sandbox.bwrap import BubblewrapSandbox

    instances, sources = suite
    inst = instances[SAMPLE[0]]
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", sources[inst["repo"]], str(clone)], check=True)
    _git(clone, "checkout", "-q", "--detach", inst["base_commit"])
    with BubblewrapSandbox(images.build_rootfs(), clone) as sandbox:
        leaks = audit_sandbox(sandbox, inst, sources[inst["repo"]])
    assert any("a file of the fix is in .git" in leak for leak in leaks), leaks
    assert any(f"commit {inst['fix_commit']}" in leak for leak in leaks)
    assert any("beyond the base" in leak for leak in leaks)
    assert any("refs" in leak for leak in leaks)


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
