"""The memory family's bounding arms (issue 44.3): ``coin``, ``coin_exemplar`` and
``outcome_aware`` (:mod:`comprl_gym.envs.memory.memories`), streamed through the family's
``stream_memories`` hook, and the scripted :class:`~comprl_gym.envs.memory.replay.ReplayAgent`.

The truth is independent of the code under test: the dungeons' hidden sides
(:func:`~comprl_gym.envs.memory.dungeon`), the family's lesson judge, SHA-256 recomputed here,
and the episodes the stream recorded (their moves and outcomes).
"""

from __future__ import annotations

import hashlib
import json
from types import SimpleNamespace

import pytest

from comprl_gym.cli import main
from comprl_gym.envs.memory import (
    SPEC,
    dungeon,
    inverted_lesson,
    judge_lesson,
    lesson_text,
    oracle_lesson,
    other_side,
    pool,
)
from comprl_gym.envs.memory.memories import coin_side, side_shown, stream_memory
from comprl_gym.evaluation.stream import FamilyMemory, stream_result
from comprl_gym.experience import ExperienceManager
from comprl_gym.rollouts import Trajectory

TASKS, SEED = 6, 0
TEST = list(pool("test"))
#: A stream of the first TASKS held-out dungeons, twice, as the recipe's env (open moves, so
#: the random agent walks east or west every step and wins now and then).
STREAM = ["stream", "--env", "comprl/Memory-Fork-v0", "--split", "test", "--tasks", str(TASKS)]
STREAM += ["--visits", "2", "--seed", str(SEED), "--env-arg", "moves=open"]
STREAM += ["--env-arg", "branch_length=2", "--parallel", "1", "--no-progress"]
REPLAY = "comprl_gym.envs.memory.replay:ReplayAgent"
MIRROR = {"east": "west", "west": "east"}


def sha_coin(seed, index):
    """The coin, recomputed: SHA-256 of "coin:<seed>:<dungeon index>", first byte even: east."""
    return ("east", "west")[hashlib.sha256(f"coin:{seed}:{index}".encode()).digest()[0] % 2]


def episode(index, actions, won, last_terminated=True, variant="fork"):
    """A finished episode of dungeon ``index`` that played ``actions``."""
    d = dungeon(index)
    turns = [SimpleNamespace(action=a, terminated=False) for a in actions]
    if turns:
        turns[-1].terminated = last_terminated
    return Trajectory(
        f"ep-{index}-{'-'.join(actions)}",
        "comprl/Memory-Fork-v0",
        "memory",
        d.task_id(variant),
        f"You are in {d.name}, a dark hall.",
        0,
        turns=turns,
        won=won,
    )


class FakeStore:
    """What a memory's ``learn`` needs of a store: ``add`` (kept here)."""

    def __init__(self):
        self.added = []

    def add(self, items, provenance):
        self.added += [(item, provenance) for item in items]
        return list(range(len(self.added) - len(items), len(self.added)))


# ---------------------------------------------------------------- the memories, by hand
def test_the_coin_is_a_sha256_of_seed_and_dungeon_fixed_per_dungeon():
    # Worked out by hand from SHA-256 ("coin:0:192" starts with byte 112: even, east).
    assert hashlib.sha256(b"coin:0:192").digest()[0] == 112
    first8 = ["east", "west", "east", "west", "east", "east", "west", "west"]
    assert [coin_side(0, i) for i in TEST[:8]] == first8
    assert [coin_side(s, i) for s in (0, 3) for i in TEST] == [
        sha_coin(s, i) for s in (0, 3) for i in TEST
    ]
    # A fair coin over the held-out pool, blind to the real sides: about half agree.
    assert sum(coin_side(0, i) == "east" for i in TEST) == 32
    assert sum(coin_side(0, i) == dungeon(i).side for i in TEST) == 26
    assert [coin_side(0, i) for i in TEST] != [coin_side(3, i) for i in TEST]
    # Per dungeon, not per task id or episode: both variants and every outcome draw alike.
    d = dungeon(TEST[1])
    assert coin_side(0, d.task_id("fork")) == coin_side(0, d.task_id("landmark")) == "west"
    coin = stream_memory("coin", SEED)
    won = coin.lesson(episode(d.index, [d.side] * 2, True))
    lost = coin.lesson(episode(d.index, [other_side(d.side)], False))
    assert won == lost
    assert won["content"] == lesson_text("oracle", d.index, side="west")
    assert won["content"] in (oracle_lesson(d.index), inverted_lesson(d.index))


