"""``comprl-gym eval``: summaries with honest intervals, resume, bad input, paired runs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from comprl_gym.cli import main
from comprl_gym.core import ConfigurationError, DataError
from comprl_gym.evaluation.eval import (
    EvalConfig,
    EvalInterrupted,
    load_episodes,
    run_eval,
    summarize,
    summary_markdown,
)
from comprl_gym.evaluation.stats import bootstrap_ci, paired_difference_interval

ENV = "comprl/MiniHack-Room-5x5-v0"


def _config(out, **kw):
    base = dict(
        env_ids=[ENV],
        agent="random",
        episodes=4,
        seeds=[0, 1],
        out_dir=out,
        max_steps=6,
        parallel=3,
        progress=False,
    )
    base.update(kw)
    return EvalConfig(**base)


def _without_timing(summary):
    summary = json.loads(json.dumps(summary))
    for group in [*summary["groups"], *summary["overall"].values()]:
        group.pop("timing")
    return summary


# ---- statistics ------------------------------------------------------------------------------
def test_bootstrap_interval_on_known_data():
    # 100 Bernoulli outcomes, 50 successes: the normal approximation gives 0.5 +- 0.098.
    ci = bootstrap_ci(np.r_[np.ones(50), np.zeros(50)])
    assert ci.mean == 0.5
    assert ci.low == pytest.approx(0.402, abs=0.012) and ci.high == pytest.approx(0.598, abs=0.012)
    # all equal: no spread; one value: collapses; none: NaN
    assert bootstrap_ci([1, 1, 1]).low == bootstrap_ci([1, 1, 1]).high == 1.0
    assert bootstrap_ci([0.3]).low == 0.3
    assert np.isnan(bootstrap_ci([]).mean)
    # continuous data: close to mean +- 1.96 * sd / sqrt(n)
    data = np.random.default_rng(1).normal(10, 2, size=400)
    ci = bootstrap_ci(data)
    half = 1.96 * data.std(ddof=1) / np.sqrt(data.size)
    assert ci.high - ci.mean == pytest.approx(half, rel=0.1) and ci.mean - ci.low == pytest.approx(
        half, rel=0.1
    )
    assert bootstrap_ci(data, seed=5) == bootstrap_ci(data, seed=5)


def test_paired_difference_interval():
    with_exp = [1, 1, 1, 0, 1, 1, 1, 1, 1, 1] * 3
    without = [0, 1, 0, 0, 1, 0, 1, 0, 1, 0] * 3
    ci = paired_difference_interval(with_exp, without)
    assert ci.mean == pytest.approx(0.5)
    assert 0 < ci.low < 0.5 < ci.high <= 0.8
    with pytest.raises(ValueError):
        paired_difference_interval([1], [1, 0])


# ---- runs ------------------------------------------------------------------------------------
def test_expert_summary_and_files(tmp_path):
    summary = run_eval(_config(tmp_path / "run", agent="expert", seeds=[0]))
    [group] = summary["groups"]
    assert (
        group["episodes"] == 4
        and group["success"]["mean"] == 1.0
        and group["env_family"] == "minihack"
    )
    assert {p.name for p in (tmp_path / "run").iterdir()} >= {
        "episodes.jsonl",
        "summary.json",
        "summary.md",
        "config.json",
    }
    # 4 wins of 4: Wilson's lower bound 4 / (4 + 1.96^2) = 0.51, not the bootstrap's 1.00.
    markdown = (tmp_path / "run" / "summary.md").read_text()
    assert "| comprl/MiniHack-Room-5x5-v0 | none | 4 | 1.00 [0.51, 1.00]" in markdown
    assert group["success"]["method"] == "wilson" and group["episodes_needed"] == 35
    written = json.loads((tmp_path / "run" / "summary.json").read_text())
    [warning] = written["warnings"]
    assert "cannot exclude a difference of 0.1; about 35 episodes would" in warning
    assert warning in markdown


def _record(task, seed, condition, won):
    key = f"{ENV}|task={task}|seed={seed}|exp={condition}"
    return dict(
        key=key,
        env_id=ENV,
        env_family="minihack",
        condition=condition,
        won=won,
        score=float(won),
        task_index=task,
        agent_seed=seed,
    )


def test_summary_of_hand_made_records_pairs_seeds_and_warnings():
    # 4 tasks x 2 seeds, with and without experience; every pair agrees (all fail on seed 0,
    # all win on seed 1): the old bootstrap said 0.00 [0.00, 0.00] for the difference.
    records = [
        _record(task, seed, condition, won=bool(seed))
        for task in range(4)
        for seed in (0, 1)
        for condition in ("with", "without")
    ]
    summary = summarize(records, paired=True)
    difference = summary["paired"]["per_env"][ENV]["difference"]
    # Newcombe method 10 on (a, b, c, d) = (4, 0, 0, 4): p1 = p2 = 1/2, Wilson(4, 8) half-width
    # w = z sqrt(2 + z^2/4) / (8 + z^2) = 0.284784, phi = (16 - 4) / 16 = 3/4: +-w sqrt(1/2).
    assert (difference["low"], difference["high"]) == pytest.approx((-0.201373, 0.201373), abs=1e-5)
    assert difference["method"] == "newcombe-paired-method-10"
    group = summary["groups"][0]
    assert (
        group["seeds"]["per_seed"]["0"]["mean"] == 0.0
        and group["seeds"]["per_seed"]["1"]["mean"] == 1.0
    )
    assert group["seeds"]["pooled"]["n"] == 8 and group["seeds"]["spread"]["sd"] == pytest.approx(
        0.707107, abs=1e-6
    )
    assert any("paired difference" in w and "pairs would" in w for w in summary["warnings"])
    markdown = summary_markdown(summary)
    assert "## Across agent seeds" in markdown and "0: 0.00, 1: 1.00" in markdown
    assert "| comprl/MiniHack-Room-5x5-v0 | 8 | 0.50 | 0.50 | 0.00 [-0.20, 0.20] |" in markdown


def test_resume_gives_the_same_summary_as_an_uninterrupted_run(tmp_path):
    full = run_eval(_config(tmp_path / "full"))
    # an "interrupted" run: only task 0-1 were finished, and the crash left half a line
    part = run_eval(_config(tmp_path / "part", episodes=2))
    with open(tmp_path / "part" / "episodes.jsonl", "a") as handle:
        handle.write('{"key": "comprl/MiniHack-Room-5x5-v0|task=2|seed=0|exp=none", "won": fal')
    assert part["episodes"] == 4
    resumed = run_eval(_config(tmp_path / "part", resume=True))
    assert resumed["episodes"] == full["episodes"] == 8
    assert _without_timing(resumed) == _without_timing(full)
    assert list((tmp_path / "part").glob("episodes.corrupt-*.jsonl")), (
        "the broken line is kept aside"
    )
    assert len(load_episodes(tmp_path / "part")) == 8


def test_existing_results_need_resume_and_same_settings(tmp_path):
    run_eval(_config(tmp_path / "r", episodes=1, seeds=[0]))
    with pytest.raises(ConfigurationError, match="--resume"):
        run_eval(_config(tmp_path / "r", episodes=1, seeds=[0]))
    with pytest.raises(ConfigurationError, match="different settings.*max_steps"):
        run_eval(_config(tmp_path / "r", episodes=1, seeds=[0], resume=True, max_steps=9))


def test_corrupt_results_are_reported_clearly_by_the_leaderboard_reader(tmp_path):
    run_eval(_config(tmp_path / "r", episodes=1, seeds=[0]))
    (tmp_path / "r" / "episodes.jsonl").write_text("not json\n")
    with pytest.raises(DataError, match="1 corrupt line"):
        load_episodes(tmp_path / "r", repair=False)


def test_unreachable_model_server_stops_cleanly_and_the_run_resumes(tmp_path, capsys):
    out = tmp_path / "r"
    code = main(
        [
            "eval",
            ENV,
            "--agent",
            "openai:http://127.0.0.1:9/v1#m",
            "--episodes",
            "1",
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert "cannot reach the OpenAI-compatible server" in err and "--resume" in err


def test_backend_failure_mid_run_keeps_finished_episodes(tmp_path, monkeypatch):
    from comprl_gym.agents import llm_agent
    from comprl_gym.llm.base import BackendError

    calls = {"n": 0}
    backend = llm_agent.shared_backend("hf:tiny")
    original = backend.generate

    def flaky(prompts, params):
        calls["n"] += 1
        if calls["n"] > 2:
            raise BackendError("out of memory (simulated)")
        return original(prompts, params)

    monkeypatch.setattr(backend, "generate", flaky)
    config = _config(
        tmp_path / "r", agent="hf:tiny?max_tokens=4", episodes=2, seeds=[0], max_steps=2, parallel=1
    )
    with pytest.raises(EvalInterrupted, match="(?s)out of memory.*1 finished episode.*--resume"):
        run_eval(config)
    assert len(load_episodes(tmp_path / "r")) == 1
    monkeypatch.setattr(backend, "generate", original)
    summary = run_eval(
        _config(
            tmp_path / "r",
            agent="hf:tiny?max_tokens=4",
            episodes=2,
            seeds=[0],
            max_steps=2,
            parallel=1,
            resume=True,
        )
    )
    assert summary["episodes"] == 2


@pytest.mark.slow
def test_paired_experience_runs_each_task_with_and_without(tmp_path):
    from comprl_gym.experience import ExperienceManager

    store = tmp_path / "store"
    manager = ExperienceManager(str(store))
    manager.add(
        ["## Title: Stairs\n## Description: MiniHack rooms\n## Content: walk towards the '>' sign"],
        env_family="minihack",
    )
    manager.close()
    summary = run_eval(
        _config(
            tmp_path / "p",
            agent="expert",
            episodes=2,
            seeds=[0],
            paired_experience=True,
            experience=str(store),
        )
    )
    assert {g["condition"] for g in summary["groups"]} == {"with", "without"}
    paired = summary["paired"]["overall"]
    assert (
        paired["pairs"] == 2 and paired["difference"]["mean"] == 0.0
    )  # the expert wins either way
    # ... which does not make the difference certain: Wilson(2, 2) lower bound 2 / (2 + z^2)
    assert paired["difference"]["high"] == pytest.approx(1 - 2 / (2 + 1.959964**2), abs=1e-5)
    records = load_episodes(tmp_path / "p")
    with_exp = [r for r in records if r["condition"] == "with"]
    assert with_exp and all(
        r["experience_ids"] and r["experiences"][0]["title"] == "Stairs" for r in with_exp
    )
    assert all(not r["experience_ids"] for r in records if r["condition"] == "without")
