"""The dual loop's plumbing: the actor never waits on the worker; checkpoints and metrics."""

from __future__ import annotations

import threading
import time

import pytest

from comprl_gym.trainers.background import ExperienceWorker, TimedManager, WaitClock
from comprl_gym.trainers.checkpoint import CheckpointManager
from comprl_gym.trainers.metrics import MetricsLogger


def test_submit_never_blocks_on_slow_extraction_and_drain_waits_for_it():
    release = threading.Event()
    done = []

    def slow_extraction(job):
        release.wait(5)
        done.append(job)

    worker = ExperienceWorker(slow_extraction, asynchronous=True)
    start = time.perf_counter()
    for job in range(3):
        worker.submit(job)
    assert time.perf_counter() - start < 0.5, "the actor waited on extraction"
    assert done == [] and worker.backlog >= 2
    release.set()
    worker.drain()
    assert done == [0, 1, 2] and worker.processed == 3
    worker.close()


def test_worker_errors_surface_in_the_actor_thread():
    worker = ExperienceWorker(lambda job: 1 / 0, asynchronous=True)
    worker.submit("x")
    with pytest.raises(RuntimeError, match="experience worker failed"):
        worker.drain()
    worker.close()


def test_inline_mode_runs_jobs_at_submit():
    seen = []
    worker = ExperienceWorker(seen.append, asynchronous=False)
    worker.submit(1)
    assert seen == [1]


def test_timed_manager_measures_retrieval_and_passes_everything_else():
    class Manager:
        size = 3

        def retrieve(self, query, k=None):
            time.sleep(0.01)
            return [query]

        def __len__(self):
            return 3

    clock = WaitClock()
    timed = TimedManager(Manager(), clock)
    assert timed.retrieve("q") == ["q"] and timed.size == 3 and len(timed) == 3
    waits = clock.take()
    assert waits["experience_retrieve"] >= 0.01 and clock.take() == {}


def test_checkpoints_are_atomic_and_pruned(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    (store / "db").write_text("v1")
    ckpt = CheckpointManager(tmp_path, keep=1)
    ckpt.save(1, {"a": 1}, store_dir=store)
    (store / "db").write_text("v2")
    ckpt.save(2, {"a": 2}, store_dir=store)
    assert ckpt.latest_step() == 2
    assert not (tmp_path / "checkpoints" / "step-1").exists()
    (store / "db").write_text("later")
    ckpt.restore_store(2, store)
    assert (store / "db").read_text() == "v2"
    assert ckpt.load()["state"] == {"a": 2}
    # A crash mid-save leaves only a hidden temp folder; 'latest' still names step 2.
    (tmp_path / "checkpoints" / ".step-3.crashed").mkdir()
    assert ckpt.latest_step() == 2


def test_metrics_are_truncated_to_the_checkpoint_on_resume(tmp_path):
    log = MetricsLogger(tmp_path, tensorboard=True)
    for step in (1, 2, 3):
        log.log(step, {"success": step / 10})
    log.truncate_after(2)
    assert [r["step"] for r in log.read()] == [1, 2]
    log.close()
    assert any((tmp_path / "tensorboard").iterdir())
