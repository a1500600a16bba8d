"""The sealed table's bench (issue 44, item 4): it runs what the committed plan says and nothing
else, refuses a plan that is not committed or was edited, resumes what a killed run left, and
at tiny size trains, streams and tables a plan end to end."""

from __future__ import annotations

import json
import shutil
import subprocess

import gymnasium as gym
import pytest
import yaml
from conftest import REPO_ROOT
from test_memory_recipes import TINY

import comprl_gym  # noqa: F401  (registers the envs)
from benchmarks.sealed_table import recompute, render_capable
from benchmarks.sealed_table import run as bench
from comprl_gym.envs.memory import dungeon, pool
from comprl_gym.envs.memory.dungeons import slug
from comprl_gym.evaluation.provenance import file_sha256
from comprl_gym.trainers import TrainConfig


def test_the_committed_plan_trains_on_train_dungeons_and_streams_the_sealed_ones():
    plan = bench.load_plan()  # checks the reader's registered sha256 against the file
    assert plan["seeds"] == [0, 1, 2]
    assert [m["name"] for m in plan["methods"]] == [
        "GRPO", "static experience", "exemplar memory", "Complementary RL",
    ]  # fmt: skip
    assert (plan["primary"]["treatment"], plan["primary"]["control"]) == (
        "Complementary RL",
        "GRPO",
    )
    for method in plan["methods"]:
        command = bench.train_command(plan, method, 2)
        overrides = [command[k + 1] for k, word in enumerate(command) if word == "--set"]
        config = TrainConfig.from_yaml(REPO_ROOT / method["config"], overrides)
        assert config.seed == 2 and config.actor.init_weights.endswith("memory-reader/reader.pt")
        assert config.env_kwargs["comprl/Memory-Fork-v0"]["split"] == "train"
        stream = bench.stream_command(plan, method, 2)
        assert stream[stream.index("--split") + 1] == "sealed"
        assert (
            stream[stream.index("--run") + 1]
            == f"runs/sealed-table/{bench.slug(method['name'])}-seed2"
        )
        assert stream[stream.index("--arms") + 1].split(",")[-1] == "outcome_aware"
    # Reset seeds 0..127 of the sealed pool: dungeons 512..639 (65 with the stairs east, as the
    # plan says), and 640..767 left unused.
    env = gym.make(plan["pool"]["env"], split="sealed")
    assert [env.reset(seed=s)[1]["task_id"] for s in (0, 127)] == [
        f"fork/{slug(dungeon(i).name)}" for i in (512, 639)
    ]
    env.close()
    streamed = list(pool("sealed"))[: plan["pool"]["tasks"]]
    assert sum(dungeon(i).side == "east" for i in streamed) == 65
    assert "dungeons 512-639, 65 with the" in bench.PLAN.read_text()


CAPABLE = REPO_ROOT / "benchmarks" / "preregistered" / "capable_table.yaml"


