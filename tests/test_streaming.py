"""The streaming evaluation measures what a lesson does, on common random numbers.

The agent here is scripted so the truth is known without a model: it walks down the branch
its lesson names (an oracle, an inverted or an exemplar lesson) and flips a coin seeded by its
episode's sampling seed when no lesson names a side. So the oracle arm must win every
episode, the inverted arm none, the arms without information must match the no-lesson arm
episode for episode (same coin), and the exemplar memory must win every revisit of a dungeon
it won before.

The summaries' independent truth is on disk: the committed benchmark results were summarised
when they were written, and recomputing them from their episodes must give the same numbers.
"""

from __future__ import annotations

import json
import os
import random
import re
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from comprl_gym.env_factory import EnvSpec  # noqa: E402
from comprl_gym.envs.memory import inverted_lesson, oracle_lesson, placebo_lesson, pool  # noqa: E402
from comprl_gym.evaluation.eval import summarize  # noqa: E402
from comprl_gym.evaluation.stats import paired_comparison  # noqa: E402
from comprl_gym.evaluation.stream import (  # noqa: E402
    Arm,
    compare_runs,
    run_streaming,
    streaming_summary,
)
from comprl_gym.experience import ExperienceConfig, ExperienceManager  # noqa: E402
from comprl_gym.lessons.exemplar import exemplar_lesson  # noqa: E402

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
TASKS = list(range(8))
HELD_OUT = list(pool("test"))[: len(TASKS)]  # reset seed t plays held-out dungeon t
SPEC = EnvSpec.of("comprl/Memory-Fork-v0", {"split": "test"})


class LessonReader:
    """Goes the side a lesson about its own dungeon names; a seeded coin without one."""

    def __init__(self, seed: int):
        self.coin = random.Random(seed)
        self.side = ""

    def reset(self, task, info):
        dungeon = task.split(",", 1)[0].removeprefix("You are in ")
        about_mine = [e["text"] for e in info.get("experiences") or [] if dungeon in e["text"]]
        named = re.findall(r"\b(east|west)\b", " ".join(about_mine[:1]))
        self.side = named[0] if named else self.coin.choice(["east", "west"])

    def act(self, observation, info):
        return self.side


def _store(tmp_path, name, lessons=()):
    manager = ExperienceManager(str(tmp_path / name), config=ExperienceConfig(diversify=False))
    if lessons:
        manager.add(list(lessons), env_family="memory")
    return manager


#: The episodes the exemplar arm's ``learn`` saw, in order (the fixture clears it).
LEARNT: list[str] = []


@pytest.fixture
def records(tmp_path):
    LEARNT.clear()
    fixed = {
        name: _store(tmp_path, name, [make(i) for i in HELD_OUT])
        for name, make in (
            ("oracle", oracle_lesson),
            ("inverted", inverted_lesson),
            ("placebo", placebo_lesson),
        )
    }
    memory = _store(tmp_path, "exemplar")

    def remember(episode):
        LEARNT.append(episode.task)
        lesson = exemplar_lesson(episode.task, [t.action for t in episode.turns], episode.won)
        if lesson:
            memory.add([lesson], env_family="memory")

    arms = [
        Arm("none"),
        Arm("exemplar", memory, remember),
        *(Arm(name, manager) for name, manager in fixed.items()),
    ]
    try:
        yield run_streaming(
            SPEC, TASKS, 2, arms, lambda env, seed: LessonReader(seed), progress=False
        )
    finally:
        for manager in [memory, *fixed.values()]:
            manager.close()


def _by(records, arm):
    return {(r["task_index"], r["visit"]): r for r in records if r["arm"] == arm}


@pytest.mark.slow
def test_every_arm_plays_each_episode_on_the_same_seeds(records):
    arms = {r["arm"] for r in records}
    none = _by(records, "none")
    assert len(none) == len(TASKS) * 2
    for arm in arms:
        mine = _by(records, arm)
        assert set(mine) == set(none)
        for key, record in mine.items():
            assert (record["reset_seed"], record["sampling_seed"]) == (
                none[key]["reset_seed"],
                none[key]["sampling_seed"],
            )
    # A new sampling draw per visit, the same task.
    assert none[(0, 1)]["sampling_seed"] != none[(0, 2)]["sampling_seed"]
    assert none[(0, 1)]["task_id"] == none[(0, 2)]["task_id"]


@pytest.mark.slow
def test_a_learning_arm_learns_between_visits_only(records):
    # Two visits: the store learns from visit 1's episodes, in task order, and not after
    # visit 2 (nothing would read it).
    exemplar = _by(records, "exemplar")
    visit_1 = [exemplar[(task, 1)]["task"] for task in TASKS]
    assert visit_1 == LEARNT and len(LEARNT) == len(TASKS)


@pytest.mark.slow
def test_each_record_holds_the_lessons_its_episode_was_shown(records):
    for key, record in _by(records, "oracle").items():
        assert [e["content"] for e in record["experiences"]] == [
            oracle_lesson(record["task_id"])
        ], key
    assert all(r["experiences"] == [] for r in records if r["arm"] == "none")


