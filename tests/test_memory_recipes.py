"""Recipes are configs: ``configs/memory-*.yaml`` are the settings of the committed memory-family
table's runs (each per-seed result file records its run's config), and load as a trainer."""

from __future__ import annotations

import json

import pytest
from conftest import REPO_ROOT

from comprl_gym.trainers import TrainConfig

CONFIGS = REPO_ROOT / "configs"
RESULTS = REPO_ROOT / "benchmarks" / "results"

#: Each method's config, the overrides that make it the method, and a committed run of it.
METHODS = {
    "grpo": ("memory-grpo.yaml", [], "extractor_memory_grpo_seed1"),
    "static experience": ("memory-static.yaml", [], "extractor_memory_stem_static_seed1"),
    "experience-only": (
        "memory-complementary.yaml",
        ["algorithm=experience_only"],
        "extractor_memory_stem_experience_only_seed1",
    ),
    "Complementary RL": ("memory-complementary.yaml", [], "extractor_memory_stem_complementary"),
    "Complementary RL, paired credit": (
        "memory-complementary.yaml",
        ["experience.extractor_baseline=paired"],
        "extractor_memory_stem_complementary_paired_seed2",
    ),
    "exemplar memory": ("memory-exemplar.yaml", [], "extractor_memory_exemplar_seed2"),
}

#: The extractor credit's settings before the reference's became the default (2026-12-06),
#: which the committed runs' configs do not name.
CREDIT_THEN = {
    "credit_window": "since_written",
    "max_train_count": 3,
    "train_weight_power": 0.5,
    "train_cooldown_steps": 1,
}

#: Where a run is written and how many threads it took: the machine's, not the recipe's.
PLACE = ("output_dir", "torch_threads", "progress")


def comparable(config: TrainConfig) -> dict:
    data = config.to_dict()
    for key in PLACE:
        data.pop(key)
    data["experience"].pop("store_dir")
    for model in ("actor", "extractor"):
        data[model].pop("init_weights", None)  # the committed runs loaded the reader by flag
    return data


@pytest.mark.parametrize("method", list(METHODS))
def test_each_method_config_is_the_committed_runs_config(method):
    name, overrides, committed = METHODS[method]
    result = json.loads((RESULTS / f"{committed}.json").read_text())
    seed = result["config"]["seed"]
    config = TrainConfig.from_yaml(CONFIGS / name, [*overrides, f"seed={seed}"])
    recorded = TrainConfig.from_dict(result["config"])
    for key, value in CREDIT_THEN.items():
        if key not in result["config"].get("experience", {}):
            # recorded before the key was written down: the credit those runs had
            setattr(recorded.experience, key, value)
    assert comparable(config) == comparable(recorded)
    # Every method starts from the reader configs/memory-reader.yaml writes.
    assert config.actor.init_weights


#: The reader's two warm-ups: the overrides of configs/memory-reader.yaml that make the first
#: (its header comment's command) and the committed run that recorded each.
READER_PHASES = [
    (
        ["warmup.steps=80", 'warmup.formats=["oracle","exemplar"]', "warmup.lr=1e-3",
         "actor.init_weights="],
        "experience_transfer_streaming_both_sides_read",
    ),
    ([], "experience_transfer_streaming_reader_coin"),
]  # fmt: skip


@pytest.mark.parametrize("overrides, committed", READER_PHASES)
def test_the_reader_config_repeats_the_committed_readers_warmups(overrides, committed):
    result = json.loads((RESULTS / f"{committed}.json").read_text())
    recorded = result["reading_warmup"]
    config = TrainConfig.from_yaml(CONFIGS / "memory-reader.yaml", overrides)
    warmup = config.warmup
    assert (warmup.steps, warmup.lr, warmup.formats, warmup.sides, warmup.batch_size) == (
        recorded["steps"],
        recorded["lr"],
        recorded["lessons"],
        recorded["sides"],
        recorded["batch"],
    )
    # The first starts from the pretrained model, the second from the first's reader.
    assert bool(config.actor.init_weights) == bool(recorded["loaded_from"])
    # The actor, its LoRA and the training dungeons are the committed reader run's.
    run = TrainConfig.from_dict(result["config"])
    assert config.actor.lora == run.actor.lora and config.actor.model == run.actor.model
    assert (config.env_kwargs, config.task_pool, config.max_episode_steps, config.seed) == (
        run.env_kwargs,
        run.task_pool,
        run.max_episode_steps,
        run.seed,
    )


#: A run of a recipe at tiny size: the tiny random model, a few cheap steps.
TINY = [
    "actor.model=tiny",
    "extractor.model=tiny",
    "rollout_backend=transformers",
    "iterations=1",
    "groups_per_iteration=1",
    "task_pool=8",
    "progress=false",
    "torch_threads=1",
]


@pytest.mark.slow
def test_a_tiny_reader_starts_a_tiny_method_run(tmp_path):
    """The recipe's chain at tiny size: the reader config warms the tiny actor up (2 steps)
    and writes its reader; the static-experience config starts from that file and trains one
    iteration; the run records the reader it started from."""
    from comprl_gym.cli import main

    reader_dir, static_dir = tmp_path / "reader", tmp_path / "static"
    reader = ["warmup.steps=2", "actor.init_weights=", *TINY]
    argv = ["train", "--config", str(CONFIGS / "memory-reader.yaml"), "--output-dir"]
    assert main([*argv, str(reader_dir), *(f"--set={s}" for s in reader)]) == 0
    record = json.loads((reader_dir / "warmup" / "warmup.json").read_text())
    assert record["steps"] == 2 and len(record["losses"]) == 2
    weights = reader_dir / "warmup" / "reader.pt"
    static = [f"actor.init_weights={weights}", *TINY]
    argv = ["train", "--config", str(CONFIGS / "memory-static.yaml"), "--output-dir"]
    assert main([*argv, str(static_dir), *(f"--set={s}" for s in static)]) == 0
    summary = json.loads((static_dir / "summary.json").read_text())
    assert summary["algorithm"] == "static_experience" and summary["iterations"] == 1
    assert record["reader_sha256"] in json.dumps(summary)  # it started from that reader