def test_the_capable_plan_streams_the_sealed_dungeons_the_first_left_with_seeds_as_unit(
    monkeypatch,
):
    """Issue 56's plan: five methods, five seeds, the primary read between seeds; its pool is
    reset seeds 128..255 of the sealed pool (dungeons 640-767, 63 east), none of which the
    first plan's streams (seeds 0..127) played; its methods train on 16 `train` dungeons, 8
    each side; the refined extractors are probed."""
    monkeypatch.setattr(bench, "PLAN", bench.PLAN)
    monkeypatch.setattr(bench, "RUNS", bench.RUNS)
    bench.use_plan(CAPABLE)
    plan = bench.load_plan()  # the reader's and the writer's registered sha256 checked
    assert plan["seeds"] == [0, 1, 2, 3, 4] and plan["primary"]["unit"] == "training seed"
    assert [m["name"] for m in plan["methods"]] == [
        "GRPO", "static experience", "exemplar memory", "Complementary RL",
        "Complementary RL, bare extractor",
    ]  # fmt: skip
    assert bench.RUNS == REPO_ROOT / "runs" / "capable-table"
    env = gym.make(plan["pool"]["env"], split="sealed")
    first, last = plan["pool"]["first_task"], plan["pool"]["first_task"] + plan["pool"]["tasks"]
    assert [env.reset(seed=s)[1]["task_id"] for s in (first, last - 1)] == [
        f"fork/{slug(dungeon(i).name)}" for i in (640, 767)
    ]
    env.close()
    streamed = list(pool("sealed"))[first:last]
    first_plan = yaml.safe_load(
        (REPO_ROOT / "benchmarks/preregistered/sealed_table.yaml").read_text()
    )
    assert not set(streamed) & set(list(pool("sealed"))[: first_plan["pool"]["tasks"]])
    assert sum(dungeon(i).side == "east" for i in streamed) == 63
    for method in plan["methods"]:
        command = bench.train_command(plan, method, 3)
        overrides = [command[k + 1] for k, word in enumerate(command) if word == "--set"]
        config = TrainConfig.from_yaml(REPO_ROOT / method["config"], overrides)
        assert config.seed == 3 and config.env_kwargs["comprl/Memory-Fork-v0"]["split"] == "train"
        trained = list(pool("train"))[: config.task_pool]
        assert sum(dungeon(i).side == "east" for i in trained) == config.task_pool // 2 == 8
        assert config.sensitivity_tasks == 16
        stream = bench.stream_command(plan, method, 3)
        assert stream[stream.index("--first-task") + 1] == "128"
        assert stream[stream.index("--split") + 1] == "sealed"
        if config.algorithm != "grpo":
            assert config.experience.warmup_iterations == 2
    folders = [path.name for path, _ in bench.steps(plan, [0])]
    assert "probe-complementary-rl-seed0.json" in folders
    assert "probe-complementary-rl-bare-extractor-seed0.json" in folders
    assert not any(name.startswith("probe-grpo") for name in folders)


def test_a_bench_can_take_only_some_methods(tmp_path, monkeypatch, capsys):
    """``--method`` (repeatable; names may hold commas) leaves the other methods' runs to
    other benches; a name the plan does not have is refused."""
    monkeypatch.setattr(bench, "PLAN", bench.PLAN)
    monkeypatch.setattr(bench, "RUNS", bench.RUNS)  # both restored after the test
    bench.use_plan(CAPABLE)
    bench.RUNS = tmp_path
    # as on a machine before any record was committed (some of seed 4's now are)
    monkeypatch.setattr(bench, "recorded", lambda plan, method, seed: False)
    bare = "Complementary RL, bare extractor"
    assert bench.main(["--seeds", "4", "--method", "GRPO", "--method", bare, "--dry-run"]) == 0
    # each command ends with what it writes
    outputs = [line.split()[-1] for line in capsys.readouterr().out.splitlines()]
    assert outputs == [
        str(tmp_path / name)
        for name in (
            "grpo-seed4",
            "stream-grpo-seed4",
            "complementary-rl-bare-extractor-seed4",
            "probe-complementary-rl-bare-extractor-seed4.json",
            "stream-complementary-rl-bare-extractor-seed4",
        )
    ]
    with pytest.raises(SystemExit, match="the plan's methods are"):
        bench.main(["--method", "PPO", "--dry-run"])


def test_a_plan_whose_writer_is_not_the_registered_one_is_refused(tmp_path):
    plan = yaml.safe_load(CAPABLE.read_text())
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump({**plan, "writer": {**plan["writer"], "sha256": "1" * 64}}))
    with pytest.raises(SystemExit, match="not the registered writer"):
        bench.load_plan(path)


def test_the_posthoc_reader_stream_is_the_plans_stream_of_the_untrained_reader():
    plan = bench.load_plan()
    command = bench.reader_stream_command(plan, 1)
    assert "--run" not in command
    flags = dict(zip(command[2::2], command[3::2]))
    assert (flags["--split"], flags["--tasks"], flags["--visits"], flags["--seed"]) == (
        "sealed", "128", "2", "1",
    )  # fmt: skip
    assert flags["--config"] == "configs/memory-grpo.yaml"
    assert flags["--set"] == "actor.init_weights=assets/memory-reader/reader.pt"
    assert flags["--arms"] == "none,outcome_aware"
    assert flags["--output-dir"] == "runs/sealed-table/posthoc-reader-seed1"
    # the same pool, visits and sampling as GRPO's registered stream at that seed
    grpo = dict(zip(*[iter(bench.stream_command(plan, plan["methods"][0], 1)[2:])] * 2))
    for flag in ("--env", "--split", "--tasks", "--visits", "--max-steps", "--temperature"):
        assert flags[flag] == grpo[flag]


