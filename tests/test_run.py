"""``Run``: a run folder read back is what the trainer, the evaluation and the stream wrote
into it, checked against the files themselves and the trainer's own objects; a folder that is
no run, or lacks a piece, is refused naming what is missing; reading writes nothing."""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3

import pytest
import torch
from test_provenance import memory_run_config

from comprl_gym.core import ConfigurationError, DataError
from comprl_gym.evaluation.stream import StreamConfig, run_stream
from comprl_gym.trainers import TrainConfig, make_trainer
from comprl_gym.trainers.policy import PolicyOptimizer
from comprl_gym.trainers.run import Run, RunFileMissing

#: The box is shared: one torch thread is far faster than two under contention.
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def weights_hash(state: dict) -> str:
    digest = hashlib.sha256()
    for name in sorted(state):
        digest.update(name.encode())
        digest.update(state[name].detach().cpu().to(torch.float32).numpy().tobytes())
    return digest.hexdigest()


def listing(folder) -> dict[str, tuple[int, int]]:
    """Every file under ``folder`` with its size and modification time."""
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Two Complementary RL iterations of the tiny model on the memory family, evaluated on
    one task; what the trainer held when it ended."""
    root = tmp_path_factory.mktemp("trained")
    config = TrainConfig.from_dict(
        {**memory_run_config(root, "complementary", iterations=2).to_dict(), "eval_tasks": 1}
    )
    trainer = make_trainer(config)
    try:
        trainer.train()
        held = {
            "actor": weights_hash(trainer.actor.model.state_dict()),
            "extractor": weights_hash(trainer.extractor.optimizer.model.state_dict()),
            "texts": [e.text for e in trainer.manager.experiences()],
            "updates": trainer.extractor.updates,
        }
    finally:
        trainer.close()
    return config, root / "run", held


@pytest.mark.slow
def test_a_training_run_reads_back_as_the_trainer_wrote_it(trained):
    config, folder, held = trained
    before = listing(folder)
    run = Run(folder)
    assert run.kind == "train" and run.finished
    assert run.config == config and run.config.to_dict() == config.to_dict()
    lines = (folder / "metrics.jsonl").read_text().splitlines()
    assert run.metrics == [json.loads(line) for line in lines]
    assert [m["step"] for m in run.metrics] == [1, 2]
    assert run.provenance == json.loads((folder / "provenance.json").read_text())
    assert run.summary == json.loads((folder / "summary.json").read_text())
    recorded = (folder / "eval" / "after" / "episodes.jsonl").read_text().splitlines()
    assert list(run.episodes()) == [json.loads(line) for line in recorded]
    with pytest.raises(FileNotFoundError, match="eval/before/episodes.jsonl"):
        run.episodes("before")  # eval_before is off: the trainer played none
    # The checkpoint: its step, and the state in its file as torch reads it.
    assert (folder / "checkpoints" / "latest").read_text().strip() == "step-2"
    saved = torch.load(
        folder / "checkpoints" / "step-2" / "trainer.pt", weights_only=False, map_location="cpu"
    )["state"]
    checkpoint = run.checkpoint()
    assert run.steps == [2] and run.latest_step == checkpoint.step == checkpoint.iteration == 2
    assert checkpoint.config == config
    assert checkpoint.batch_log == saved["extractor"]["batch_log"]
    assert weights_hash(checkpoint.actor_weights) == weights_hash(saved["actor"]["model"])
    with pytest.raises(FileNotFoundError, match="no checkpoint of step 1"):
        run.checkpoint(1)  # the trainer keeps the newest only
    # Where a stream of the run says its agent came from: the checkpoint's file hashes.
    trainer_pt = folder / "checkpoints" / "step-2" / "trainer.pt"
    origin = run.origin()
    assert origin["checkpoint"]["name"] == "step-2"
    assert origin["checkpoint"]["files"]["trainer.pt"] == (
        hashlib.sha256(trainer_pt.read_bytes()).hexdigest()
    )
    assert origin["training_tasks"] == run.provenance["training_tasks"]
    # Rebuilt: the actor and the extractor hold the weights the trainer ended with.
    actor = run.actor()
    assert (
        weights_hash(actor.model.state_dict())
        == held["actor"]
        == weights_hash(saved["actor"]["model"])
    )
    assert not actor.model.training
    extractor = run.extractor()
    assert weights_hash(extractor.optimizer.model.state_dict()) == held["extractor"]
    assert extractor.format.name == config.experience.extractor_format
    frozen = run.extractor(initial=True)  # the weights it started from: the tiny model's
    tiny = PolicyOptimizer.from_settings(config.extractor, "extractor", trainable=False)
    assert weights_hash(frozen.optimizer.model.state_dict()) == weights_hash(
        tiny.model.state_dict()
    )
    assert (held["extractor"] != weights_hash(tiny.model.state_dict())) == (held["updates"] > 0)
    # The store: the lessons the trainer held, at the revision the checkpoint recorded.
    assert held["texts"], "the extractor wrote no lesson: the check would prove nothing"
    with run.store() as store:
        assert [e.text for e in store.iter_experiences()] == held["texts"]
        assert store.revision() == checkpoint.store_revision == saved["store_revision"]
    # Nothing was written into the run's folder.
    assert listing(folder) == before


@pytest.mark.slow
def test_a_runs_trainer_resumes_its_checkpoint_elsewhere(trained, tmp_path):
    config, folder, held = trained
    before = listing(folder)
    trainer = Run(folder).trainer(tmp_path / "work", ["actor.temperature=0.5"])
    try:
        assert trainer.iteration == 2 and trainer.config.actor.temperature == 0.5
        assert trainer.config.output_dir == str(tmp_path / "work" / "run")
        assert weights_hash(trainer.actor.model.state_dict()) == held["actor"]
        assert [e.text for e in trainer.manager.experiences()] == held["texts"]
        with pytest.raises(ConfigurationError, match="no_such_key"):
            Run(folder).trainer(tmp_path / "other", ["actor.no_such_key=1"])
    finally:
        trainer.close()
    assert listing(folder) == before


@pytest.mark.slow
def test_a_folder_that_is_no_run_or_lacks_a_piece_is_refused_naming_it(trained, tmp_path):
    _, folder, _ = trained
    with pytest.raises(ConfigurationError, match="no such folder"):
        Run(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigurationError, match="not a run folder"):
        Run(tmp_path / "empty")
    broken = tmp_path / "broken"
    shutil.copytree(folder, broken)
    (broken / "provenance.json").unlink()
    (broken / "metrics.jsonl").unlink()
    run = Run(broken)  # still a training run: it has checkpoints
    with pytest.raises(FileNotFoundError, match="provenance.json") as missing:
        _ = run.provenance
    assert isinstance(missing.value, DataError) and missing.value.filename.endswith(
        "provenance.json"
    )
    with pytest.raises(FileNotFoundError, match="metrics.jsonl"):
        _ = run.metrics
    shutil.rmtree(broken / "checkpoints" / "step-2" / "experience")
    with pytest.raises(RunFileMissing, match="experiences.sqlite3"):
        run.store()
    (broken / "checkpoints" / "step-2" / "trainer.pt").unlink()
    with pytest.raises(DataError, match="step-2"):
        Run(broken).checkpoint()
    shutil.rmtree(broken / "checkpoints")
    (broken / "metrics.jsonl").write_text("")
    with pytest.raises(RunFileMissing, match="checkpoints/latest: no checkpoint there"):
        Run(broken).actor()
    # A trainer that only evaluated (never iterated): its evaluation reads, its config cannot.
    evaluated = tmp_path / "evaluated"
    shutil.copytree(folder / "eval", evaluated / "eval")
    (evaluated / "summary.json").write_text('{"evaluation": {}}')
    run = Run(evaluated)
    assert run.kind == "train" and len(list(run.episodes())) == len(list(Run(folder).episodes()))
    with pytest.raises(DataError, match="no config, and no checkpoint beside it"):
        _ = run.config


@pytest.mark.slow
def test_a_stream_reads_back_its_config_episodes_and_each_arms_store(tmp_path):
    out = tmp_path / "stream"
    config = StreamConfig(
        "comprl/Memory-Fork-v0", "random", tasks=2, visits=2, arms=["cases"],
        env_kwargs={"split": "test"}, out_dir=str(out), progress=False,
    )  # fmt: skip
    run_stream(config)
    run = Run(out)
    assert run.kind == "stream" and run.config == config
    lines = (out / "episodes.jsonl").read_text().splitlines()
    assert list(run.episodes()) == [json.loads(line) for line in lines]
    with sqlite3.connect(out / "stores" / "cases" / "experiences.sqlite3") as db:
        rows = db.execute(
            "SELECT title, description, content FROM experiences WHERE status = 'active' "
            "ORDER BY id"
        ).fetchall()
    assert rows, "the cases arm stored nothing: the check would prove nothing"
    with run.store(arm="cases") as store:
        assert [(e.title, e.description, e.content) for e in store.iter_experiences()] == rows
    with pytest.raises(ConfigurationError, match="one store per arm"):
        run.store()
    with pytest.raises(
        ConfigurationError, match="is a `comprl-gym stream` run: only a training run"
    ):
        run.checkpoint()
    with pytest.raises(ConfigurationError, match="no phases"):
        run.episodes("after")
