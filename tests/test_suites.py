"""Versioned suites: committed content hashes, refusal of other versions, and two runs from
two fresh clones that the leaderboard puts side by side and marks reproduced."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from comprl_gym.core import ConfigurationError
from comprl_gym.evaluation import suites
from comprl_gym.evaluation.leaderboard import build_leaderboard, leaderboard_markdown

REPO = Path(__file__).resolve().parents[1]


def _locations(suite, shared_data):
    return {"data_dir": str(shared_data / "alfworld")} if suite.requires_data else {}


@pytest.mark.slow
@pytest.mark.parametrize("key", suites.suite_keys())
def test_published_hash_matches_the_content(key, shared_data):
    suite = suites.load_suite(key)
    computed = suites.suite_hash(suite, _locations(suite, shared_data))
    assert computed == suite.published_hash, (
        f"{key}: what it plays changed without a version bump; add {suite.name}@N.json with a "
        "new version and its hash (python -m comprl_gym.evaluation.suites --write)"
    )


def test_changing_a_pinned_setting_or_a_des_file_changes_the_hash(tmp_path, monkeypatch):
    original = suites.load_suite("memory@1")
    published = original.published_hash
    assert suites.suite_hash(original) == published
    definition = json.loads((suites.SUITES_DIR / "memory@1.json").read_text())
    definition["tasks"][0]["task_seeds"]["start"] = 1  # pinned seeds moved, same version
    (tmp_path / "memory@1.json").write_text(json.dumps(definition))
    monkeypatch.setattr(suites, "SUITES_DIR", tmp_path)
    assert suites.suite_hash(suites.load_suite("memory@1")) != published
    monkeypatch.undo()
    from comprl_gym.envs.memory import dungeons

    real = dungeons.dungeon_des_file

    def changed(variant, d, branch_length=dungeons.BRANCH_LENGTH):  # one dungeon's level moves
        text = real(variant, d, branch_length)
        return text.replace("STAIR", "STAIR ", 1) if d.index == 200 else text

    monkeypatch.setattr(dungeons, "dungeon_des_file", changed)
    assert suites.suite_hash(original) != published


def test_bad_suite_names_and_pinned_arguments(tmp_path):
    with pytest.raises(ConfigurationError, match="NAME@VERSION"):
        suites.load_suite("memory")
    with pytest.raises(ConfigurationError, match="no suite 'memory@9'"):
        suites.load_suite("memory@9")
    from comprl_gym.evaluation.eval import EvalConfig, run_eval

    config = EvalConfig(env_ids=[], agent="expert", suite="memory@1", out_dir=tmp_path / "x")
    config.env_kwargs = {"observation_mode": "map"}
    with pytest.raises(ConfigurationError, match="pins the env arguments"):
        suites.run_suite(config)
    # One way to play a suite: run_eval plays env ids and points at run_suite.
    with pytest.raises(
        ConfigurationError, match="played by comprl_gym.evaluation.suites.run_suite"
    ):
        run_eval(config)
    assert not (tmp_path / "x").exists()


def test_a_suite_that_needs_data_refuses_to_start_without_it(tmp_path):
    from comprl_gym.evaluation.eval import EvalConfig

    config = EvalConfig(
        env_ids=[], agent="random", suite="alfworld-official@1", out_dir=tmp_path / "x"
    )
    config.env_kwargs = {"data_dir": str(tmp_path / "empty")}
    with pytest.raises(ConfigurationError) as refused:
        suites.run_suite(config)
    assert str(refused.value).startswith(
        "suite alfworld-official@1 plays ALFWorld's official valid_seen games, which are not "
        "here: pass --env-arg data_dir=FOLDER"
    )
    assert not (tmp_path / "x").exists()


def test_a_family_says_what_its_suite_content_is():
    # What each family hashes (the published hashes, recomputed by the slow test above, are
    # the byte-for-byte check); here, that the keys are the family's and a swebench task is
    # hashed without making its sandbox.
    [real] = suites.load_suite("swebench-real@1").tasks[:1]
    content = suites.task_content(real)
    assert set(content) == {"family", "manifest", "engines"} and content["family"] == "swebench"
    assert set(content["engines"]) == {"swebench"}
    nav = suites.load_suite("minihack-nav@1").tasks[0]
    assert set(suites.task_content(nav)) == {"family", "des_files", "first_observations", "engines"}


def _clone_and_eval(tmp_path: Path, name: str, agent: str) -> Path:
    clone = tmp_path / f"clone-{name}"
    subprocess.run(["git", "clone", "--quiet", "--shared", str(REPO), str(clone)], check=True)
    out = tmp_path / f"{name}"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "comprl_gym.cli",
            "eval",
            "--suite",
            "memory@1",
            "--agent",
            agent,
            "--out",
            str(out),
            "--no-progress",
        ],
        cwd=clone,
        env={
            "PATH": "/usr/bin:/bin",
            "HOME": str(Path.home()),
            "PYTHONPATH": str(clone),
            "HF_HUB_OFFLINE": "1",
        },
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    provenance = json.loads((out / "provenance.json").read_text())
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True)
    assert provenance["package"]["git_commit"] == head.stdout.decode().strip()
    assert provenance["package"]["git_dirty"] is False
    assert provenance["suite"]["matches_published"] is True
    shutil.rmtree(clone)
    return out


@pytest.mark.slow
def test_two_fresh_clones_reproduce_and_other_versions_are_refused(tmp_path):
    runs = {
        (agent, n): _clone_and_eval(tmp_path, f"{agent}-{n}", agent)
        for agent in ("expert", "random")
        for n in (1, 2)
    }
    board = build_leaderboard(list(runs.values()))
    assert board["groups"] == [f"memory@1 ({suites.load_suite('memory@1').published_hash[:12]})"]
    by_run = {r["run"]: r for r in board["rows"]}
    for agent in ("expert", "random"):
        first, second = by_run[f"{agent}-1"], by_run[f"{agent}-2"]
        assert f"reproduced (by {agent}-2)" in first["flags"]
        assert f"reproduced (by {agent}-1)" in second["flags"]
        assert first["episodes"] == second["episodes"] == 128
    assert by_run["expert-1"]["success"]["mean"] == 1.0
    assert by_run["random-1"]["success"]["mean"] < 0.8  # a random walk rarely finds the stairs

    # A run of another suite version: its own group, and refused a rank on memory@1.
    other = tmp_path / "expert-v2"
    shutil.copytree(runs[("expert", 1)], other)
    provenance = json.loads((other / "provenance.json").read_text())
    provenance["suite"].update(key="memory@2", version="2", hash="0" * 64)
    (other / "provenance.json").write_text(json.dumps(provenance))
    board = build_leaderboard([runs[("expert", 1)], other])
    assert len(board["groups"]) == 2 and {r["rank"] for r in board["rows"]} == {1}
    assert (
        "are ranked separately: results of different suite versions are not comparable"
        in (board["notices"][0])
    )
    board = build_leaderboard([runs[("expert", 1)], other], suite="memory@1")
    assert [r["run"] for r in board["rows"]] == ["expert-1"]
    assert board["refused"] == [
        "expert-v2: refused a rank on memory@1: it ran suite memory@2; results of different "
        "suite versions are not comparable"
    ]
    assert board["refused"][0] in leaderboard_markdown(board)
