"""``benchmarks/bench_trainers.py paper-table`` runs every method from one config and writes the
table with pooled Wilson intervals and per-seed rates (tiny model, tiny budget)."""

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
        str(REPO_ROOT / "benchmarks" / "bench_trainers.py"),
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
    table = json.loads(out.read_text())["table"]
    cells = {(row["method"], row["mode"]) for row in table}
    # GRPO and the untrained actor have no store: they are evaluated without experience only.
    assert cells == {
        ("untrained", "without_experience"),
        ("grpo", "without_experience"),
        *(
            (m, mode)
            for m in ("static_experience", "experience_only", "complementary")
            for mode in ("without_experience", "with_experience")
        ),
    }
    for row in table:
        assert set(row["per_seed"]) == {"0", "1"}
        assert row["pooled"]["n"] == 4  # 2 held-out tasks x 2 seeds
        assert row["pooled"]["method"] == "wilson"
        assert 0.0 <= row["pooled"]["low"] <= row["pooled"]["mean"] <= row["pooled"]["high"] <= 1
    assert out.with_suffix(".png").stat().st_size > 0
    # --resume reads every finished run back instead of training it again: the same table.
    again = subprocess.run(
        [*command, "--resume"], capture_output=True, text=True, env=env, timeout=300
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.count(": read ") == 10  # 5 methods x 2 seeds
    assert json.loads(out.read_text())["table"] == table


@pytest.mark.parametrize("name", ["paper-table-cpu.yaml", "paper-table-gpu.yaml"])
def test_paper_table_configs_load_for_every_method(name):
    """The CPU table and its documented GPU twin load as each trainer the benchmark sets."""
    from comprl_gym.trainers import TrainConfig

    for algorithm in ("grpo", "static_experience", "experience_only", "complementary"):
        config = TrainConfig.from_yaml(REPO_ROOT / "configs" / name, [f"algorithm={algorithm}"])
        assert config.algorithm == algorithm and config.eval_tasks > 0
