"""Every trainer runs end to end on the tiny model across two env families; resume is exact."""

from __future__ import annotations

import json
import math
import os
import time

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from comprl_gym.trainers import TrainConfig, make_trainer  # noqa: E402

ENV_IDS = ["comprl/MiniHack-Room-5x5-v0", "comprl/WebShop-v0"]


#: The box is shared: one torch thread is far faster than two under contention.
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _config(tmp_path, algorithm, **overrides):
    data = {
        "algorithm": algorithm,
        "seed": 3,
        "env_ids": ENV_IDS,
        "iterations": 2,
        "groups_per_iteration": 2,
        # K/2 rollouts per half: each half needs two for a within-half advantage.
        "group_size": 2 if algorithm == "grpo" else 4,
        "max_episode_steps": 2,
        "history_turns": 1,
        "task_pool": 8,
        # A random tiny model never wins: the penalty gives the groups a learning signal.
        "invalid_action_penalty": 0.5,
        "actor": {"model": "tiny", "lr": 1e-3, "max_new_tokens": 6},
        "extractor": {"model": "tiny", "lr": 1e-3, "max_new_tokens": 10},
        "experience": {
            # a random tiny model never writes the JSON operations: one sentence it can write
            "extractor_format": "plain",
            "inject_top_k": 1,
            "search_and_ask_budget": 1,
            "min_uses": 1,
            "train_cooldown_steps": 0,
            "merge_interval_steps": 2,
            "async_extraction": False,
            "diversify": False,
        },
        "output_dir": str(tmp_path / algorithm),
        "eval_tasks": 1,
        "progress": False,
        "tensorboard": False,
    }
    for key, value in overrides.items():
        if isinstance(value, dict):
            data[key] = {**data.get(key, {}), **value}
        else:
            data[key] = value
    return TrainConfig.from_dict(data)


def _weights(module):
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def _changed(before, after):
    return any(not torch.equal(before[k], after[k]) for k in before)


@pytest.mark.slow
@pytest.mark.parametrize(
    "algorithm", ["grpo", "complementary", "static_experience", "experience_only"]
)
def test_each_trainer_runs_two_iterations_on_two_env_families(tmp_path, algorithm):
    async_mode = algorithm == "complementary"  # the background dual loop, once
    cfg = _config(tmp_path, algorithm, experience={"async_extraction": async_mode})
    trainer = make_trainer(cfg)
    actor_before = _weights(trainer.actor.model)
    extractor_before = _weights(trainer.extractor.optimizer.model) if trainer.extractor else None
    try:
        summary = trainer.train()
    finally:
        trainer.close()
    assert summary["iterations"] == 2
    assert summary["rollouts"] == 2 * cfg.groups_per_iteration * cfg.group_size
    records = [
        json.loads(x) for x in (tmp_path / algorithm / "metrics.jsonl").read_text().splitlines()
    ]
    assert [r["step"] for r in records] == [1, 2]
    # Per-task metrics for the tasks each iteration drew, from both families overall.
    families = {k.split("/")[0] for r in records for k in r if k.endswith("/success")}
    assert families & {"MiniHack-Room-5x5-v0", "WebShop-v0"}
    assert all(0.0 <= r["success"] <= 1.0 and r["actor_wait_s"] >= 0 for r in records)
    # The signs of collapse are logged every iteration: the share of task groups without a
    # learning signal, and the policy entropy of every update that trained a token (a
    # probability distribution over >= 2 tokens: between 0 and log(vocabulary)).
    assert all(0.0 <= r["actor/zero_variance_groups"] <= 1.0 for r in records)
    for who in ("actor", "extractor"):
        for r in records:
            if r.get(f"{who}/tokens"):
                assert 0.0 < r[f"{who}/entropy"] < math.log(trainer.actor.model.config.vocab_size)
    # The actor learns unless frozen; samples with a signal exist only when a group's outcomes
    # differ, so compare against whether any update had samples.
    had_signal = any(r.get("actor/samples", 0) > 0 for r in records)
    assert _changed(actor_before, _weights(trainer.actor.model)) == (
        algorithm != "experience_only" and had_signal
    )
    if algorithm == "grpo":
        assert trainer.extractor is None
        assert "without_experience" in summary["evaluation"][ENV_IDS[0]]
    else:
        assert records[-1]["store_size"] >= 1, "the extractor wrote no experience"
        assert set(summary["evaluation"][ENV_IDS[0]]) == {"with_experience", "without_experience"}
        # One held-out task per mode is never a certain rate nor a certain difference. By hand:
        # Wilson of 0 or 1 in 1 is 0.7935 = z^2 / (1 + z^2) wide; Newcombe's interval for one
        # pair is [-0.79, 0.79] when it agrees and [-0.12, 1] (or its mirror) when it does not.
        evaluation = summary["evaluation"][ENV_IDS[0]]
        ci = evaluation["without_experience"]["success_ci"]
        assert ci["method"] == "wilson" and ci["n"] == 1 and ci["high"] - ci["low"] > 0.79
        difference = evaluation["with_experience"]["difference"]
        assert difference["n"] == 1 and difference["high"] - difference["low"] > 1.1
        extractor_changed = _changed(extractor_before, _weights(trainer.extractor.optimizer.model))
        if algorithm == "static_experience":
            assert not extractor_changed and trainer.extractor.updates == 0
        else:
            assert extractor_changed == (trainer.extractor.updates > 0)
    assert (tmp_path / algorithm / "checkpoints" / "latest").exists()


