"""``comprl-gym stream``: a streaming evaluation from the command line, read by the leaderboard.

The agent is scripted so the truth is known without a model: it walks down the branch a
lesson about its own dungeon names, and east when it has none. So with no lesson it wins
exactly the held-out dungeons whose stairs lie east (the family's hidden sides, read here
from :mod:`comprl_gym.envs.memory`), the oracle arm wins every episode, and the exemplar
memory, which stores each won episode's moves, wins a revisit exactly where the first visit
won.
"""

from __future__ import annotations

import hashlib
import json
import os
import re

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from comprl_gym.cli import main  # noqa: E402
from comprl_gym.envs.memory import dungeon, pool  # noqa: E402
from comprl_gym.evaluation.stream import episode_seeds  # noqa: E402

TASKS, VISITS, SEED = 4, 2, 3
ARMS = ("none", "oracle", "exemplar")
#: The side of held-out dungeon t (reset seed t plays the test pool's t-th dungeon).
SIDES = [dungeon(index).side for index in list(pool("test"))[:TASKS]]


class EastUnlessTold:
    """Goes the side a lesson about its own dungeon names; east without one."""

    def reset(self, task, info):
        name = task.split(",", 1)[0].removeprefix("You are in ")
        about_mine = [e["text"] for e in info.get("experiences") or [] if name in e["text"]]
        named = re.findall(r"\b(east|west)\b", " ".join(about_mine[:1]).lower())
        self.side = named[-1] if named else "east"

    def act(self, observation, info):
        return self.side


@pytest.fixture(scope="module")
def stream_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("stream") / "reader"
    argv = ["stream", "--env", "comprl/Memory-Fork-v0", "--split", "test"]
    argv += ["--tasks", str(TASKS), "--visits", str(VISITS), "--seed", str(SEED)]
    argv += ["--arms", ",".join(ARMS[1:]), "--agent", f"{__name__}:EastUnlessTold"]
    assert main([*argv, "--output-dir", str(out), "--no-progress"]) == 0
    return out


