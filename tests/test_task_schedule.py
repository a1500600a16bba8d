"""The trainers' task schedules: ``random`` and ``revisit`` (every task played in two
consecutive iterations, the pool dealt shuffled), checked against hand-worked deals and
across a resume."""

from __future__ import annotations

import json

import pytest
from test_provenance import memory_run_config, train

from comprl_gym.core import ConfigurationError
from comprl_gym.trainers import TrainConfig, make_trainer


def test_revisit_plays_each_new_task_again_the_next_iteration_and_deals_the_pool_in_turn(
    tmp_path,
):
    config = memory_run_config(tmp_path, "grpo", iterations=1)
    config.groups_per_iteration, config.task_pool, config.task_schedule = 4, 6, "revisit"
    trainer = make_trainer(config)
    try:
        deals = [[task.seed for task in trainer.sample_tasks()] for _ in range(4)]
    finally:
        trainer.close()
    first, second, third, fourth = deals
    # Iteration 1 has nothing to revisit: four new tasks, the last two revisited next.
    assert len(set(first)) == 4
    assert second[:2] == first[2:]
    # The deck holds the pool's six seeds once each: iteration 2 deals the two left ...
    assert sorted(first + second[2:]) == [0, 1, 2, 3, 4, 5]
    # ... and iteration 3 revisits them, dealing from a fresh shuffle of the pool.
    assert third[:2] == second[2:]
    assert fourth[:2] == third[2:]
    assert len(set(third[2:] + fourth[2:])) == 4


def test_random_draws_with_replacement_as_before(tmp_path):
    config = memory_run_config(tmp_path, "grpo", iterations=1)
    config.groups_per_iteration, config.task_pool = 4, 6
    trainer = make_trainer(config)
    try:
        seeds = [task.seed for _ in range(50) for task in trainer.sample_tasks()]
    finally:
        trainer.close()
    # 200 draws with replacement from 6 seeds: every seed, some in a row
    assert set(seeds) == set(range(6))
    assert any(a == b for a, b in zip(seeds, seeds[1:]))


def test_revisit_needs_two_groups():
    with pytest.raises(ConfigurationError, match="groups_per_iteration >= 2"):
        TrainConfig.from_dict({"task_schedule": "revisit", "groups_per_iteration": 1})


@pytest.mark.slow
def test_a_resumed_revisit_run_plays_the_uninterrupted_runs_tasks(tmp_path):
    def run(folder: str, iterations: int) -> dict:
        config = memory_run_config(tmp_path / folder, "static_experience", iterations)
        config.task_schedule = "revisit"
        train(config)
        provenance = json.loads((tmp_path / folder / "run" / "provenance.json").read_text())
        return provenance["training_tasks"]["comprl/Memory-Fork-v0"]["played"]

    run("resumed", 2)
    resumed = run("resumed", 3)  # resumes from iteration 2's checkpoint
    assert resumed == run("straight", 3)
    # 3 iterations x 2 groups x 2 episodes; iteration 1's second task and iteration 2's new
    # one are each played twice (4 episodes)
    assert sum(resumed.values()) == 12
    assert sorted(resumed.values()) == [2, 2, 4, 4]