def test_the_posthoc_pool_streams_are_grpos_seed_0_stream_on_development_pools():
    plan = bench.load_plan()
    registered = bench.stream_command(plan, plan["methods"][0], 0)
    folders = {"test": "posthoc-grpo-seed0-test", "test_large": "posthoc-grpo-seed0-test-large"}
    assert tuple(folders) == bench.POSTHOC_POOLS
    for split, folder in folders.items():
        command = bench.pool_stream_command(plan, split)
        flags = dict(zip(command[2::2], command[3::2]))
        assert (flags["--split"], flags["--tasks"]) == (split, "64")
        assert flags["--run"] == "runs/sealed-table/grpo-seed0"
        assert flags["--output-dir"] == f"runs/sealed-table/{folder}"
        # everything else as registered for GRPO at seed 0
        changed = {"--split", "--tasks", "--output-dir"}
        assert {k: v for k, v in flags.items() if k not in changed} == {
            k: v for k, v in zip(registered[2::2], registered[3::2]) if k not in changed
        }


def test_lesson_following_counts_first_moves_by_the_side_each_lesson_names():
    """Worked by hand on five visit-2 episodes of one east dungeon: two shown the oracle's east
    sentence (one moved east), two its west sentence (neither moved west), one shown a won
    record of a west neighbour (it moved west: the record's side, whatever its dungeon)."""
    east = next(dungeon(i) for i in pool("train") if dungeon(i).side == "east")
    west = next(dungeon(i) for i in pool("train") if dungeon(i).side == "west")
    sentence = "In the {} the staircase down is at the end of the {} branch."

    def episode(arm, first, lesson=None, visit=2):
        shown = [{"content": lesson}] if lesson else []
        # an east dungeon: a first move east reaches the stairs, west the dead end
        return {"arm": arm, "visit": visit, "task_id": east.task_id("fork"), "won": first == "east",
                "turns": [{"action": first}], "experiences": shown}  # fmt: skip

    record = f"Task: You are in the {west.name}.\nActions that won it, in order: west, west."
    records = [
        episode("none", "east", visit=1),
        episode("outcome_aware", "east", sentence.format(east.name, "east")),
        episode("outcome_aware", "west", sentence.format(east.name, "east")),
        episode("outcome_aware", "east", sentence.format(east.name, "west")),
        episode("outcome_aware", "east", sentence.format(east.name, "west")),
        episode("own", "west", record),
    ]
    out = bench.lesson_following(records)
    assert out["none"]["1"] == {"episodes": 1, "won": 1, "east_first": 1, "follows": {}}
    aware = out["outcome_aware"]["2"]
    assert (aware["episodes"], aware["won"], aware["east_first"]) == (4, 3, 3)
    assert (aware["follows"]["east"]["mean"], aware["follows"]["east"]["n"]) == (0.5, 2)
    assert (aware["follows"]["west"]["mean"], aware["follows"]["west"]["n"]) == (0.0, 2)
    assert out["own"]["2"]["follows"]["west"]["mean"] == 1.0


def test_a_plan_must_be_committed_and_unchanged(tmp_path):
    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    git("config", "user.email", "t@t")
    git("config", "user.name", "t")
    plan = tmp_path / "plan.yaml"
    plan.write_text("seeds: [0]\n")
    with pytest.raises(SystemExit, match="not committed"):
        bench.registered_commit(plan, tmp_path)
    git("add", "plan.yaml")
    git("commit", "-q", "-m", "plan")
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True
    ).stdout.strip()
    assert bench.registered_commit(plan, tmp_path) == head
    plan.write_text("seeds: [0, 1]\n")
    with pytest.raises(SystemExit, match="differs from its commit"):
        bench.registered_commit(plan, tmp_path)


def git_history(repo):
    """A new git repository at ``repo``; returns ``commit(path, text)``, which writes and
    commits one file and returns the new commit."""

    def git(*args):
        return subprocess.run(
            ["git", *args], cwd=repo, check=True, capture_output=True, text=True
        ).stdout.strip()

    def commit(path, text):
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
        git("add", path)
        git("commit", "-q", "-m", path)
        return git("rev-parse", "HEAD")

    git("init", "-q")
    git("config", "user.email", "t@t")
    git("config", "user.name", "t")
    return commit