def _records(out):
    lines = (out / "episodes.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


@pytest.mark.slow
def test_a_stream_writes_an_eval_run_folder_with_arm_and_visit_per_episode(stream_run):
    for name in ("config.json", "episodes.jsonl", "summary.json", "summary.md"):
        assert (stream_run / name).is_file(), name
    assert (stream_run / "provenance.json").is_file() and (stream_run / "stream.png").is_file()
    records = _records(stream_run)
    assert len(records) == len(ARMS) * TASKS * VISITS
    assert {(r["arm"], r["condition"]) for r in records} == {(a, a) for a in ARMS}
    assert len({r["key"] for r in records}) == len(records)  # one key per episode
    summary = json.loads((stream_run / "summary.json").read_text())
    # eval's summary (one group per arm), with the stream's own on top
    assert sorted(g["condition"] for g in summary["groups"]) == sorted(ARMS)
    assert summary["stream"]["arms"] == list(ARMS) and summary["stream"]["tasks"] == TASKS
    assert "## Success by visit, per arm" in (stream_run / "summary.md").read_text()


@pytest.mark.slow
def test_every_arm_plays_each_task_and_visit_on_the_same_seeds(stream_run):
    seeds = {}
    for r in _records(stream_run):
        seeds.setdefault((r["task_index"], r["visit"]), set()).add(
            (r["reset_seed"], r["sampling_seed"], r["task_id"])
        )
    assert len(seeds) == TASKS * VISITS
    for (task, visit), played in seeds.items():
        assert len(played) == 1, (task, visit, played)  # the same in every arm
        reset, sampling, _ = next(iter(played))
        assert (reset, sampling) == episode_seeds(task, visit, SEED)


@pytest.mark.slow
def test_the_outcomes_are_what_each_lesson_source_tells(stream_run):
    won = {(r["arm"], r["task_index"], r["visit"]): bool(r["won"]) for r in _records(stream_run)}
    for task, side in enumerate(SIDES):
        for visit in range(1, VISITS + 1):
            assert won[("none", task, visit)] == (side == "east")
            assert won[("oracle", task, visit)]
            # The exemplar memory holds the won first visit's moves: the same side again.
            assert won[("exemplar", task, visit)] == (side == "east")
    summary = json.loads((stream_run / "summary.json").read_text())
    streaming = summary["streaming"]
    east = SIDES.count("east") / TASKS
    assert streaming["none"]["visits"]["all"]["success"]["mean"] == pytest.approx(east)
    oracle = streaming["oracle"]["minus_none"]["all"]
    assert oracle["pairs"] == TASKS * VISITS
    assert oracle["difference"]["mean"] == pytest.approx(1 - east)
    # The family's judge reads each store: the oracle's lessons are all right, the exemplar's
    # are the won dungeons' moves (east, where east was right), written after visit 1.
    verdicts = summary["store_verdicts"]
    assert verdicts["oracle"]["right"] == TASKS and verdicts["oracle"]["wrong"] == 0
    assert verdicts["exemplar"]["right"] == SIDES.count("east")
    assert sum(verdicts["exemplar"].values()) == SIDES.count("east")


@pytest.mark.slow
def test_the_leaderboard_reads_a_stream_with_a_per_visit_view(stream_run, tmp_path, capsys):
    assert main(["leaderboard", str(stream_run), "--out", str(tmp_path / "lb")]) == 0
    board = json.loads((tmp_path / "lb" / "leaderboard.json").read_text())
    rows = {r["run"]: r for r in board["rows"]}
    assert set(rows) == {f"reader [{arm}]" for arm in ARMS}
    assert rows["reader [oracle]"]["success"]["mean"] == 1.0
    visits = {r["arm"]: r for r in board["visits"]}
    assert set(visits) == set(ARMS)
    assert visits["oracle"]["visits"]["2"]["mean"] == 1.0
    assert visits["none"]["visits"]["1"]["mean"] == pytest.approx(SIDES.count("east") / TASKS)
    assert visits["oracle"]["minus_none"]["pairs"] == TASKS * VISITS
    assert "## Streaming runs: success by visit" in capsys.readouterr().out


def test_bad_arms_and_a_missing_run_are_refused_before_anything_is_played(tmp_path, capsys):
    base = ["stream", "--env", "comprl/Memory-Fork-v0", "--split", "test", "--tasks", "2"]
    out = tmp_path / "refused"
    assert main([*base, "--agent", "random", "--arms", "oracle,own", "--out", str(out)]) == 2
    assert "'own' arm is a trained run's extractor: pass --run DIR" in capsys.readouterr().err
    assert main([*base, "--agent", "random", "--arms", "oracel", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "unknown arm(s) ['oracel']" in err and "oracle, inverted, placebo" in err
    assert not (out / "episodes.jsonl").exists()
    assert main([*base, "--run", str(tmp_path / "no-run"), "--out", str(out)]) == 2
    assert "no-run is not a run folder: no such folder" in capsys.readouterr().err
    (tmp_path / "untrained" / "checkpoints").mkdir(parents=True)  # a run that saved none
    assert main([*base, "--run", str(tmp_path / "untrained"), "--out", str(out)]) == 2
    assert "checkpoints/latest: no checkpoint there" in capsys.readouterr().err


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """A one-iteration static-experience run of the tiny model: an actor and an extractor in
    its latest checkpoint."""
    from comprl_gym.trainers import TrainConfig, make_trainer

    out = tmp_path_factory.mktemp("trained") / "static"
    config = TrainConfig.from_dict(
        {
            "algorithm": "static_experience",
            "env_ids": ["comprl/Memory-Fork-v0"],
            "task_pool": 2,
            "iterations": 1,
            "groups_per_iteration": 1,
            "group_size": 2,
            "max_episode_steps": 2,
            "rollout_backend": "transformers",
            "actor": {"model": "tiny", "max_new_tokens": 6},
            "extractor": {"model": "tiny", "max_new_tokens": 8},
            "experience": {"extractor_format": "plain", "async_extraction": False},
            "eval_tasks": 0,
            "output_dir": str(out),
            "progress": False,
            "tensorboard": False,
            "torch_threads": 1,
        }
    )
    trainer = make_trainer(config)
    try:
        trainer.train()
    finally:
        trainer.close()
    return out


@pytest.mark.slow
def test_a_trained_runs_actor_streams_and_its_extractor_fills_the_own_arm(
    trained_run, tmp_path, capsys
):
    before = sorted(p.relative_to(trained_run) for p in trained_run.rglob("*"))
    out = tmp_path / "own"
    argv = ["stream", "--env", "comprl/Memory-Fork-v0", "--split", "test", "--tasks", "2"]
    argv += ["--arms", "own", "--run", str(trained_run), "--max-steps", "2"]
    # --set changes the run's config as `comprl-gym train --set` does: a wrong key is refused.
    assert main([*argv, "--set", "actor.no_such_key=1", "--output-dir", str(out)]) == 2
    assert "no_such_key" in capsys.readouterr().err and not out.exists()
    argv += ["--set", "actor.temperature=1.0"]
    assert main([*argv, "--output-dir", str(out), "--no-progress"]) == 0
    records = _records(out)
    assert sorted({r["arm"] for r in records}) == ["none", "own"] and len(records) == 8
    assert all(r["agent"].startswith("static_experience@1 (") for r in records)
    summary = json.loads((out / "summary.json").read_text())
    # The extractor wrote after visit 1 only (nothing reads a store after the last visit).
    own_lessons = sum(summary["store_verdicts"]["own"].values())
    assert 1 <= own_lessons <= 2
    assert all(r["experiences"] for r in records if r["arm"] == "own" and r["visit"] == 2)
    # The run's folder is only read.
    assert sorted(p.relative_to(trained_run) for p in trained_run.rglob("*")) == before
    # provenance names the checkpoint streamed, by the sha256 of its files, and what the run
    # trained on (its own provenance.json)
    run = json.loads((out / "provenance.json").read_text())["run"]
    checkpoint = trained_run / "checkpoints" / "step-1" / "trainer.pt"
    assert run["checkpoint"]["name"] == "step-1"
    assert (
        run["checkpoint"]["files"]["trainer.pt"]
        == hashlib.sha256(checkpoint.read_bytes()).hexdigest()
    )
    trained = json.loads((trained_run / "provenance.json").read_text())
    assert run["training_tasks"] == trained["training_tasks"] and run["training_tasks"]


def test_a_run_without_an_extractor_has_no_own_arm(tmp_path, capsys, monkeypatch):
    import comprl_gym.cli.stream as cli

    class GRPORun:  # what a GRPO run's trainer offers the stream: no lesson writer
        algorithm, iteration, extractor, memory = "grpo", 3, None, None
        closed = False

        def agent(self, seed, temperature=None):
            raise AssertionError("nothing is played before the arms are checked")

        def close(self):
            GRPORun.closed = True

    monkeypatch.setattr(cli, "_trained_run", lambda run, work, overrides: GRPORun())
    argv = ["stream", "--env", "comprl/Memory-Fork-v0", "--tasks", "2", "--arms", "own"]
    assert main([*argv, "--run", "runs/grpo", "--out", str(tmp_path / "x")]) == 2
    assert "runs/grpo is a grpo run, which has no extractor" in capsys.readouterr().err
    assert GRPORun.closed and not (tmp_path / "x").exists()


@pytest.mark.slow
def test_versus_pairs_a_treatment_with_its_placebo_and_shown_lessons_are_judged(tmp_path):
    """The scripted reader follows a lesson about its dungeon: oracle wins all 4 dungeons at
    each visit, inverted none, so oracle minus inverted is +1 with 4 discordant pairs (McNemar
    p = 2 / 2**4 = 0.125); at visit 2 the oracle arm showed a right lesson after each of its 4
    wins, the inverted arm a wrong one after each of its 4 losses."""
    out = tmp_path / "versus"
    argv = ["stream", "--env", "comprl/Memory-Fork-v0", "--split", "test", "--tasks", "4"]
    argv += ["--visits", "2", "--arms", "oracle,inverted", "--versus", "oracle:inverted"]
    argv += ["--agent", f"{__name__}:EastUnlessTold", "--output-dir", str(out), "--no-progress"]
    assert main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    for visit in ("1", "2"):
        paired = summary["versus"]["oracle minus inverted"][visit]
        assert paired["pairs"] == 4 and paired["difference"]["mean"] == 1.0
        assert paired["mcnemar_p"] == pytest.approx(0.125)
    shown = summary["shown_verdicts"]
    assert shown["oracle"] == {
        "after_won": {"right": 4, "wrong": 0, "no_side": 0},
        "after_lost": {"right": 0, "wrong": 0, "no_side": 0},
    }
    assert shown["inverted"]["after_lost"] == {"right": 0, "wrong": 4, "no_side": 0}
    text = (out / "summary.md").read_text()
    assert "| oracle minus inverted | +1.00" in text and "by how its previous visit ended" in text


def test_versus_and_a_run_source_are_checked_before_anything_is_played(tmp_path, capsys):
    base = ["stream", "--env", "comprl/Memory-Fork-v0", "--split", "test", "--tasks", "2"]
    out = tmp_path / "refused"
    argv = [*base, "--agent", "random", "--arms", "oracle", "--out", str(out)]
    assert main([*argv, "--versus", "oracle:coin"]) == 2
    assert "--versus names arm(s) ['coin'] not in --arms" in capsys.readouterr().err
    assert main([*argv, "--versus", "oracle"]) == 2
    assert "--versus takes TREATMENT:CONTROL" in capsys.readouterr().err
    both = [*base, "--run", "runs/x", "--config", "configs/demo.yaml", "--out", str(out)]
    assert main(both) == 2
    assert "not both" in capsys.readouterr().err
    assert not out.exists()


def test_without_split_a_stream_plays_the_held_out_pool_says_so_and_records_it(tmp_path, capsys):
    """No --split: the dungeons played are the test pool's (the family's held-out pool, named
    by :func:`comprl_gym.envs.memory.pool`), never the training pool the env defaults to."""
    out = tmp_path / "default-pool"
    argv = ["stream", "--env", "comprl/Memory-Fork-v0", "--tasks", "3", "--visits", "1"]
    argv += ["--agent", f"{__name__}:EastUnlessTold", "--output-dir", str(out), "--no-progress"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "playing pool test (held out)" in printed and "pool played: test (held out)" in printed
    played = {r["task_id"] for r in _records(out)}
    assert played == {dungeon(index).task_id("fork") for index in list(pool("test"))[:3]}
    config = json.loads((out / "config.json").read_text())
    assert config["config"]["env_kwargs"]["split"] == "test"
    assert config["pool"] == {"split": "test", "held_out": True, "chosen": "default"}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stream"]["pool"]["split"] == "test"


def test_the_leaderboard_ranks_a_training_pool_stream_apart_and_shows_each_pool(tmp_path, capsys):
    folders = {}
    for name, extra in (("held", []), ("trained-on", ["--split", "train"])):
        folders[name] = tmp_path / name
        argv = ["stream", "--env", "comprl/Memory-Fork-v0", "--tasks", "2", "--visits", "1"]
        argv += ["--agent", f"{__name__}:EastUnlessTold", "--no-progress", *extra]
        assert main([*argv, "--output-dir", str(folders[name])]) == 0
    capsys.readouterr()
    board_dir = tmp_path / "board"
    assert main(["leaderboard", *map(str, folders.values()), "--out", str(board_dir)]) == 0
    board = json.loads((board_dir / "leaderboard.json").read_text())
    rows = {row["folder"]: row for row in board["rows"]}
    held, trained = rows[str(folders["held"])], rows[str(folders["trained-on"])]
    assert held["pool"] == "test (held out)" and trained["pool"] == "train (training pool)"
    assert held["group"] != trained["group"] and "training pool" in trained["group"]
    assert trained["rank"] == 1  # first of its own group: never ranked among held-out rows
    assert "| train (training pool) |" in (board_dir / "leaderboard.md").read_text()
    # A run folder written before pools were recorded, without a split: the env's default,
    # the training pool.
    old = json.loads((folders["held"] / "config.json").read_text())
    del old["pool"]
    del old["config"]["env_kwargs"]["split"]
    (folders["held"] / "config.json").write_text(json.dumps(old))
    assert main(["leaderboard", str(folders["held"]), "--out", str(board_dir)]) == 0
    board = json.loads((board_dir / "leaderboard.json").read_text())
    assert board["rows"][0]["pool"] == "train (training pool)"


def test_first_task_plays_a_pools_later_dungeons_and_none_of_its_first(tmp_path, capsys):
    """--first-task 5 --tasks 2: reset seeds 5 and 6, the pool's 6th and 7th dungeons (a
    second table on the rest of a pool touches none of the dungeons a first one played)."""
    out = tmp_path / "later"
    argv = ["stream", "--env", "comprl/Memory-Fork-v0", "--split", "test", "--tasks", "2"]
    argv += ["--first-task", "5", "--visits", "1", "--agent", f"{__name__}:EastUnlessTold"]
    assert main([*argv, "--output-dir", str(out), "--no-progress"]) == 0
    played = [r["task_id"] for r in _records(out)]
    assert played == [dungeon(index).task_id("fork") for index in list(pool("test"))[5:7]]
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["stream"]["first_task"], summary["stream"]["tasks"]) == (5, 2)
    bad = ["stream", "--env", "comprl/Memory-Fork-v0", "--tasks", "1", "--first-task", "-1"]
    argv = [*bad, "--agent", "random", "--output-dir", str(tmp_path / "bad"), "--no-progress"]
    assert main(argv) != 0
    assert "--first-task must be >= 0, got -1" in capsys.readouterr().err