@pytest.mark.slow
def test_lessons_change_outcomes_as_their_information_says(records):
    summary = streaming_summary(records)
    assert summary["oracle"]["visits"]["all"]["success"]["mean"] == 1.0
    assert summary["inverted"]["visits"]["all"]["success"]["mean"] == 0.0
    none, placebo = _by(records, "none"), _by(records, "placebo")
    # The placebo names no side: the same coin as no lesson, episode for episode.
    assert {k: r["won"] for k, r in placebo.items()} == {k: r["won"] for k, r in none.items()}
    exemplar = _by(records, "exemplar")
    for task in TASKS:
        # Visit 1: nothing about this dungeon is remembered yet: the no-lesson arm's coin.
        assert exemplar[(task, 1)]["won"] == none[(task, 1)]["won"]
        if exemplar[(task, 1)]["won"]:  # a remembered win is repeated
            assert exemplar[(task, 2)]["won"]
    # Within an arm, visit 2 against visit 1 task by task: the exemplar memory only gains
    # (a won dungeon stays won), a fixed oracle neither gains nor loses.
    gained = sum(exemplar[(t, 2)]["won"] and not exemplar[(t, 1)]["won"] for t in TASKS)
    learnt = summary["exemplar"]["minus_visit_1"]["2"]
    assert learnt["pairs"] == len(TASKS)
    assert learnt["difference"]["mean"] == pytest.approx(gained / len(TASKS))
    assert summary["oracle"]["minus_visit_1"]["2"]["mcnemar_p"] == 1.0
    oracle_minus_none = summary["oracle"]["minus_none"]["all"]
    assert oracle_minus_none["pairs"] == len(TASKS) * 2
    wins = sum(r["won"] for r in none.values())
    assert oracle_minus_none["difference"]["mean"] == pytest.approx(1 - wins / len(none))


@pytest.mark.slow
def test_an_episodes_replies_come_from_its_own_seed_whatever_shares_its_batch():
    """Batched LLM play with per-episode sampling seeds: an episode replays exactly alone or
    beside others (the common random numbers the arms are compared on)."""
    import gymnasium as gym

    from comprl_gym.agents.llm_agent import agent_from_spec
    from comprl_gym.rollouts import RolloutConfig, RolloutWorker

    def play(reset_seeds, sampling_seeds):
        envs = [gym.make("comprl/Memory-Fork-v0", split="test") for _ in reset_seeds]
        agent = agent_from_spec("hf:tiny?temperature=1&max_tokens=6", envs[0], seed=0)
        worker = RolloutWorker(envs, agent=agent, config=RolloutConfig(max_turns=None))
        done = worker.run(reset_seeds, sampling_seeds=sampling_seeds)
        for env in envs:
            env.close()
        return [[t.completion_token_ids for t in e.turns] for e in done]

    together = play([0, 1, 2, 3], [101, 102, 103, 104])
    alone = play([2], [103])
    assert together[2] == alone[0]
    assert len({str(tokens) for tokens in together}) > 1  # different seeds, different draws


def _result(name):
    return json.loads((RESULTS / name).read_text())


def test_the_committed_streaming_summary_is_recomputed_from_its_episodes():
    """256 held-out dungeons, 3 visits, 5 arms: every rate, interval, paired difference,
    McNemar p and resolvable difference, against none and against the placebo."""
    result = _result("experience_transfer_streaming_reader_coin_large.json")
    episodes = result["episodes"]
    assert json.loads(json.dumps(streaming_summary(episodes))) == result["summary"]
    placebo = streaming_summary(episodes, reference="placebo")
    minus_placebo = {
        a: row["minus_placebo"] for a, row in placebo.items() if "minus_placebo" in row
    }
    assert json.loads(json.dumps(minus_placebo)) == result["minus_placebo"]


def test_the_committed_comparison_of_two_runs_is_recomputed_from_their_episodes():
    this = _result("extractor_memory_stem_complementary.json")
    that = _result("extractor_memory_stem_static.json")
    assert this["paired_with"]["file"] == "extractor_memory_stem_static.json"
    recomputed = compare_runs(this["episodes"], that["episodes"], "own")
    assert json.loads(json.dumps(recomputed)) == this["paired_with"]["this_minus_that"]
    with pytest.raises(ValueError, match="do not share their seeds"):
        shifted = [dict(e, sampling_seed=e["sampling_seed"] + 1) for e in that["episodes"]]
        compare_runs(this["episodes"], shifted, "own")


def test_eval_pairs_with_and_without_experience_by_the_same_function():
    """A paired eval of two env ids: 3 tasks x 2 seeds each, worked by hand."""
    won = {  # (env, task, seed): (with, without)
        ("a", 0, 0): (1, 0), ("a", 1, 0): (1, 1), ("a", 2, 0): (1, 0),
        ("a", 0, 1): (0, 0), ("a", 1, 1): (1, 0), ("a", 2, 1): (0, 1),
        ("b", 0, 0): (0, 0), ("b", 1, 0): (1, 1), ("b", 2, 0): (0, 0),
    }  # fmt: skip
    records = [
        {"key": f"{env}|task={task}|seed={seed}|exp={condition}", "env_id": env, "won": outcome,
         "task_index": task, "agent_seed": seed, "condition": condition}
        for (env, task, seed), pair in won.items()
        for condition, outcome in zip(("with", "without"), pair)
    ]  # fmt: skip
    paired = summarize(records, paired=True)["paired"]
    a, overall = paired["per_env"]["a"], paired["overall"]
    # env a: 4 of 6 with, 2 of 6 without; 3 pairs favour with, 1 without: McNemar p = 2 * 5/16.
    assert (a["pairs"], a["success_with"], a["success_without"]) == (6, 4 / 6, 2 / 6)
    assert a["difference"]["mean"] == pytest.approx(2 / 6)
    assert a["mcnemar_p"] == pytest.approx(0.625)
    # Overall pairs episodes of both env ids; its numbers are the one paired function's.
    first = {k: v[0] for k, v in won.items()}
    second = {k: v[1] for k, v in won.items()}
    expected = paired_comparison(first, second)
    assert overall["pairs"] == 9 and overall["difference"] == expected["difference"]
    assert overall["mcnemar_p"] == expected["mcnemar_p"] == pytest.approx(0.625)
