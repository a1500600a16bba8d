"""``distributed.enabled``: the same seeded GRPO run with its envs on Ray env workers (a local
one-node cluster the trainer starts itself) is the same run as in one process: the same
episodes, metrics and updated weights; the cluster listens on loopback and is gone after
``close()``. So is a Complementary RL run with the shared experience service and data-parallel
updates (same episodes, store tallies and weights)."""

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
from comprl_gym.experience import ExperienceManager  # noqa: E402
from comprl_gym.trainers import TrainConfig, make_trainer  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]

ENV_IDS = ["comprl/MiniHack-Room-5x5-v0", "comprl/WebShop-v0"]


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
    # seed 0: a run whose groups differ in outcome (an actor step); with agent.call_seed's
    # sampling seed 3 gave every episode the same reward
    local = _run(tmp_path / "local", seed=0)
    remote = _run(
        tmp_path / "ray",
        seed=0,
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


EXPERIENCE = {
    # a random tiny model never writes the JSON operations: one sentence it can write
    "extractor_format": "plain",
    "inject_top_k": 1,
    # the refiner of search_and_ask is the extractor model in the driver: off on Ray
    "search_and_ask_budget": 0,
    "min_uses": 1,
    "train_cooldown_steps": 0,
    "async_extraction": False,
    # diversification reads the clock (recent-use penalty) and a shared RNG whose draws
    # follow the order in which concurrent workers ask: off, retrieval is a pure function of
    # the store
    "diversify": False,
    # the first iteration retrieves nothing (the warm-up switch must reach the env workers)
    # and writes the store the second one retrieves from
    "warmup_iterations": 1,
}


def _run_complementary(output_dir, **overrides):
    """Two iterations (warm-up, then a full one) of one MiniHack family; what they played,
    the updated weights of both models and the store's tallies."""
    config = _config(
        output_dir,
        "complementary",
        env_ids=[ENV_IDS[0]],  # one family: what warm-up wrote is retrievable
        iterations=2,
        group_size=4,
        eval_tasks=0,
        extractor={"model": "tiny", "lr": 1e-3, "max_new_tokens": 10},
        experience=EXPERIENCE,
        seed=2,  # a seed whose second iteration has a learning signal (an actor step)
        **overrides,
    )
    # A store that is not empty from the start: warm-up must retrieve nothing from it.
    with ExperienceManager(str(output_dir / "experience"), config=config.experience) as store:
        store.add(
            ["## Title: Stairs\n## Description: rooms\n## Content: walk to the '>'"],
            env_family="minihack",
        )
    trainer = make_trainer(config)
    played = []
    original_play = trainer.rollouts

    def recording_play(tasks):
        episodes = original_play(tasks)
        played.append(
            [
                (
                    e.env_id,
                    e.seed,
                    e.with_experience,
                    [t.action for t in e.turns],
                    [t.reward for t in e.turns],
                    list(e.experience_ids),
                    e.error,
                )
                for e in episodes
            ]
        )
        return episodes

    trainer.rollouts = recording_play
    try:
        records = [trainer.train_iteration() for _ in range(2)]
        actor = {k: v.detach().clone() for k, v in trainer.actor.model.state_dict().items()}
        extractor_model = trainer.extractor.optimizer.model
        extractor = {k: v.detach().clone() for k, v in extractor_model.state_dict().items()}
        tallies = {
            e.id: (e.text, e.uses, e.wins)
            for e in trainer.manager.experiences(include_inactive=True)
        }
        session = ""
        if ray.is_initialized():
            session = ray._private.worker._global_node.get_session_dir_path()
            pids = {p.pid for p in ray_session_processes(session)} | {os.getpid()}
            assert_listens_on_loopback_only(pids)
            # the actor's from its update's record; the extractor's from its optimiser (the tiny
            # model never wins, so its CISPO advantages are zero and it takes no step here)
            ranks = (records[-1].get("actor/ranks"), trainer.extractor.optimizer.world_size)
        else:
            ranks = None
    finally:
        trainer.close()
    return played, actor, extractor, tallies, records, ranks, session


def test_a_complementary_run_on_ray_is_the_local_run(tmp_path):
    """2 env workers with the experience wrapper on the shared experience service, 2 trainer
    ranks for each model's update: the same episodes, store tallies and weights."""
    local = _run_complementary(tmp_path / "local")
    remote = _run_complementary(
        tmp_path / "ray",
        distributed={
            "enabled": True,
            # 2 env workers + 2 ranks for each model, a logical CPU each
            "num_cpus": 6,
            "env_workers": 2,
            "envs_per_worker": 2,
            "trainer_ranks": 2,
            "actor_start_timeout_s": 120,
        },
    )
    played, actor, extractor, tallies, records, ranks, session = remote
    assert local[5] is None
    # warm-up: nothing retrieved from the seeded store; then the with-experience half
    # retrieves (what warm-up wrote or the seeded experience)
    assert all(not exp_ids for *_, exp_ids, _ in played[0])
    with_half = [p for p in played[1] if p[2]]
    assert with_half and all(p[5] for p in with_half)
    assert all(p[6] is None for p in played[0] + played[1])
    assert played == local[0]
    assert tallies == local[3]
    # outcomes counted once: each experience shown in iteration 2 got one use per episode
    shown = [eid for p in with_half for eid in p[5]]
    assert sum(uses for _, uses, _ in tallies.values()) == len(shown) > 0
    for name, tensor in actor.items():
        torch.testing.assert_close(tensor, local[1][name], rtol=0, atol=1e-5)
    for name, tensor in extractor.items():
        torch.testing.assert_close(tensor, local[2][name], rtol=0, atol=1e-5)
    assert any(r.get("actor/samples", 0) > 0 for r in records), records
    assert ranks == (2, 2), "the updates do not run over the trainer ranks"
    assert not ray.is_initialized()
    left = [p.pid for p in ray_session_processes(session)]
    assert session and not left, f"Ray processes left after close(): {left}"


def test_experience_trainers_on_ray_refuse_search_and_ask(tmp_path):
    """search_and_ask's refiner is the extractor model in the driver: no env worker reaches
    it, so a distributed experience run asks for a zero budget before starting anything."""
    with pytest.raises(ConfigurationError, match="search_and_ask_budget: 0"):
        make_trainer(
            _config(
                tmp_path,
                "complementary",
                group_size=4,
                experience={"search_and_ask_budget": 1},
                distributed={"enabled": True},
            )
        )
    with pytest.raises(ConfigurationError, match="experience_service"):
        make_trainer(
            _config(
                tmp_path,
                "complementary",
                group_size=4,
                experience={"search_and_ask_budget": 0},
                distributed={"enabled": True, "experience_service": False},
            )
        )
    assert not ray.is_initialized()
