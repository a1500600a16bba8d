"""Lesson sensitivity: a reader that follows its lesson scores 1 against the inverted lesson, a
lesson-deaf actor 0 (and the trainer warns); a training run on the memory family logs it."""

from __future__ import annotations

import json
import logging

import pytest
from test_provenance import memory_run_config, train

from comprl_gym.trainers.metrics import collapse_warnings
from comprl_gym.trainers.sensitivity import lesson_sensitivity, measures_sensitivity

ENV = "comprl/Memory-Fork-v0"
KWARGS = {"split": "test", "branch_length": 2, "observation_mode": "compact", "moves": "open"}


class Deaf:
    """Walks east whatever it is told."""

    def reset(self, task, info):
        pass

    def act(self, observation, info):
        return "east"


class Reader:
    """Walks the side its lesson names."""

    def reset(self, task, info):
        self.lesson = str(info.get("experiences"))

    def act(self, observation, info):
        return "east" if "east branch" in self.lesson else "west"


def test_a_reader_is_sensitive_and_a_deaf_actor_is_not():
    seeds = range(6)
    assert (
        lesson_sensitivity(Reader(), "comprl/Memory-Fork-v0", KWARGS, seeds)["sensitivity/inverted"]
        == 1.0
    )
    deaf = lesson_sensitivity(Deaf(), "comprl/Memory-Fork-v0", KWARGS, seeds)
    assert deaf == {"sensitivity/inverted": 0.0, "sensitivity/placebo": 0.0, "sensitivity/tasks": 6}
    assert any("lesson-deaf" in w for w in collapse_warnings(deaf))


@pytest.mark.slow
def test_the_committed_reader_reads_and_untrained_smollm2_does_not(tmp_path):
    """The metric on real models, through the trainer's own greedy agent, on 8 `train`
    dungeons a capable-table run never trains on: the committed reader walks the side an
    inverted lesson names on all 8; SmolLM2 untrained walks the same way whatever it reads
    (lesson-deaf), 0 of 8. About 2 minutes on 2 cores."""
    from conftest import REPO_ROOT

    from comprl_gym.trainers import TrainConfig, make_trainer

    scores = {}
    for name, init in (("reader", "assets/memory-reader/reader.pt"), ("untrained", "")):
        config = TrainConfig.from_yaml(
            REPO_ROOT / "configs" / "capable-grpo.yaml",
            ["rollout_backend=transformers", f"output_dir={tmp_path / name}", "progress=false",
             f"actor.init_weights={REPO_ROOT / init if init else ''}"],
        )  # fmt: skip
        trainer = make_trainer(config)
        kwargs = {"max_steps": config.max_episode_steps, **config.env_kwargs[ENV]}
        agent = trainer.agent(seed=0, temperature=0.0)
        scores[name] = lesson_sensitivity(agent, ENV, kwargs, range(16, 24))
    assert scores["reader"]["sensitivity/inverted"] == 1.0
    assert scores["untrained"]["sensitivity/inverted"] == 0.0
    assert any("lesson-deaf" in w for w in collapse_warnings(scores["untrained"]))


def test_only_families_with_fixed_lessons_are_measured():
    assert measures_sensitivity("comprl/Memory-Fork-v0")
    assert not measures_sensitivity("comprl/MiniHack-Room-5x5-v0")


def test_a_training_run_logs_sensitivity_every_iteration(tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    config = memory_run_config(tmp_path, "grpo", iterations=2)
    config.sensitivity_tasks = 3
    train(config)
    records = [
        json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    ]
    for record in records:
        assert record["sensitivity/tasks"] == 3
        assert record["sensitivity/inverted"] in (0.0, 1 / 3, 2 / 3, 1.0)


def test_measuring_sensitivity_changes_nothing_the_run_computes(tmp_path):
    """The measurement samples greedily outside the rollouts' seed sequence: a run with it and
    one without log the same metrics, iteration by iteration (losses, rewards, store)."""
    runs = {}
    for tasks in (0, 3):
        config = memory_run_config(tmp_path / str(tasks), "complementary", iterations=2)
        config.sensitivity_tasks = tasks
        train(config)
        folder = tmp_path / str(tasks) / "run"
        lines = (folder / "metrics.jsonl").read_text().splitlines()
        runs[tasks] = [
            {
                k: v
                for k, v in json.loads(line).items()
                if not k.startswith("sensitivity/")
                and "time" not in k
                and "wait" not in k
                and not k.endswith("_s")
                and "tokens_per_s" not in k
            }
            for line in lines
        ]
    assert runs[0] == runs[3]