def test_outcome_aware_stores_the_side_each_episode_shows_and_is_always_right():
    d = dungeon(TEST[0])
    right, wrong = d.side, other_side(d.side)
    memory = FamilyMemory(stream_memory("outcome_aware", SEED))
    store = FakeStore()
    played = [
        ([right, right], True, True),  # won
        ([wrong], False, True),  # stepped into the dead end at once
        ([right, wrong, wrong], False, True),  # turned back, then into the dead end
        (["north", right, wrong, right], False, False),  # the step limit, never in the dead end
    ]
    for actions, won, terminated in played:
        assert side_shown(episode(d.index, actions, won, terminated)) == right
        memory.learn(episode(d.index, actions, won, terminated), store)
    assert [judge_lesson(item["content"]) for item, _ in store.added] == [
        judge_lesson(oracle_lesson(d.index))
    ] * 4
    # No east or west move: nothing shown, nothing stored, a decline.
    assert memory.learn(episode(d.index, ["north", "south"], False, False), store) == []
    assert memory.state_dict() == {"episodes": 5, "declined": 1}
    item, provenance = store.added[0]
    assert item["title"] == f"memory: You are in {d.name}, a dark hall."
    assert provenance.policy_version == "outcome_aware"
    assert provenance.task_ids == (d.task_id("fork"),)


def test_coin_exemplar_stores_a_won_episodes_record_on_the_coins_side():
    for index in TEST[:4]:
        d, coin = dungeon(index), coin_side(SEED, index)
        memory = stream_memory("coin_exemplar", SEED)
        assert memory.lesson(episode(index, [d.side, d.side], False)) is None
        straight = memory.lesson(episode(index, [d.side, d.side], True))
        assert straight["title"] == "memory: won"
        assert straight["content"] == (
            f"Task: You are in {d.name}, a dark hall.\n"
            f"Actions that won it, in order: {coin}, {coin}."
        )
        # A detour is kept as it was walked, mirrored when the coin says the other side.
        walked = ["north-east", d.side, other_side(d.side), d.side, d.side]
        record = memory.lesson(episode(index, walked, True))["content"]
        flip = {"east": "west", "west": "east", "north-east": "north-west"}
        expected = walked if coin == d.side else [flip[a] for a in walked]
        assert record.endswith(f"in order: {', '.join(expected)}.")


def test_the_family_spec_names_its_scripted_memories():
    assert tuple(SPEC.lessons.memories) == ("coin", "coin_exemplar", "outcome_aware")
    assert SPEC.stream_memory("coin", 3).seed == 3
    with pytest.raises(Exception, match="has no scripted memory 'cases'"):
        SPEC.stream_memory("cases", 0)


# ---------------------------------------------------------------- streamed
def _records(out):
    return [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]


def _stores(out, arms):
    stores = {}
    for arm in arms:
        manager = ExperienceManager(str(out / "stores" / arm))
        try:
            stores[arm] = manager.experiences()
        finally:
            manager.close()
    return stores


def _actions(record):
    return [turn["action"] for turn in record["turns"]]


@pytest.fixture(scope="module")
def bounds(tmp_path_factory):
    out = tmp_path_factory.mktemp("bounds") / "random"
    arms = "none,coin,coin_exemplar,outcome_aware"
    assert main([*STREAM, "--arms", arms, "--agent", "random", "--out", str(out)]) == 0
    records = _records(out)
    by_id = {r["episode_id"]: r for r in records}
    return records, by_id, _stores(out, arms.split(",")[1:])


def test_the_stream_runs_the_bounding_arms_on_common_random_numbers(bounds):
    records, _, _ = bounds
    assert {r["arm"] for r in records} == {"none", "coin", "coin_exemplar", "outcome_aware"}
    # Visit 1 shows no arm anything: every arm plays the reference's moves.
    first = {(r["arm"], r["task_index"]): _actions(r) for r in records if r["visit"] == 1}
    for arm in ("coin", "coin_exemplar", "outcome_aware"):
        assert [first[(arm, t)] for t in range(TASKS)] == [first[("none", t)] for t in range(TASKS)]


def test_a_finished_stream_reads_back_as_a_benchmark_commits_it(tmp_path):
    # what the benchmarks commit of a stream: the summary's keys and the provenance, with
    # a key the stream did not write read as empty
    out = tmp_path / "one-arm"
    assert main([*STREAM, "--arms", "none,coin", "--versus", "coin:none", "--agent", "random",
                 "--out", str(out)]) == 0  # fmt: skip
    result = stream_result(out, ("streaming", "versus", "shown_verdicts", "no_such_key"))
    assert set(result["streaming"]) == {"none", "coin"}
    assert result["versus"]["coin minus none"]["all"]["pairs"] == 2 * TASKS
    assert result["no_such_key"] == {}
    assert result["provenance"]["agent"]["spec"] == "random"


def test_the_outcome_aware_arm_stores_only_right_lessons(bounds):
    records, by_id, stores = bounds
    played = [r for r in records if r["arm"] == "outcome_aware" and r["visit"] == 1]
    with_side = [r for r in played if {"east", "west"} & set(_actions(r))]
    lessons = stores["outcome_aware"]
    assert len(lessons) == len(with_side) == TASKS  # open moves: every episode walked a side
    outcomes = {by_id[e.source_trajectory_ids[0]]["won"] for e in lessons}
    assert outcomes == {True, False}  # lessons after wins and after losses
    for lesson in lessons:
        source = by_id[lesson.source_trajectory_ids[0]]
        assert judge_lesson(lesson.content).task_id == dungeon(source["task_id"]).index
        assert judge_lesson(lesson.content).verdict == "right"
        assert lesson.policy_version == "outcome_aware"