def _tallies(trainer):
    """Every experience's outcome and training tallies, as the store holds them."""
    return [
        (e.id, e.status, e.uses, e.wins, e.training_count, e.merged_from)
        for e in trainer.manager.experiences(include_inactive=True)
    ]


@pytest.mark.slow
def test_resume_from_a_checkpoint_continues_with_identical_state(tmp_path):
    straight_cfg = _config(tmp_path / "a", "complementary", iterations=3, eval_tasks=0)
    straight = make_trainer(straight_cfg)
    try:
        straight.train()
        straight_tallies = _tallies(straight)
    finally:
        straight.close()

    # Same run, interrupted after iteration 2 and resumed in a new trainer.
    split_cfg = _config(tmp_path / "b", "complementary", iterations=2, eval_tasks=0)
    first = make_trainer(split_cfg)
    try:
        first.train()
        store_size = len(first.manager)
    finally:
        first.close()
    resumed_cfg = _config(tmp_path / "b", "complementary", iterations=3, eval_tasks=0)
    resumed = make_trainer(resumed_cfg)
    try:
        assert resumed.iteration == 2
        assert len(resumed.manager) == store_size >= 1
        resumed.train()
        resumed_tallies = _tallies(resumed)
    finally:
        resumed.close()

    assert resumed.iteration == straight.iteration == 3
    assert straight.actor.steps > 0, "nothing was trained"
    # The tiny actor never wins, so every extractor sample has r = -1 and, with the batch-mean
    # baseline, advantage 0: the extractor takes no step, but it wrote and kept samples.
    assert straight.extractor.counts.extractions > 0 and straight.extractor.pending
    assert [g.to_dict() for g in resumed.extractor.pending] == [
        g.to_dict() for g in straight.extractor.pending
    ]
    assert resumed.rollouts_done == straight.rollouts_done
    a, b = _weights(straight.actor.model), _weights(resumed.actor.model)
    assert all(torch.equal(a[k], b[k]) for k in a), "actor weights differ after resume"
    a, b = _weights(straight.extractor.optimizer.model), _weights(resumed.extractor.optimizer.model)
    assert all(torch.equal(a[k], b[k]) for k in a), "extractor weights differ after resume"
    assert resumed.extractor.updates == straight.extractor.updates
    # The outcome tallies live in the store (they follow merges): identical after resume.
    assert resumed_tallies == straight_tallies and any(t[2] for t in straight_tallies)
    metrics_a = [
        json.loads(x)
        for x in (tmp_path / "a" / "complementary" / "metrics.jsonl").read_text().splitlines()
    ]
    metrics_b = [
        json.loads(x)
        for x in (tmp_path / "b" / "complementary" / "metrics.jsonl").read_text().splitlines()
    ]
    assert [m["success"] for m in metrics_a] == [m["success"] for m in metrics_b]
    assert [m["store_size"] for m in metrics_a] == [m["store_size"] for m in metrics_b]


@pytest.mark.slow
def test_warm_up_builds_the_store_without_retrieval_or_updates(tmp_path):
    """Reference ``memory_warmup_interval``: warm-up rollouts see no experience and train no
    model, yet their experience-half trajectories are distilled into the store."""
    cfg = _config(
        tmp_path,
        "complementary",
        env_ids=["comprl/MiniHack-Room-5x5-v0"],  # one family: what warm-up wrote is retrievable
        iterations=2,
        eval_tasks=0,
        experience={"warmup_iterations": 1},
    )
    trainer = make_trainer(cfg)
    try:
        actor_before = _weights(trainer.actor.model)
        extractor_before = _weights(trainer.extractor.optimizer.model)
        played = []
        original_play = trainer.rollouts

        def recording_play(tasks):
            episodes = original_play(tasks)
            played.append(episodes)
            return episodes

        trainer.rollouts = recording_play
        first = trainer.train_iteration()
        assert first["warmup"] == 1
        assert "actor/samples" not in first
        assert all(not e.experience_ids and not e.search_and_ask_calls for e in played[0])
        assert not _changed(actor_before, _weights(trainer.actor.model))
        assert not _changed(extractor_before, _weights(trainer.extractor.optimizer.model))
        assert trainer.extractor.updates == 0
        assert len(trainer.manager) > 0, "warm-up trajectories were not distilled"
        second = trainer.train_iteration()
        assert second["warmup"] == 0
        assert "actor/samples" in second  # the update ran (zero-advantage samples are skipped)
        with_half = [e for e in played[1] if e.with_experience]
        assert with_half and all(e.experience_ids for e in with_half)
    finally:
        trainer.close()