def test_each_run_is_checked_against_the_code_of_the_plans_commit(tmp_path):
    """A run made at the plan's commit, or later with the library, configs and assets as they
    were, ran as registered; one made after the library changed, from a dirty tree, or before
    the plan, did not (the commits are a real git history)."""

    commit = git_history(tmp_path)
    before = commit("comprl_gym/trainer.py", "v1")
    plan = commit("plan.yaml", "seeds: [0]")
    docs = commit("docs/page.md", "a page")
    changed = commit("comprl_gym/trainer.py", "v2")
    folders = []
    for name, made_at, dirty in (
        ("at-plan", plan, False), ("docs-later", docs, False), ("dirty", docs, True),
        ("library-changed", changed, False), ("before-plan", before, False),
    ):  # fmt: skip
        folder = tmp_path / "runs" / name
        folder.mkdir(parents=True)
        package = {"git_commit": made_at, "git_dirty": dirty}
        (folder / "provenance.json").write_text(json.dumps({"package": package}))
        (folder / "metrics.jsonl").write_text("")  # a training run's folder, read as a Run
        folders.append(folder)
    code = bench.code_of(tuple(folders), plan, tmp_path)
    assert {name: c["inputs_as_registered"] for name, c in code.items()} == {
        "at-plan": True, "docs-later": True, "dirty": False, "library-changed": False,
        "before-plan": False,
    }  # fmt: skip
    assert code["library-changed"]["after_the_plan"] and not code["before-plan"]["after_the_plan"]


def test_the_bench_runs_nothing_where_the_library_differs_from_the_plans_commit(tmp_path):
    """A checkout whose library, configs and assets are the plan's runs, whatever else
    changed; one where they were edited (in the working tree or committed since) is refused,
    naming the file."""

    commit = git_history(tmp_path)
    commit("comprl_gym/trainer.py", "v1")
    plan = commit("plan.yaml", "seeds: [0]")
    commit("docs/page.md", "a page")
    bench.refuse_changed_inputs(plan, tmp_path)  # docs changed: runs
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "new.yaml").write_text("untracked: true")  # not the library's
    bench.refuse_changed_inputs(plan, tmp_path)
    (tmp_path / "comprl_gym" / "trainer.py").write_text("v2")
    with pytest.raises(SystemExit, match="comprl_gym/trainer.py: changed since the plan"):
        bench.refuse_changed_inputs(plan, tmp_path)
    commit("comprl_gym/trainer.py", "v2")
    with pytest.raises(SystemExit, match="comprl_gym/trainer.py: changed since the plan"):
        bench.refuse_changed_inputs(plan, tmp_path)
    with pytest.raises(SystemExit, match="changed since the plan"):
        bench.refuse_changed_inputs("0" * 40, tmp_path)  # a commit git does not know


def test_a_plan_with_another_reader_or_an_unknown_primary_is_refused(tmp_path, monkeypatch):
    plan = yaml.safe_load(bench.PLAN.read_text())
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump({**plan, "reader": {**plan["reader"], "sha256": "0" * 64}}))
    with pytest.raises(SystemExit, match="not the registered reader"):
        bench.load_plan(path)
    primary = {**plan["primary"], "control": "PPO"}
    path.write_text(yaml.safe_dump({**plan, "primary": primary}))
    with pytest.raises(SystemExit, match="primary control 'PPO' is not a method"):
        bench.load_plan(path)


def test_benches_sharing_a_plan_take_each_method_and_seed_once(tmp_path, monkeypatch):
    """Two benches on one plan: a (method, seed) held by one is skipped by the other, its
    training, probe and stream alike; released, it can be taken."""
    monkeypatch.setattr(bench, "RUNS", tmp_path)
    names = ["grpo-seed0", "stream-grpo-seed0", "probe-complementary-rl-seed3.json"]
    assert [bench.unit_of(tmp_path / n) for n in names] == [
        "grpo-seed0", "grpo-seed0", "complementary-rl-seed3",
    ]  # fmt: skip
    with (
        bench.claimed("grpo-seed0") as first,
        bench.claimed("grpo-seed0") as second,
        bench.claimed("grpo-seed1") as other,
    ):
        assert (first, second, other) == (True, False, True)
    with bench.claimed("grpo-seed0") as again:
        assert again


