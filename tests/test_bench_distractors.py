"""The distractor stress test's pieces (``benchmarks/distractors/run.py``): the scripted
reader walks the side the first lesson about its own dungeon tells (the other side for a lost
case), the polluted stores' twins differ in the usefulness term alone, and, streamed on a few
held-out dungeons, the arms do what the lessons and the score formula say they must."""

from __future__ import annotations

import doctest
from types import SimpleNamespace

import pytest

from benchmarks.distractors import run as bench
from comprl_gym.envs.memory import dungeon, inverted_lesson, oracle_lesson, other_side
from comprl_gym.envs.memory.dungeons import task_text
from comprl_gym.evaluation.stream import episode_seeds
from comprl_gym.experience.records import format_experience_text
from comprl_gym.lessons.memories import CasesMemory

#: The first two held-out dungeons (reset seeds 0 and 1 of the ``test`` pool).
VAULT, NEXT = dungeon(192), dungeon(193)


def _case(d, side: str, won: bool) -> str:
    """What the cases memory stores (as the store shows it) after an episode of ``d`` that
    walked ``side``."""
    episode = SimpleNamespace(
        task=task_text("fork", d),
        turns=[SimpleNamespace(action=side)] * (2 if won else 1),
        won=won,
        env_family="memory",
    )
    lesson = CasesMemory().lesson(episode)
    return format_experience_text(lesson["title"], lesson["description"], lesson["content"])


def test_the_module_examples_hold():
    assert doctest.testmod(bench).failed == 0


def test_the_reader_takes_the_side_its_own_dungeons_first_lesson_tells():
    wrong = other_side(VAULT.side)
    assert bench.read_lessons(192, [oracle_lesson(192)]) == (VAULT.side, 0)
    assert bench.read_lessons(192, [inverted_lesson(192)]) == (wrong, 0)
    # Another dungeon's lesson first: skipped; of two about its own, the first ranked counts.
    ranked = [oracle_lesson(193), inverted_lesson(192), oracle_lesson(192)]
    assert bench.read_lessons(192, ranked) == (wrong, 1)
    # A lost case names the side that lost: the reader walks the other one.
    assert bench.read_lessons(192, [_case(VAULT, wrong, won=False)]) == (VAULT.side, 0)
    assert bench.read_lessons(192, [_case(VAULT, VAULT.side, won=True)]) == (VAULT.side, 0)
    # Nothing about its dungeon (a neighbour's case), or no single side: no side to walk.
    assert bench.read_lessons(192, [_case(NEXT, "east", won=False)]) == (None, None)
    both = "In the Vault of Iron the stairs are east or west."
    assert bench.read_lessons(192, [both]) == (None, 0)


def test_the_reader_walks_its_coin_without_a_lesson_and_the_coin_is_the_same_in_every_arm():
    task = task_text("fork", VAULT)
    coins = set()
    for sampling_seed in range(20):
        bare, taught = bench.ScriptedReader(sampling_seed), bench.ScriptedReader(sampling_seed)
        bare.reset(task, {"experiences": []})
        taught.reset(task, {"experiences": [{"id": 1, "text": inverted_lesson(192)}]})
        assert bare.coin == taught.coin  # drawn whatever the lessons
        assert bare.act("", {}) == bare.coin
        assert [taught.act("", {})] * 2 == [other_side(VAULT.side)] * 2
        coins.add(bare.coin)
    assert coins == {"east", "west"}


def test_the_polluted_half_is_a_fixed_seeded_half():
    half = bench.inverted_half(range(64), 0)
    assert len(half) == 32 == len(set(half)) and set(half) <= set(range(64))
    assert half == bench.inverted_half(range(64), 0)
    assert half != bench.inverted_half(range(64), 1)


def test_twin_stores_differ_in_the_usefulness_term_alone():
    plain, useful = bench.store_config(0.0).to_dict(), bench.store_config(4.0).to_dict()
    assert {k for k in plain if plain[k] != useful[k]} == {"usefulness_weight"}
    # Diversified (usefulness lives there), with no other term than the similarity rank.
    assert plain["diversify"] is True
    assert plain["diversity_lambda"] == plain["diversity_recent_penalty"] == 0.0
    assert plain["diversity_dropout_p"] == 0.0


@pytest.mark.slow
def test_streamed_arms_do_what_the_lessons_and_the_score_say():
    run = bench.run_seed("test", tasks=4, visits=4, seed=0, top_k=1, usefulness_weight=4.0)
    rows = {(r["arm"], r["task_index"], r["visit"]): r for r in run["episodes"]}
    bad = set(run["inverted_tasks"])
    assert len(bad) == 2 and set(bench.ARMS) == {arm for arm, _, _ in rows}
    for (_, task, visit), row in rows.items():
        # Common random numbers: every arm plays an episode on the same seeds.
        assert (row["reset_seed"], row["sampling_seed"]) == episode_seeds(task, visit, 0)
        assert (row["half"] == "polluted") == (task in bad)
    polluted = [t for t in range(4) if t in bad]
    for task in range(4):
        for visit in range(1, 5):
            # The oracle lesson (then its own won cases) is read: every episode won.
            assert rows["clean", task, visit]["won"]
            # Outcomes only, no usefulness: nothing can move the inverted lesson.
            assert rows["polluted_outcomes", task, visit]["won"] == (task not in bad)
    for task in polluted:
        assert not rows["polluted", task, 1]["won"]
        # The lost case of visit 1 is about the dungeon and outranks the inverted lesson.
        assert all(rows["polluted", task, visit]["won"] for visit in (2, 3, 4))
        # After 3 losses the inverted lesson scores -3.2; a clean-half oracle lesson that won
        # 3 of 3 scores at least -2.8 from similarity rank 2: the reader sees no lesson about
        # its dungeon and walks its coin.
        assert rows["polluted_outcomes_useful", task, 4]["followed"] is None
        assert rows["polluted_outcomes", task, 4]["followed"] == 0
    summary = run["halves"]["polluted"]
    assert summary["streaming"]["clean"]["visits"]["all"]["success"]["mean"] == 1.0
    pair = summary["usefulness"]["polluted_outcomes_useful minus polluted_outcomes"]
    assert pair["all"]["pairs"] == len(polluted) * 4