def test_the_coin_arm_stores_the_oracles_words_with_the_coins_side(bounds):
    _, by_id, stores = bounds
    lessons = stores["coin"]
    assert len(lessons) == TASKS
    verdicts = []
    for lesson in lessons:
        d = dungeon(by_id[lesson.source_trajectory_ids[0]]["task_id"])
        assert lesson.content == (
            f"In {d.name} the staircase down is at the end of the {sha_coin(SEED, d.index)} branch."
        )
        assert lesson.content in (oracle_lesson(d.index), inverted_lesson(d.index))
        verdicts.append(judge_lesson(lesson.content).verdict)
    # The first six held-out dungeons: the coin agrees with two of their sides (worked out
    # from the hand-checked coins above and the hidden sides).
    assert sorted(verdicts) == ["right"] * 2 + ["wrong"] * 4


def test_the_coin_exemplar_arm_stores_only_after_wins(bounds):
    records, by_id, stores = bounds
    won = [r for r in records if r["arm"] == "coin_exemplar" and r["visit"] == 1 and r["won"]]
    lessons = stores["coin_exemplar"]
    assert len(lessons) == len(won) > 0
    for lesson in lessons:
        source = by_id[lesson.source_trajectory_ids[0]]
        assert source["won"] and source["arm"] == "coin_exemplar"
        d, coin = dungeon(source["task_id"]), sha_coin(SEED, dungeon(source["task_id"]).index)
        moves = _actions(source) if coin == d.side else [MIRROR[a] for a in _actions(source)]
        assert lesson.content == (
            f"Task: {source['task']}\nActions that won it, in order: {', '.join(moves)}."
        )


@pytest.fixture(scope="module")
def replayed(tmp_path_factory):
    out = tmp_path_factory.mktemp("bounds") / "replay"
    assert main([*STREAM, "--arms", "none,exemplar", "--agent", REPLAY, "--out", str(out)]) == 0
    return {(r["arm"], r["visit"], r["task_index"]): r for r in _records(out)}


def test_the_replay_agent_without_lessons_plays_a_coin_drawn_anew_each_visit(replayed):
    sides = {}
    for visit in (1, 2):
        for task in range(TASKS):
            r = replayed[("none", visit, task)]
            side = _actions(r)[0]
            assert side in ("east", "west") and set(_actions(r)) == {side}
            assert r["won"] == (side == dungeon(r["task_id"]).side)
            sides[(visit, task)] = side
    outcomes = [replayed[("none", v, t)]["won"] for v in (1, 2) for t in range(TASKS)]
    assert 0 < sum(outcomes) < len(outcomes)
    assert any(sides[(1, t)] != sides[(2, t)] for t in range(TASKS))


def test_the_replay_agent_wins_again_every_dungeon_the_exemplar_memory_saw_it_win(replayed):
    won_first = [t for t in range(TASKS) if replayed[("exemplar", 1, t)]["won"]]
    assert 0 < len(won_first) < TASKS
    for task in range(TASKS):
        first, second = replayed[("exemplar", 1, task)], replayed[("exemplar", 2, task)]
        # Visit 1: an empty store, the reference's coin.
        assert _actions(first) == _actions(replayed[("none", 1, task)])
        if task in won_first:
            assert second["won"] and _actions(second) == _actions(first)  # replayed
        else:
            # No record of its own (another dungeon's is ignored): the reference's coin.
            assert _actions(second) == _actions(replayed[("none", 2, task)])


def test_an_unknown_arm_is_refused_naming_the_scripted_ones(tmp_path, capsys):
    out = tmp_path / "refused"
    assert main([*STREAM, "--arms", "bogus", "--agent", "random", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "unknown arm(s) ['bogus']" in err and "coin, coin_exemplar, outcome_aware" in err
    assert not (out / "episodes.jsonl").exists()


def test_make_agent_gives_a_scripted_agent_the_callers_seed():
    """``make_agent`` builds a ``module:Class`` whose constructor takes ``seed`` with the
    caller's seed (the stream's: each episode's sampling seed), and with none when none is
    given: the ReplayAgent's blind side is then ``random.Random("replay:<seed>:<dungeon>")``'s
    draw, recomputed here, for seeds 0 to 9 (both sides occur)."""
    import random

    import gymnasium as gym

    from comprl_gym.agents import make_agent
    from comprl_gym.envs.memory import SIDES

    spec = "comprl_gym.envs.memory.replay:ReplayAgent"
    env = gym.make("comprl/Memory-Fork-v0", split="test")
    _, info = env.reset(seed=0)
    index = dungeon(info["task_id"]).index
    sides = []
    for seed in (None, *range(10)):
        agent = make_agent(spec, env, seed=seed)
        agent.reset(info["task"], info)
        expected = random.Random(f"replay:{0 if seed is None else seed}:{index}").choice(SIDES)
        assert (agent.source, agent.side) == ("coin", expected)
        sides.append(agent.side)
    env.close()
    assert set(sides) == set(SIDES)
