"""SWE-bench env without a sandbox: instances, action grammar, grading from logs, the suite."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from comprl_gym.core import ConfigurationError, DataError
from comprl_gym.envs.swebench.grading import grade_log, patched_files, pytest_eval_script
from comprl_gym.envs.swebench.instances import (
    TASKS_DIR,
    checkout_testbed,
    embedded_repo_source,
    load_instances,
)
from comprl_gym.envs.swebench.sandbox.base import split_cut

SUITE_SOURCES = Path(__file__).resolve().parents[1] / "scripts" / "swebench_suite"


def test_embedded_suite_shape():
    suite = load_instances()
    assert len(suite) >= 12
    assert len({inst["repo"] for inst in suite}) >= 3
    for inst in suite:
        assert inst["FAIL_TO_PASS"], inst["instance_id"]
        assert inst["PASS_TO_PASS"], inst["instance_id"]
        assert inst["patch"].startswith("diff --git")
        assert inst["test_patch"].startswith("diff --git")
        assert embedded_repo_source(inst["repo"]) is not None


def test_embedded_repos_have_history_without_the_fixes(tmp_path):
    for inst in load_instances():
        target = tmp_path / inst["instance_id"]
        checkout_testbed(embedded_repo_source(inst["repo"]), inst["base_commit"], target)
        log = subprocess.run(
            ["git", "-C", str(target), "log", "--all", "--oneline"], capture_output=True, text=True
        ).stdout.splitlines()
        assert len(log) >= 2
        # The gold patch applies to the shipped tree, so the fix is not in it already.
        check = subprocess.run(
            ["git", "-C", str(target), "apply", "--check", "-"], input=inst["patch"], text=True
        )
        assert check.returncode == 0


def test_suite_sources_describe_the_shipped_suite(tmp_path):
    """The YAML the suite is built from matches what the package ships: every task's issue
    text, and each bundle's tree at the base commit (the files the commits wrote, in order)."""
    shipped = {inst["instance_id"]: inst for inst in load_instances()}
    described = set()
    for source in sorted((SUITE_SOURCES / "repos").glob("*.yaml")):
        repo = yaml.safe_load(source.read_text(encoding="utf-8"))
        for task in repo["tasks"]:
            inst = shipped[f"comprl-gym__{repo['name']}-{task['number']}"]
            described.add(inst["instance_id"])
            assert inst["problem_statement"] == task["problem_statement"]
            assert inst["hints_text"] == task.get("hints_text", "")
            assert all(fix["path"] in inst["patch"] for fix in task["fix"])
        files = {}
        for commit in repo["commits"]:
            files.update(commit["files"])
        base = shipped[f"comprl-gym__{repo['name']}-1"]["base_commit"]
        tree = checkout_testbed(TASKS_DIR / f"{repo['name']}.bundle", base, tmp_path / source.stem)
        on_disk = {
            str(p.relative_to(tree)): p.read_text()
            for p in tree.rglob("*")
            if p.is_file() and ".git" not in p.relative_to(tree).parts
        }
        assert on_disk == files, source.name
    assert described == set(shipped)


@pytest.mark.slow
def test_rebuilding_the_suite_reproduces_the_shipped_files(tmp_path):
    """scripts/swebench_suite/build_suite.py is deterministic: same bundles, same instances."""
    done = subprocess.run(
        [sys.executable, str(SUITE_SOURCES / "build_suite.py"), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for name in ("instances.json", "textkit.bundle", "intervals.bundle", "kvconf.bundle"):
        assert (tmp_path / name).read_bytes() == (TASKS_DIR / name).read_bytes(), name


def test_gold_patches_fix_and_tests_fail_without_them_on_the_host(tmp_path):
    """FAIL_TO_PASS really fails at the base commit and passes with the gold patch."""
    inst = load_instances(instance_ids=["comprl-gym__intervals-3"])[0]
    target = checkout_testbed(
        embedded_repo_source(inst["repo"]), inst["base_commit"], tmp_path / "r"
    )
    subprocess.run(["git", "-C", str(target), "apply", "-"], input=inst["test_patch"], text=True)
    files = patched_files(inst["test_patch"])

    def run() -> str:
        cmd = [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", *files]
        env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
        return subprocess.run(cmd, cwd=target, capture_output=True, text=True, env=env).stdout

    marker = ">>>>> Start Test Output\n{}\n>>>>> End Test Output"
    before = grade_log(inst, marker.format(run()), "")
    assert before.status == "RESOLVED_NO"
    subprocess.run(["git", "-C", str(target), "apply", "-"], input=inst["patch"], text=True)
    after = grade_log(inst, marker.format(run()), inst["patch"])
    assert after.resolved and after.status == "RESOLVED_FULL"


def test_grade_log_uses_swebench_semantics():
    inst = load_instances(instance_ids=["comprl-gym__kvconf-1"])[0]
    f2p, p2p = inst["FAIL_TO_PASS"][0], inst["PASS_TO_PASS"][0]
    lines = [f"PASSED {f2p}"] + [f"PASSED {t}" for t in inst["PASS_TO_PASS"]]
    log = ">>>>> Start Test Output\n" + "\n".join(lines) + "\n>>>>> End Test Output\n"
    assert grade_log(inst, log, "x").resolved
    broken = log.replace(f"PASSED {p2p}", f"FAILED {p2p} - AssertionError")
    report = grade_log(inst, broken, "x")
    assert not report.resolved
    assert p2p in report.tests_status["PASS_TO_PASS"]["failure"]
    assert not grade_log(inst, ">>>>> Patch Apply Failed\n" + log, "x").patch_applied


def test_eval_script_resets_and_runs_the_test_files():
    inst = load_instances(instance_ids=["comprl-gym__textkit-1"])[0]
    script = pytest_eval_script(inst)
    assert "tests/test_strings.py" in script and ">>>>> Start Test Output" in script


def test_instances_from_jsonl_and_bad_files(tmp_path):
    suite = load_instances()
    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join(json.dumps(inst) for inst in suite[:2]) + "\n")
    assert [i["instance_id"] for i in load_instances(str(path))] == [
        i["instance_id"] for i in suite[:2]
    ]
    bad = tmp_path / "bad.json"
    bad.write_text('[{"instance_id": "x"}]')
    with pytest.raises(DataError, match="lacks"):
        load_instances(str(bad))
    with pytest.raises(DataError, match="not JSON"):
        (tmp_path / "broken.json").write_text("{")
        load_instances(str(tmp_path / "broken.json"))
    with pytest.raises(ConfigurationError, match="unknown instance ids"):
        load_instances(instance_ids=["nope"])


def test_hf_name_not_in_cache_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(ConfigurationError, match="princeton-nlp/SWE-bench_Lite"):
        load_instances("princeton-nlp/SWE-bench_Lite")


def test_cut_marker_becomes_a_note():
    text, cut = split_cut("head\n<<<comprl-gym-cut 12345>>>\ntail")
    assert cut == 12345 and "[... 12345 bytes of output cut ...]" in text and text.endswith("tail")
    assert split_cut("plain") == ("plain", 0)
