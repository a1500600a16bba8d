"""``python -m benchmarks.trainers.run paper-table`` runs every method from one config and
writes the library's method table (``comprl-gym table``): pooled Wilson intervals, per-seed
rates, each method paired against GRPO (tiny model, tiny budget)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import REPO_ROOT


@pytest.mark.slow
def test_paper_table_trains_every_method_alike_and_reports_intervals(tmp_path):
    out = tmp_path / "paper_table.json"
    tiny = [
        "actor.model=tiny",
        "extractor.model=tiny",
        # the tiny model has 2 blocks (the config adapts the top 8 of SmolLM2's 30)
        "actor.lora.enabled=false",
        "extractor.lora.enabled=false",
        "rollout_backend=transformers",
        "iterations=1",
        "eval_tasks=2",
        "max_episode_steps=2",
        "groups_per_iteration=1",
        "task_pool=8",
        "progress=false",
    ]
    command = [
        sys.executable,
        "-m",
        "benchmarks.trainers.run",
        "paper-table",
        "--config",
        str(REPO_ROOT / "configs" / "paper-table-cpu.yaml"),
        "--seeds",
        "0",
        "1",
        "--threads",
        "1",
        "--out",
        str(out),
        "--output-dir",
        str(tmp_path / "runs"),
        *[arg for pair in (("--set", s) for s in tiny) for arg in pair],
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1"}
    process = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
    assert process.returncode == 0, process.stderr[-3000:]
    result = json.loads(out.read_text())
    rows = {row["method"]: row for row in result["rows"]}
    # GRPO and the untrained actor have no store: they are evaluated without experience only,
    # and that is the arm a user of them gets (deployed); the others' is their own store's.
    assert set(rows) == {"untrained", "grpo", "static_experience", "experience_only",
                         "complementary"}  # fmt: skip
    for method, row in rows.items():
        blind = method in ("untrained", "grpo")
        assert row["deployed_arm"] == ("none" if blind else "own")
        assert set(row["success"]) == ({"none"} if blind else {"none", "own"})
        assert set(row["per_seed"]) == {"0", "1"}
        cell = row["success"][row["deployed_arm"]]["1"]
        assert cell["n"] == 4 and cell["method"] == "wilson"  # 2 held-out tasks x 2 seeds
        assert 0.0 <= cell["low"] <= cell["mean"] <= cell["high"] <= 1
        # Every method minus GRPO (and the untrained actor), paired per (seed, task).
        for other in {"grpo", "untrained"} - {method}:
            assert row["versus"][other]["this_minus_that"]["1"]["pairs"] == 4
    assert result["paper"]["complementary with_experience"] == 0.82
    assert out.with_suffix(".png").stat().st_size > 0
    assert "| complementary | 0,1 |" in out.with_suffix(".md").read_text()
    # --resume reads every finished run back instead of training it again: the same table.
    again = subprocess.run(
        [*command, "--resume"], capture_output=True, text=True, env=env, timeout=300
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.count(": read ") == 10  # 5 methods x 2 seeds
    assert json.loads(out.read_text())["rows"] == result["rows"]


@pytest.mark.parametrize("name", ["paper-table-cpu.yaml", "paper-table-gpu.yaml"])
def test_paper_table_configs_load_for_every_method(name):
    """The CPU table and its documented GPU twin load as each trainer the benchmark sets."""
    from comprl_gym.trainers import TrainConfig

    for algorithm in ("grpo", "static_experience", "experience_only", "complementary"):
        config = TrainConfig.from_yaml(REPO_ROOT / "configs" / name, [f"algorithm={algorithm}"])
        assert config.algorithm == algorithm and config.eval_tasks > 0
