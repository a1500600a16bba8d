"""A run's end products: the before/after held-out table, its intervals and the learning curve."""

from __future__ import annotations

import json
import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from comprl_gym.trainers import TrainConfig, make_trainer  # noqa: E402
from comprl_gym.trainers.report import (  # noqa: E402
    compare_with_before,
    format_results_table,
    plot_learning_curve,
)

ENV = "comprl/MiniHack-Room-5x5-v0"


def _row(won):
    return {"success": sum(won) / len(won), "won": won, "episodes": len(won)}


def test_comparison_pairs_the_same_tasks_and_excludes_zero_only_for_a_clear_gain():
    # 20 held-out tasks: before training 2 wins, after 14, and every task won before is won
    # after. By hand: the difference is 12/20 = 0.60; all 12 changed pairs went one way, so
    # the paired interval must exclude 0 (McNemar's exact p = 2 * 0.5**12 < 0.001).
    before = {ENV: {"without_experience": _row([1, 1] + [0] * 18)}}
    after = {
        ENV: {
            "without_experience": _row([1, 1] + [0] * 18),
            "with_experience": _row([1, 1] + [1] * 12 + [0] * 6),
        }
    }
    comparison = compare_with_before(before, after)[ENV]
    gain = comparison["with_experience"]
    assert gain["mean"] == pytest.approx(0.60)
    assert gain["n"] == 20 and 0 < gain["low"] < 0.60 < gain["high"] <= 1
    same = comparison["without_experience"]
    assert same["mean"] == 0 and same["low"] < 0 < same["high"]
    # An env id that was not measured before training has no comparison (never a made-up one).
    assert compare_with_before({}, after) == {}


def test_results_table_shows_before_after_and_the_difference(tmp_path):
    before = {ENV: {"without_experience": _row([0, 0, 0, 1])}}
    after = {ENV: {"without_experience": _row([1, 0, 0, 1]), "with_experience": _row([1, 1, 0, 1])}}
    summary = {
        "algorithm": "complementary",
        "evaluation_before": before,
        "evaluation": after,
        "comparison": compare_with_before(before, after),
    }
    table = format_results_table(summary)
    header, _, line = table.splitlines()
    assert "before training" in header and "with experience - before" in header
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[0] == ENV and cells[1] == "0.25" and cells[2] == "0.50" and cells[3] == "0.75"
    assert cells[4].startswith("+0.50 [") and cells[5] == "4"
    metrics = [{"step": 1, "success": 0.25}, {"step": 2, "success": 0.5}]
    png = plot_learning_curve(metrics, summary, tmp_path / "curve.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_a_run_evaluates_before_training_and_keeps_it_across_resume(tmp_path):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the box is shared: one thread is faster under contention
    try:
        _run_twice(tmp_path)
    finally:
        torch.set_num_threads(threads)


def _run_twice(tmp_path):
    data = {
        "algorithm": "grpo",
        "seed": 1,
        "env_ids": [ENV],
        "iterations": 1,
        "groups_per_iteration": 1,
        "group_size": 2,
        "max_episode_steps": 2,
        "task_pool": 4,
        "invalid_action_penalty": 0.5,
        "actor": {"model": "tiny", "lr": 1e-3, "max_new_tokens": 4},
        "eval_tasks": 3,
        "eval_before": True,
        "eval_temperature": 1.0,
        "output_dir": str(tmp_path / "run"),
        "progress": False,
        "tensorboard": False,
    }
    trainer = make_trainer(TrainConfig.from_dict(data))
    try:
        summary = trainer.train()
    finally:
        trainer.close()
    before = summary["evaluation_before"][ENV]
    assert set(before) == {"without_experience"}  # nothing to retrieve before training
    assert before["without_experience"]["episodes"] == 3
    assert len(before["without_experience"]["won"]) == 3
    assert set(summary["comparison"][ENV]) == {"without_experience"}
    assert summary["eval_temperature"] == 1.0
    on_disk = json.loads((tmp_path / "run" / "evaluation_before.json").read_text())
    assert on_disk == summary["evaluation_before"]
    assert (tmp_path / "run" / "learning_curve.png").stat().st_size > 1000

    # Resumed with more iterations: the untrained actor is not evaluated again (it no longer
    # exists); its results come back from the checkpoint.
    trainer = make_trainer(TrainConfig.from_dict({**data, "iterations": 2}))
    calls = []
    original = trainer.evaluate
    trainer.evaluate = lambda before_training=False: (
        calls.append(before_training) or original(before_training)
    )
    try:
        resumed = trainer.train()
    finally:
        trainer.close()
    assert calls == [False]
    assert resumed["evaluation_before"] == summary["evaluation_before"]
    saved = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert saved["iterations"] == 2 and saved["evaluation_before"][ENV]