def test_a_killed_training_run_resumes_and_a_killed_stream_starts_again(tmp_path, monkeypatch):
    ran = []
    monkeypatch.setattr(
        bench.subprocess,
        "run",
        lambda command, cwd: ran.append(command) or subprocess.CompletedProcess(command, 0),
    )
    train = tmp_path / "grpo-seed0"
    (train / "checkpoints").mkdir(parents=True)
    bench.run_step(train, ["comprl-gym", "train", "--config", "c.yaml"])
    # recorded as `comprl-gym train ...`, run by this Python's comprl_gym.cli
    assert ran[-1] == [*bench.CLI, "train", "--config", "c.yaml", "--set", "resume=true"]
    stream = tmp_path / "stream-grpo-seed0"
    stream.mkdir()
    (stream / "episodes.jsonl").write_text("{}\n")
    bench.run_step(stream, ["comprl-gym", "stream", "--output-dir", str(stream)])
    assert not stream.exists()  # the command makes it anew
    (aside,) = tmp_path.glob("stream-grpo-seed0.unfinished-*")
    assert (aside / "episodes.jsonl").read_text() == "{}\n"  # nothing lost
    monkeypatch.setattr(
        bench.subprocess, "run", lambda command, cwd: subprocess.CompletedProcess(command, 1)
    )
    with pytest.raises(SystemExit, match="the command failed"):
        bench.run_step(tmp_path / "new", ["comprl-gym", "train"])


