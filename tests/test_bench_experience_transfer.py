"""What ``benchmarks/experience_transfer/run.py`` was built from, now the library's: the reading
warm-up's lessons are what the memories store (:mod:`comprl_gym.envs.memory.lessons`), the
credit rules are signed against what a lesson says (:func:`comprl_gym.trainers.credit.
credit_agreement`), two runs pair on common random numbers; and the thin runner over
``comprl-gym train`` + ``stream`` writes the committed result files' keys, which
``comprl-gym table`` reads."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import gymnasium as gym
import pytest
from conftest import REPO_ROOT

import comprl_gym  # noqa: F401  (registers the ids)
from comprl_gym.core import ConfigurationError
from comprl_gym.envs.memory import (
    dungeon,
    inverted_rule_lesson,
    other_side,
    pool,
    rule_lesson,
)
from comprl_gym.envs.memory.lessons import lesson_text, neighbour, reading_examples
from comprl_gym.evaluation.stream import compare_runs
from comprl_gym.lessons.exemplar import exemplar_lesson
from comprl_gym.rollouts import run_episode
from comprl_gym.trainers.credit import credit_agreement

ENV_ID = "comprl/Memory-Fork-v0"


class Walker:
    """Walks one side every turn."""

    def __init__(self, side: str):
        self.side = side

    def reset(self, task, info):
        pass

    def act(self, observation, info):
        return self.side


def _fork():
    return gym.make(
        ENV_ID, split="train", moves="open", observation_mode="compact", branch_length=2
    )


@pytest.mark.parametrize("index", list(pool("train"))[:3])
def test_the_warmups_exemplar_is_what_the_exemplar_memory_stores_after_a_win(index):
    # Play the dungeon the winning way in the real env and store it as the exemplar arm does.
    env = _fork()
    try:
        position = list(env.unwrapped.pool).index(index)
        episode = run_episode(env, Walker(dungeon(index).side), position)
    finally:
        env.close()
    assert episode.won
    stored = exemplar_lesson(episode.task, [t.action for t in episode.turns], episode.won)
    assert lesson_text("exemplar", index, branch_length=2) == stored


@pytest.mark.parametrize("index", list(pool("train"))[:3])
def test_the_warmups_lost_case_is_what_the_case_memory_stores_after_a_loss(index):
    env = _fork()
    wrong = other_side(dungeon(index).side)
    try:
        episode = run_episode(env, Walker(wrong), list(env.unwrapped.pool).index(index))
    finally:
        env.close()
    assert not episode.won and [t.action for t in episode.turns] == [wrong]  # lost at once
    stored = exemplar_lesson(episode.task, [wrong], episode.won, keep_losses=True)
    assert lesson_text("lost_case", index, branch_length=2) == stored
    assert exemplar_lesson(episode.task, [wrong], episode.won) is None  # the win-only memory


@pytest.mark.parametrize("index", list(pool("train"))[:2])
def test_a_lesson_written_for_the_other_side_names_the_other_side(index):
    d = dungeon(index)
    other = other_side(d.side)
    # The oracle's sentence for the other side is the inverted lesson, word for word.
    assert lesson_text("oracle", index, side=other) == lesson_text("inverted", index)
    assert lesson_text("inverted", index, side=other) == lesson_text("oracle", index)
    assert lesson_text("exemplar", index, 2, side=other).endswith(f"in order: {other}, {other}.")
    # A lost case for the other side lost by walking the dungeon's own (winning) side.
    assert lesson_text("lost_case", index, side=other).endswith(f"in order: {d.side}.")


def test_the_warmup_on_both_sides_makes_the_dungeon_name_useless():
    # With sides="both" every training dungeon is shown once per side, so the answer the
    # warm-up teaches (the side its lesson names) is independent of which dungeon it is.
    kwargs = {"branch_length": 2}
    true = reading_examples("train", ["lost_case"], "true", kwargs)
    both = reading_examples("train", ["lost_case"], "both", kwargs)
    assert len(true) == len(pool("train")) and len(both) == 2 * len(true)
    for e, index in zip(true, pool("train"), strict=True):
        assert e.answer == dungeon(index).side  # its own side only
    for e, f in zip(both[::2], both[1::2], strict=True):  # one dungeon's two examples
        assert e.task_id == f.task_id and {e.answer, f.answer} == {"east", "west"}
        # The lesson says the other side lost: the answer is the side to take.
        assert e.lessons[0].endswith(f"lost it, in order: {other_side(e.answer)}.")
    with pytest.raises(ConfigurationError, match="sides"):
        reading_examples("train", ["oracle"], "random", kwargs)
    # Without a lesson nothing says which side: the blind prompt is labelled once with each.
    blind = reading_examples("train", ["none"], "true", kwargs)
    assert [e.answer for e in blind[:4]] == ["east", "west", "east", "west"]
    assert blind[0].lessons == ()


def test_the_rule_format_is_labelled_by_the_landmark_the_env_shows():
    """The ``rule`` reading format: every landmark training dungeon once with the rule and once
    with its inversion; the rule's label is the side of the landmark in the real env's first
    observation (read off the text, "- sink: 1 step west and 1 step south"), the inversion's
    the other side. A fork dungeon has no landmark and is refused."""
    kwargs = {"variant": "landmark", "branch_length": 2}
    examples = reading_examples("train", ["rule"], "both", kwargs)
    assert len(examples) == 2 * len(pool("train"))
    env = gym.make("comprl/Memory-Landmark-v0", split="train", branch_length=2)
    for e in examples[:48]:
        obs, info = env.reset(options=e.reset_options)
        assert info["task_id"] == e.task_id
        [where] = re.findall(r"^- [a-z ]+: 1 step (east|west) and 1 step \w+$", obs, re.M)
        [lesson] = e.lessons
        assert e.answer == (where if lesson == rule_lesson() else other_side(where))
        assert lesson in (rule_lesson(), inverted_rule_lesson())
    env.close()
    assert {e.lessons[0] for e in examples} == {rule_lesson(), inverted_rule_lesson()}
    with pytest.raises(ConfigurationError, match="'fork' variant has none"):
        reading_examples("train", ["rule"], "both", {"branch_length": 2})


def test_a_neighbours_lesson_is_labelled_a_coin():
    # The mismatched format shows each training dungeon another dungeon's lesson, one whose
    # name shares a word (what a memory retrieves for a dungeon it has no record of), and
    # labels it once with each side: it says nothing about this dungeon.
    examples = reading_examples("train", ["mismatched"], "true", {"branch_length": 2})
    assert len(examples) == 2 * len(pool("train"))
    for k, index in enumerate(list(pool("train"))[:6]):
        e, f = examples[2 * k], examples[2 * k + 1]
        assert (e.answer, f.answer) == ("east", "west") and e.lessons == f.lessons
        other, own = dungeon(neighbour(index)), dungeon(index)
        assert other.index != own.index and other.split == "train"
        assert set(other.name.split()) - {"the", "of"} & set(own.name.split())
        [lesson] = e.lessons
        assert other.name in lesson and own.name not in lesson


def test_credit_agreement_signs_each_rule_against_what_the_lesson_says():
    """Worked by hand. Batch 2: r = 1, -1, 0 (mean 0) under the batch rule, so the right
    lesson gets +1 and the wrong one -1; paired r 0.5 and -1 agree too; the third names no
    side. Batch 3: both r -0.5, so the batch rule has no signal; paired gives the right lesson
    0 and the wrong one +1, a disagreement."""
    log = [
        {"actor_step": 2, "kind": "extract", "ids": [1], "r_batch": 1.0, "r_paired": 0.5},
        {"actor_step": 2, "kind": "extract", "ids": [2], "r_batch": -1.0, "r_paired": -1.0},
        {"actor_step": 2, "kind": "extract", "ids": [3], "r_batch": 0.0, "r_paired": None},
        {"actor_step": 3, "kind": "extract", "ids": [4], "r_batch": -0.5, "r_paired": 0.0},
        {"actor_step": 3, "kind": "extract", "ids": [5], "r_batch": -0.5, "r_paired": 1.0},
    ]
    verdicts = {1: "right", 2: "wrong", 3: "neither", 4: "right", 5: "wrong"}
    result = credit_agreement(log, verdicts)
    assert result["batch"] == {
        "samples": 4, "nonzero": 2, "agree": 2, "agree_fraction": 1.0,
        "batches": 2, "batches_with_signal": 1,
    }  # fmt: skip
    assert result["paired"] == {
        "samples": 4, "nonzero": 3, "agree": 2, "agree_fraction": 2 / 3,
        "batches": 2, "batches_with_signal": 2,
    }  # fmt: skip


def test_lesson_text_refuses_an_unknown_kind():
    with pytest.raises(ConfigurationError, match="unknown lesson kind"):
        lesson_text("rumour", 0)
    with pytest.raises(ConfigurationError, match="side must be one of"):
        lesson_text("oracle", 0, side="north")


def test_two_runs_pair_only_on_the_same_seeds():
    run = [
        {"arm": "own", "visit": 1, "task_index": 0, "won": 1, "reset_seed": 0, "sampling_seed": 5}
    ]
    other = [dict(run[0], won=0, sampling_seed=6)]
    with pytest.raises(ValueError, match="do not share their seeds"):
        compare_runs(run, other, "own")
    assert compare_runs(run, [dict(run[0], won=0)], "own")["1"]["pairs"] == 1


def _bench(*args: str) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    small = ["--quick", "--tasks", "3", "--visits", "2", "--set", "torch_threads=1"]
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.experience_transfer.run", *small, *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.slow
def test_the_runner_writes_the_committed_keys_and_the_table_reads_them(tmp_path):
    """The reader recipe (2 warm-up steps) at tiny size, then static experience and
    Complementary RL from its reader, each through the runner: the files hold the committed
    files' keys, every (task, visit) has the same seeds in both, and ``comprl-gym table``
    pairs them."""
    from comprl_gym.cli import main

    keep = tmp_path / "reader-run"
    tiny = ["--set", "groups_per_iteration=1", "--set", "task_pool=8"]
    reader_args = ["--set", "warmup.steps=2", "--set", "actor.init_weights="]
    reader = keep / "run" / "warmup" / "reader.pt"
    config = str(REPO_ROOT / "configs" / "memory-reader.yaml")
    _bench("--config", config, *reader_args, *tiny, "--arms", "none,oracle",
           "--keep", str(keep), "--out", str(tmp_path / "reader"))  # fmt: skip
    assert reader.is_file()
    runs = {}
    for method in ("static", "complementary"):
        config = str(REPO_ROOT / "configs" / f"memory-{method}.yaml")
        _bench("--config", config, "--set", f"actor.init_weights={reader}", *tiny,
               "--set", "iterations=1", "--arms", "none,own,oracle",
               "--keep", str(tmp_path / f"{method}-run"),
               "--out", str(tmp_path / method))  # fmt: skip
        runs[method] = json.loads((tmp_path / f"{method}.json").read_text())
    committed = json.loads(
        (REPO_ROOT / "benchmarks/results/extractor_memory_stem_experience_only.json").read_text()
    )
    assert set(runs["complementary"]) == set(committed)
    a, b = runs["static"], runs["complementary"]
    assert a["reading_warmup"]["loaded_from"] == "reader.pt"
    assert b["config"]["algorithm"] == "complementary" and b["config"]["task_pool"] == 8
    assert {e["arm"] for e in b["episodes"]} == {"none", "own", "oracle"}
    seeds = [
        {(e["task_index"], e["visit"]): (e["reset_seed"], e["sampling_seed"])
         for e in run["episodes"] if e["arm"] == "own"}
        for run in (a, b)
    ]  # fmt: skip
    assert seeds[0] == seeds[1] and len(seeds[0]) == 6
    assert set(b["credit_agreement"]) == {"batch", "paired"}
    assert set(b["store_sides"]) == {"own", "training_run"}
    [row] = b["extractor_metrics"]
    assert row["iteration"] == 1 and "extractor/updates" in row
    out = tmp_path / "table"
    argv = ["table", "--method", "static", str(tmp_path / "static.json")]
    argv += ["--method", "complementary", str(tmp_path / "complementary.json")]
    # The same run read from its stream folder (and, through it, its training run's folder).
    argv += ["--method", "complementary, folder", str(tmp_path / "complementary-run" / "stream")]
    assert main([*argv, "--versus", "static", "--out", str(out)]) == 0
    rows = json.loads(out.with_suffix(".json").read_text())["rows"]
    assert rows[1]["versus"]["static"]["this_minus_that"]["all"]["pairs"] == 6
    from_file, from_folder = rows[1], rows[2]
    assert from_folder["trainer"] == "complementary" and from_folder["extractor_format"] == "stem"
    assert from_folder["success"] == from_file["success"]
    assert from_folder["versus"] == from_file["versus"]
    assert from_folder["extractor"]["own"] == from_file["extractor"]["own"]
    assert from_folder["extractor"]["batches"] == from_file["extractor"]["batches"]