@pytest.mark.slow
def test_rollouts_wait_for_pending_extractions_and_evaluation_writes_nothing(tmp_path):
    """The flush barrier (staleness 0): every rollout starts with no extraction job pending.
    Evaluation reads the store but leaves every tally as it was."""
    cfg = _config(
        tmp_path,
        "complementary",
        env_ids=["comprl/MiniHack-Room-5x5-v0"],
        iterations=2,
        eval_tasks=2,
        experience={"async_extraction": True},
    )
    trainer = make_trainer(cfg)
    try:
        pending_at_rollout = []
        original_play = trainer.rollouts

        def recording_play(tasks):
            pending_at_rollout.append(trainer.worker.pending)
            return original_play(tasks)

        trainer.rollouts = recording_play
        trainer.train_iteration()
        trainer.train_iteration()
        assert pending_at_rollout == [0, 0]
        trainer.worker.drain()
        before = _tallies(trainer)
        assert sum(uses for _, _, uses, _, _, _ in before) > 0
        table = trainer.evaluate()
        assert table["comprl/MiniHack-Room-5x5-v0"]["with_experience"]["episodes"] == 2
        assert _tallies(trainer) == before
    finally:
        trainer.close()


@pytest.mark.slow
def test_a_trainer_on_served_envs_learns_as_it_does_in_process(tmp_path):
    """env_url: the same seeded GRPO run, with its envs on an env server, is the same run."""
    pytest.importorskip("openenv", reason="needs openenv-core (pip install comprl-gym[serve])")
    from comprl_gym.serving.server import make_app, serve_in_background

    def run(name, **overrides):
        trainer = make_trainer(_config(tmp_path / name, "grpo", eval_tasks=1, **overrides))
        try:
            summary = trainer.train()
        finally:
            trainer.close()
        lines = (tmp_path / name / "grpo" / "metrics.jsonl").read_text().splitlines()
        timings = ("_s", "time", "per_s", "tokens_per", "wait/")
        records = [
            {k: v for k, v in json.loads(x).items() if not any(t in k for t in timings)}
            for x in lines
        ]
        return records, summary["evaluation"]

    # Groups of 4: enough rollouts that some group differs in outcome (a signal to train on).
    local = run("local", group_size=4)
    served_kwargs = {env_id: {"max_steps": 2} for env_id in ENV_IDS}
    app = make_app(ENV_IDS, max_sessions=64, env_kwargs=served_kwargs)
    with serve_in_background(app) as server:
        remote = run("remote", env_url=server.url, group_size=4)
        closed = time.monotonic() + 10
        while server.active_sessions and time.monotonic() < closed:
            time.sleep(0.1)
        assert server.active_sessions == 0
    assert remote == local
    assert any(r.get("actor/samples", 0) > 0 for r in local[0])


@pytest.mark.parametrize("critique", [True, False])
def test_the_actor_critique_switch(tmp_path, critique):
    """``experience.actor_critique``: on, the actor (the real tiny model, which writes no
    readable decision) critiques the with-experience half's lesson before each episode, the
    unreadable decisions drop it and the iteration counts them; off, nothing changes: the
    lesson reaches the prompt and no critique is made or logged."""
    cfg = _config(
        tmp_path,
        "complementary",
        env_ids=["comprl/MiniHack-Room-5x5-v0"],
        iterations=1,
        groups_per_iteration=1,
        eval_tasks=0,
        experience={"actor_critique": critique, "critique_max_tokens": 8},
    )
    trainer = make_trainer(cfg)
    try:
        lesson = "Walk straight toward the staircase down."
        trainer.manager.add([lesson], env_family="minihack")
        trainer.actor_performance["minihack"] = [1.0, 4]
        assert trainer.performance_of("minihack") == (0.25, 4)
        original_play = trainer.rollouts
        played = []

        def recording_play(tasks):
            played.extend(original_play(tasks))
            return played

        trainer.rollouts = recording_play
        record = trainer.train_iteration()
        with_half = [e for e in played if e.with_experience]
        assert len(with_half) == 2 and all(e.experience_ids for e in with_half)
        tokenizer = trainer.actor.tokenizer
        prompts = [tokenizer.decode(e.turns[0].prompt_token_ids) for e in with_half]
        if critique:
            assert [e.critique["decision"] for e in with_half] == ["unparsed", "unparsed"]
            assert record["critique/unparsed"] == 2 and record["critique/accept"] == 0
            assert not any(lesson in p for p in prompts)
        else:
            assert all(e.critique is None for e in played)
            assert not any(k.startswith("critique/") for k in record)
            assert all(lesson in p for p in prompts)
        # every training episode joins the actor's running performance
        assert trainer.actor_performance["minihack"][1] == 4 + 4
    finally:
        trainer.close()
