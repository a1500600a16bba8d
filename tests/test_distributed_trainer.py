"""``distributed.enabled``: the same seeded GRPO run with its envs on Ray env workers (a local
one-node cluster the trainer starts itself) is the same run as in one process: the same
episodes, metrics and updated weights; the cluster listens on loopback and is gone after
``close()``."""

from __future__ import annotations

import json
import os

import pytest
import torch
from conftest import assert_listens_on_loopback_only, ray_session_processes

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import ray  # noqa: E402

from comprl_gym.core import ConfigurationError  # noqa: E402
from comprl_gym.trainers import TrainConfig, make_trainer  # noqa: E402

pytestmark = pytest.mark.slow

ENV_IDS = ["comprl/MiniHack-Room-5x5-v0", "comprl/WebShop-v0"]


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _config(output_dir, algorithm="grpo", **overrides):
    data = {
        "algorithm": algorithm,
        "seed": 3,
        "env_ids": ENV_IDS,
        "iterations": 1,
        "groups_per_iteration": 2,
        "group_size": 2,
        "max_episode_steps": 2,
        "history_turns": 1,
        "task_pool": 8,
        "invalid_action_penalty": 0.5,
        "actor": {"model": "tiny", "lr": 1e-3, "max_new_tokens": 6},
        "output_dir": str(output_dir),
        "eval_tasks": 1,
        "eval_before": False,
        "progress": False,
        "tensorboard": False,
        **overrides,
    }
    return TrainConfig.from_dict(data)


def _run(output_dir, **overrides):
    trainer = make_trainer(_config(output_dir, **overrides))
    try:
        summary = trainer.train()
        weights = {k: v.detach().clone() for k, v in trainer.actor.model.state_dict().items()}
        places = trainer.env_pool.worker_places() if trainer.env_pool is not None else []
        nodes = [n["NodeManagerAddress"] for n in ray.nodes()] if ray.is_initialized() else []
        session = ""
        if ray.is_initialized():
            session = ray._private.worker._global_node.get_session_dir_path()
            pids = {p.pid for p in ray_session_processes(session)} | {os.getpid()}
            assert_listens_on_loopback_only(pids)
    finally:
        trainer.close()
    timings = ("_s", "time", "per_s", "tokens_per", "wait/", "rollout/")
    records = [
        {k: v for k, v in json.loads(line).items() if not any(t in k for t in timings)}
        for line in (output_dir / "metrics.jsonl").read_text().splitlines()
    ]
    return records, summary["evaluation"], weights, places, nodes, session


def test_a_grpo_run_on_env_workers_is_the_local_run(tmp_path):
    local = _run(tmp_path / "local")
    remote = _run(
        tmp_path / "ray",
        distributed={"enabled": True, "num_cpus": 2, "env_workers": 2, "envs_per_worker": 2},
    )
    records, evaluation, weights, places, nodes, session = remote
    # float32 passes agree to rounding across torch thread settings: approx, not ==
    assert len(records) == len(local[0]) == 1
    for record, expected in zip(records, local[0]):
        assert record == pytest.approx(expected, rel=1e-5, abs=1e-6)
    assert evaluation == local[1]
    assert any(r.get("actor/samples", 0) > 0 for r in records)
    for name, tensor in weights.items():
        torch.testing.assert_close(tensor, local[2][name], rtol=0, atol=1e-5)
    assert len({p["pid"] for p in places}) == 2 and os.getpid() not in {p["pid"] for p in places}
    assert nodes == ["127.0.0.1"]
    assert not ray.is_initialized()
    left = [p.pid for p in ray_session_processes(session)]
    assert session and not left, f"Ray processes left after close(): {left}"


def test_experience_trainers_say_what_distributed_still_needs(tmp_path):
    with pytest.raises(ConfigurationError, match="experience service"):
        make_trainer(
            _config(tmp_path, "complementary", group_size=4, distributed={"enabled": True})
        )
    assert not ray.is_initialized()