@pytest.mark.slow
def test_a_tiny_plan_runs_end_to_end_and_tables_its_primary_comparison(
    tmp_path, monkeypatch, capsys
):
    """Two methods (GRPO and the exemplar memory) at one seed on 2 `test` dungeons, tiny
    models from a tiny reader: the bench trains and streams each, records what ran, and writes
    the table with the primary cell; run again, it runs nothing."""
    from comprl_gym.cli import main

    reader_dir = tmp_path / "reader"
    argv = ["train", "--config", str(REPO_ROOT / "configs" / "memory-reader.yaml")]
    sets = ["warmup.steps=2", "actor.init_weights=", *TINY]
    assert main([*argv, "--output-dir", str(reader_dir), *(f"--set={s}" for s in sets)]) == 0
    reader = reader_dir / "warmup" / "reader.pt"
    plan = yaml.safe_load(bench.PLAN.read_text())
    plan.update(
        seeds=[0],
        pool={**plan["pool"], "split": "test", "tasks": 2},
        reader={"path": str(reader), "sha256": file_sha256(reader)},
        methods=[m for m in plan["methods"] if m["name"] in ("GRPO", "exemplar memory")],
        primary={**plan["primary"], "treatment": "exemplar memory", "unit": "training seed"},
        output=str(tmp_path / "table"),
        records=str(tmp_path / "records"),
    )
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(plan))
    monkeypatch.setattr(bench, "PLAN", tmp_path / "plan.yaml")
    monkeypatch.setattr(bench, "RUNS", tmp_path / "runs")
    monkeypatch.setattr(bench, "registered_commit", lambda: "0" * 40)
    monkeypatch.setattr(bench, "refuse_changed_inputs", lambda commit: None)
    full_size = bench.train_command
    monkeypatch.setattr(
        bench,
        "train_command",
        lambda plan, method, seed: [
            *full_size(plan, method, seed),
            *(w for s in TINY for w in ("--set", s)),
        ],
    )
    assert bench.main([]) == 0
    result = json.loads((tmp_path / "table.json").read_text())
    assert [r["method"] for r in result["rows"]] == ["GRPO", "exemplar memory"]
    primary = result["primary"]
    assert primary["comparison"] == "exemplar memory minus GRPO, visit 2"
    assert primary["pairs"] == 2 and primary["holds"] == (primary["difference"]["low"] > 0)
    exemplar = next(r for r in result["rows"] if r["method"] == "exemplar memory")
    assert exemplar["deployed_arm"] == "own" and "outcome_aware" in exemplar["success"]
    record = result["runs"]["GRPO"]["0"]
    assert record["training_tasks"] and record["train_command"].startswith("comprl-gym train")
    assert record["time_s"]["train"] > 0 and record["time_s"]["stream"] > 0
    assert set(record["code"]) == {"grpo-seed0", "stream-grpo-seed0"}
    assert file_sha256(reader) in json.dumps(record["models"])
    grpo = next(m for m in plan["methods"] if m["name"] == "GRPO")
    streamed = bench.train_folder(grpo, 0) / "checkpoints" / record["checkpoint"]["name"]
    assert record["checkpoint"]["files"]["trainer.pt"] == file_sha256(streamed / "trainer.pt")
    assert "scripted ceiling (outcome_aware), visit 2" in (tmp_path / "table.md").read_text()
    # by the training seed: one seed, so the interval is every difference there is
    assert primary["unit"] == "training seed" and primary["between_seeds"]["n"] == 1
    assert primary["holds"] == (primary["between_seeds"]["low"] > 0)
    # the records are kept, and the table recomputes from them alone (runs/ moved away)
    assert {name for name in result["records"]} >= {
        str(tmp_path / "records" / "stream-grpo-seed0-episodes.jsonl.gz"),
        str(tmp_path / "records" / "grpo-seed0-metrics.jsonl.gz"),
    }
    (tmp_path / "runs").rename(tmp_path / "gone")
    assert recompute.main(["--plan", str(tmp_path / "plan.yaml")]) == 0
    assert "recompute from the records" in capsys.readouterr().out
    committed = json.loads((tmp_path / "table.json").read_text())
    committed["rows"][1]["success"]["own"]["2"]["mean"] += 0.01  # one number edited
    (tmp_path / "table.json").write_text(json.dumps(committed))
    assert recompute.main(["--plan", str(tmp_path / "plan.yaml")]) == 1
    (tmp_path / "gone").rename(tmp_path / "runs")
    ran = []
    monkeypatch.setattr(bench, "run_step", lambda folder, command: ran.append(folder))
    assert bench.main([]) == 0 and ran == []
    # A new machine: no runs/, the records committed. Every (method, seed) is made again from
    # its records, nothing runs, and the table comes out as it did.
    shutil.rmtree(tmp_path / "runs")
    capsys.readouterr()
    assert bench.main(["--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "comprl-gym" not in out
    assert "made again from their committed records: exemplar-memory-seed0, grpo-seed0" in out
    assert bench.main([]) == 0 and ran == []
    assert capsys.readouterr().out.count("made again from its committed records") == 2
    again = json.loads((tmp_path / "table.json").read_text())
    assert [again[k] for k in ("rows", "primary", "runs")] == [
        result[k] for k in ("rows", "primary", "runs")
    ]
    # The page's tables and sensitivity plot render from the result and its records alone.
    monkeypatch.setattr(render_capable, "RESULT", str(tmp_path / "table.json"))
    comparisons = render_capable.capable_comparisons_table().splitlines()
    assert comparisons[2].startswith("| exemplar memory − GRPO | primary |")
    sensitivity = render_capable.capable_sensitivity_table().splitlines()[2:]
    assert [row.split(" | ")[:2] for row in sensitivity] == [
        ["| GRPO", "0"],
        ["| exemplar memory", "0"],
    ]
    assert len(render_capable.capable_probes_table().splitlines()) == 2  # no method is probed
    runs = render_capable.capable_runs_table().splitlines()[2:]
    # the tiny plan's commit is made up, so no run's library is the registered one
    assert [row.split(" | ")[2] for row in runs] == ["no", "no"]
    render_capable.plot_sensitivity(tmp_path / "sensitivity.png")
    assert (tmp_path / "sensitivity.png").stat().st_size > 0


def test_the_committed_capable_table_recomputes_from_its_records_alone(capsys):
    """Every row and the primary cell of benchmarks/results/capable_table.json, recomputed by
    the committed script from the committed records only (nothing under runs/)."""
    plan = yaml.safe_load(CAPABLE.read_text())
    if not (REPO_ROOT / f"{plan['output']}.json").is_file():
        pytest.skip("the capable table's runs have not all finished: no result to recompute")
    assert recompute.main(["--plan", str(CAPABLE)]) == 0
    assert "recompute from the records" in capsys.readouterr().out
