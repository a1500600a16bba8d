"""``benchmarks/bench_experience_transfer.py``: the reading warm-up teaches the lesson formats the
arms show, a saved reader starts another run, and two runs' arms pair on common random numbers."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import gymnasium as gym
import pytest
from conftest import REPO_ROOT

import comprl_gym  # noqa: F401  (registers the ids)
from comprl_gym.agents.prompts import EXPERIENCE_HEADER
from comprl_gym.envs.memory import dungeon, other_side, pool
from comprl_gym.evaluation.streaming import compare_runs
from comprl_gym.experience.exemplar import exemplar_lesson
from comprl_gym.rollouts import run_episode

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
import bench_experience_transfer as bench  # noqa: E402

BENCH = REPO_ROOT / "benchmarks" / "bench_experience_transfer.py"


class Walker:
    """Walks one side every turn."""

    def __init__(self, side: str):
        self.side = side

    def reset(self, task, info):
        pass

    def act(self, observation, info):
        return self.side


@pytest.mark.parametrize("index", list(pool("train"))[:3])
def test_the_warmups_exemplar_is_what_the_exemplar_memory_stores_after_a_win(index):
    # Play the dungeon the winning way in the real env and store it as the exemplar arm does.
    env = gym.make(
        bench.ENV_ID, split="train", moves="open", observation_mode="compact", branch_length=2
    )
    try:
        position = list(env.unwrapped.pool).index(index)
        episode = run_episode(env, Walker(dungeon(index).side), position)
    finally:
        env.close()
    assert episode.won
    stored = exemplar_lesson(episode.task, [t.action for t in episode.turns], episode.won)
    assert bench.lesson_text("exemplar", index, branch_length=2) == stored


@pytest.mark.parametrize("index", list(pool("train"))[:3])
def test_the_warmups_lost_case_is_what_the_case_memory_stores_after_a_loss(index):
    env = gym.make(
        bench.ENV_ID, split="train", moves="open", observation_mode="compact", branch_length=2
    )
    wrong = other_side(dungeon(index).side)
    try:
        episode = run_episode(env, Walker(wrong), list(env.unwrapped.pool).index(index))
    finally:
        env.close()
    assert not episode.won and [t.action for t in episode.turns] == [wrong]  # lost at once
    stored = exemplar_lesson(episode.task, [wrong], episode.won, keep_losses=True)
    assert bench.lesson_text("lost_case", index, branch_length=2) == stored
    assert exemplar_lesson(episode.task, [wrong], episode.won) is None  # the win-only memory


@pytest.mark.parametrize("index", list(pool("train"))[:2])
def test_a_lesson_written_for_the_other_side_names_the_other_side(index):
    d = dungeon(index)
    other = other_side(d.side)
    # The oracle's sentence for the other side is the inverted lesson, word for word.
    assert bench.lesson_text("oracle", index, side=other) == bench.lesson_text("inverted", index)
    assert bench.lesson_text("inverted", index, side=other) == bench.lesson_text("oracle", index)
    assert bench.lesson_text("exemplar", index, side=other).endswith(f"in order: {other}, {other}.")
    # A lost case for the other side lost by walking the dungeon's own (winning) side.
    assert bench.lesson_text("lost_case", index, side=other).endswith(f"in order: {d.side}.")


def test_the_warmup_on_both_sides_makes_the_dungeon_name_useless():
    # With sides="both" every training dungeon is shown once per side, so the answer the
    # warm-up teaches (the side its lesson names) is independent of which dungeon it is.
    from transformers import AutoTokenizer

    from comprl_gym.llm.models import tiny_model_path

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_path()))
    true = bench.first_prompts("train", "lost_case", tokenizer, sides="true")
    both = bench.first_prompts("train", "lost_case", tokenizer, sides="both")
    assert len(true) == len(pool("train")) and len(both) == 2 * len(true)
    assert all(e["named"] == e["wins"] for e in true)
    for e, f in zip(both[::2], both[1::2], strict=True):  # one dungeon's two prompts
        assert e["wins"] == f["wins"] and {e["named"], f["named"]} == {"east", "west"}
        # The lesson in the prompt says the other side lost: the named side is the one to take.
        assert f"lost it, in order: {other_side(e['named'])}." in tokenizer.decode(e["ids"])
    with pytest.raises(ValueError, match="sides"):
        bench.first_prompts("train", "oracle", tokenizer, sides="random")
    # Without a lesson nothing says which side: the blind prompt is labelled once with each.
    blind = bench.first_prompts("train", "none", tokenizer, sides="true")
    assert [e["named"] for e in blind[:4]] == ["east", "west", "east", "west"]
    assert EXPERIENCE_HEADER not in tokenizer.decode(blind[0]["ids"])
    assert EXPERIENCE_HEADER in tokenizer.decode(both[0]["ids"])


def test_a_neighbours_lesson_is_labelled_a_coin():
    # The mismatched format shows each training dungeon another dungeon's lesson, one whose
    # name shares a word (what a memory retrieves for a dungeon it has no record of), and
    # labels it once with each side: it says nothing about this dungeon.
    from transformers import AutoTokenizer

    from comprl_gym.llm.models import tiny_model_path

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_path()))
    prompts = bench.first_prompts("train", "mismatched", tokenizer, sides="true")
    assert len(prompts) == 2 * len(pool("train"))
    for k, index in enumerate(list(pool("train"))[:6]):
        e, f = prompts[2 * k], prompts[2 * k + 1]
        assert (e["named"], f["named"]) == ("east", "west") and e["ids"] == f["ids"]
        other = dungeon(bench.neighbour(index))
        own = dungeon(index)
        assert other.index != own.index and other.split == "train"
        assert set(other.name.split()) - {"the", "of"} & set(own.name.split())
        text = tokenizer.decode(e["ids"])
        assert EXPERIENCE_HEADER in text and other.name in text
        # The own name is in the task; the lessons (after the header) name only the other.
        # (The user's turn says "Task: ..." twice: the task line and the observation's.)
        lessons = text.split(EXPERIENCE_HEADER, 1)[1].rsplit("Task:", 2)[0]
        assert other.name in lessons and own.name not in lessons


def test_sides_named_counts_what_each_lesson_says_about_its_own_dungeon():
    marrow = dungeon("the Vault of Marrow")  # west (the family's doctest)
    assert marrow.side == "west"
    texts = [
        "## Title: memory: You are in the Vault of Marrow\n## Content: go west.",  # right
        "## Title: memory: You are in the Vault of Marrow\n## Content: The East branch.",  # wrong
        "In the Vault of Marrow the west branch, not the east one.",  # both
        "## Title: east and west\n## Content: In the Vault of Marrow it is dark.",  # neither
        "Always take the east branch.",  # no dungeon
        bench.lesson_text("exemplar", marrow.index),  # won: right
        bench.lesson_text("lost_case", marrow.index),  # lost: names the other side
        bench.lesson_text("inverted", marrow.index),
    ]
    assert bench.sides_named(texts) == {
        "right": 2,
        "wrong": 3,
        "both": 1,
        "neither": 1,
        "no_dungeon": 1,
    }


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
    sides = {1: "right", 2: "wrong", 3: "neither", 4: "right", 5: "wrong"}
    result = bench.credit_agreement(log, sides)
    assert result["batch"] == {
        "samples": 4, "nonzero": 2, "agree": 2, "agree_fraction": 1.0,
        "batches": 2, "batches_with_signal": 1,
    }  # fmt: skip
    assert result["paired"] == {
        "samples": 4, "nonzero": 3, "agree": 2, "agree_fraction": 2 / 3,
        "batches": 2, "batches_with_signal": 2,
    }  # fmt: skip
    marrow = bench.lesson_text("oracle", dungeon("the Vault of Marrow").index)
    assert bench.side_of(marrow) == "right" and bench.side_of("go east") == "no_dungeon"


def test_compare_lessons_pairs_dungeons_whose_first_visit_ended_alike():
    """Worked by hand: dungeon 192 lost in both runs (this run's lesson right, that one's
    wrong), 193 won in both (both right), 194 won in one run and lost in the other (left
    out)."""

    def result(outcomes, kinds):
        return {
            "held_out_dungeons": [192, 193, 194],
            "episodes": [
                {"arm": "own", "visit": 1, "task_index": t, "won": w}
                for t, w in enumerate(outcomes)
            ],
            "store_texts": {
                "own": [
                    f"## Title: memory\n## Content: {bench.lesson_text(k, 192 + t)}"
                    for t, k in enumerate(kinds)
                ]
            },
        }

    this = result([0, 1, 0], ["oracle", "oracle", "oracle"])
    that = result([0, 1, 1], ["inverted", "oracle", "inverted"])
    out = bench.compare_lessons(this, that)
    assert {k: (v["dungeons"], v["right_this"], v["right_that"]) for k, v in out.items()} == {
        "all": (2, 2, 1),
        "won": (1, 1, 1),
        "lost": (1, 1, 0),
    }
    assert out["all"]["difference"]["mean"] == 0.5 and out["all"]["mcnemar_p"] == 1.0


def test_pooled_runs_pair_each_task_only_with_its_partner_run():
    """Worked by hand: pair 1 has task 0 won 1 against 0 and task 1 won 1 against 1; pair 2
    reuses task index 0 (another seed: won 0 against 1). Pooled: 3 pairs, 2 - 2 wins = 0;
    keyed by task alone, pair 2's task 0 would have overwritten pair 1's."""
    import pool_runs

    def run(seed, *won):
        return {
            "episodes": [
                {"arm": "own", "visit": 2, "task_index": t, "won": w, "reset_seed": seed,
                 "sampling_seed": seed}
                for t, w in enumerate(won)
            ]
        }  # fmt: skip

    out = pool_runs.pooled([(run(0, 1, 1), run(0, 0, 1)), (run(1, 0), run(1, 1))], "own")
    assert out["2"]["pairs"] == 3 and out["2"]["difference"]["mean"] == 0.0
    assert out["all"]["mcnemar_p"] == 1.0  # one discordant pair each way
    with pytest.raises(ValueError, match="do not share their seeds"):
        pool_runs.pooled([(run(0, 1), run(5, 1))], "own")


def test_lesson_text_refuses_an_unknown_kind():
    with pytest.raises(ValueError, match="unknown lesson kind"):
        bench.lesson_text("rumour", 0)
    with pytest.raises(ValueError, match="side must be one of"):
        bench.lesson_text("oracle", 0, side="north")


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
    done = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--tasks", "3", "--visits", "2", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.slow
def test_a_saved_reader_starts_a_library_trainer_paired_with_the_first_run(tmp_path):
    reader, first, second = tmp_path / "reader.pt", tmp_path / "first", tmp_path / "second"
    _bench(
        "--iterations", "1", "--reading-warmup", "2", "--save-reader", str(reader),
        "--arms", "none,own,oracle", "--out", str(first),
    )  # fmt: skip
    _bench(
        "--trainer", "complementary", "--train-tasks", "4", "--iterations", "1",
        "--load-reader", str(reader), "--arms", "none,own",
        "--paired-with", str(first.with_suffix(".json")), "--out", str(second),
    )  # fmt: skip
    a = json.loads(first.with_suffix(".json").read_text())
    b = json.loads(second.with_suffix(".json").read_text())
    assert a["reading_warmup"]["lessons"] == ["oracle", "exemplar", "none"]
    assert a["reading_warmup"]["sides"] == "both"
    assert len(a["reading_warmup"]["losses"]) == 2
    # Per format, each step's mean over the examples of that format it drew (8 in all).
    by_format = a["reading_warmup"]["losses_by_format"]
    assert set(by_format) == {"oracle", "exemplar", "none"}
    assert all(len(steps) == 2 for steps in by_format.values())
    assert any(loss is not None for loss in by_format["none"])
    assert b["reading_warmup"]["loaded_from"] == "reader.pt" and b["reading_warmup"]["losses"] == []
    assert b["config"]["algorithm"] == "complementary" and b["config"]["task_pool"] == 4
    assert {e["arm"] for e in b["episodes"]} == {"none", "own", "oracle"}  # + untrained oracle
    # The same (task, visit) episode has the same seeds in both runs: the pairing's premise.
    seeds = {
        run: {
            (e["task_index"], e["visit"]): (e["reset_seed"], e["sampling_seed"])
            for e in data["episodes"]
            if e["arm"] == "own"
        }
        for run, data in (("a", a), ("b", b))
    }
    assert seeds["a"] == seeds["b"] and len(seeds["a"]) == 6
    paired = b["paired_with"]["this_minus_that"]
    assert paired["all"]["pairs"] == 6 and set(paired) == {"1", "2", "all"}
    assert "training_run" in b["store_texts"]
    # The extractor's metrics of each training iteration (what issue 30's table reports).
    [row] = b["extractor_metrics"]
    assert row["iteration"] == 1 and "extractor/updates" in row
    assert set(b["credit_agreement"]) == {"batch", "paired"}
    assert isinstance(b["extractor_batches"], list)


def test_paper_table_pairs_each_method_deployed_arm_seed_by_seed():
    """Worked by hand. GRPO streams no store, so its deployed arm is 'none'; static's is 'own'.
    Seed 0: static's own wins tasks 0 and 1, GRPO's none task 0 only; seed 1: static's own wins
    task 0, GRPO's none wins tasks 0 and 1. Static minus GRPO pooled over 4 pairs: (3 - 3) / 4
    = 0, one discordant pair each way (McNemar p 1). Static's own minus its none over its three
    seeds: 4 of 6 against 0, +2/3. Static's seed 2, which GRPO never ran, pairs with nothing."""
    import paper_table

    def run(seed, algorithm, arms):
        episodes = [
            {"arm": arm, "visit": 1, "task_index": t, "won": w, "reset_seed": t,
             "sampling_seed": seed}
            for arm, won in arms.items() for t, w in enumerate(won)
        ]  # fmt: skip
        return {
            "config": {"seed": seed, "algorithm": algorithm,
                       "experience": {"extractor_format": "stem"}},
            "episodes": episodes,
        }  # fmt: skip

    static = [run(0, "static_experience", {"none": [0, 0], "own": [1, 1]}),
              run(1, "static_experience", {"none": [0, 0], "own": [1, 0]}),
              run(2, "static_experience", {"none": [0, 0], "own": [1, 0]})]  # fmt: skip
    grpo = [run(0, "grpo", {"none": [1, 0]}), run(1, "grpo", {"none": [1, 1]})]
    for r in static:  # each store: 1 right, 1 wrong, 1 naming both sides (counted, not right)
        r["store_sides"] = {s: {"right": 1, "wrong": 1, "both": 1} for s in ("own", "training_run")}
        r["credit_agreement"] = {
            "batch": {"batches": 9, "batches_with_signal": 7},
            "paired": {"batches": 9, "batches_with_signal": 9},
        }
    static[0]["config"]["experience"]["extractor_baseline"] = "paired"  # its rule's batches
    out = paper_table.table({"GRPO": grpo, "static": static}, ["GRPO"])
    grpo_row, static_row = out["rows"]
    assert grpo_row["deployed_arm"] == "none" and static_row["deployed_arm"] == "own"
    assert static_row["success"]["own"]["1"]["mean"] == 4 / 6
    assert static_row["per_seed"]["1"] == {"none": 0.0, "own": 0.5}
    assert static_row["deployed_minus_none"]["1"]["difference"]["mean"] == 4 / 6
    vs = static_row["versus"]["GRPO"]
    assert vs["seeds"] == [0, 1]
    assert vs["this_minus_that"]["1"]["pairs"] == 4
    assert vs["this_minus_that"]["1"]["difference"]["mean"] == 0.0
    assert vs["this_minus_that"]["1"]["mcnemar_p"] == 1.0
    assert vs["per_seed"]["0"]["1"]["difference"]["mean"] == 0.5  # 2 - 1 of 2
    assert vs["per_seed"]["1"]["1"]["difference"]["mean"] == -0.5  # 1 - 2 of 2
    assert "GRPO" not in grpo_row["versus"]  # not against itself
    assert grpo_row["extractor"] is None
    assert static_row["extractor"] == {
        "training_run": {"right": 3, "lessons": 9},
        "own": {"right": 3, "lessons": 9},
        "batches_with_signal": 9 + 7 + 7,
        "batches": 27,
    }
    assert "| static | 0,1,2 | 0.67 [" in paper_table.markdown(out)
    with pytest.raises(ValueError, match="each seed once"):  # a file given twice
        paper_table.table({"GRPO": [grpo[0], grpo[0]]}, [])
