"""The rule benchmark's first-move measure (``benchmarks/landmark_rule/run.py``), worked by
hand on records whose dungeons' sides the family fixes: a first step on the stairs' side is the
landmark's side (the landmark always marks it, tests/test_memory_family.py), a step into the
other branch the other side, and any other move (the alcove, a wall) neither."""

from __future__ import annotations

import pytest

from benchmarks.landmark_rule import run as bench
from comprl_gym.envs.memory import dungeon

#: Two held-out dungeons of the test_large pool with opposite sides.
EAST = next(dungeon(i) for i in range(256, 512) if dungeon(i).side == "east")
WEST = next(dungeon(i) for i in range(256, 512) if dungeon(i).side == "west")


def record(arm: str, task_index: int, d, move: str) -> dict:
    return {
        "arm": arm,
        "task_index": task_index,
        "task_id": d.task_id("landmark"),
        "turns": [{"action": move}] if move else [],
        "won": task_index == 0 and move == d.side,
    }


def test_a_first_move_is_classified_by_the_dungeons_side():
    assert bench.first_move(record("none", 0, EAST, "east")) == "landmark_side"
    assert bench.first_move(record("none", 0, WEST, "east")) == "other_side"
    assert bench.first_move(record("none", 0, WEST, "south-west")) == "other"
    assert bench.first_move(record("none", 0, WEST, "")) == "other"  # no move made


def test_first_moves_count_and_pair_each_arm_by_task():
    """4 tasks. none: landmark side at tasks 0, 1 (2 of 4); rule: at 0, 1, 2, 3 (4 of 4);
    placebo: at 0 only; inverted: at none of them. rule minus placebo: pairs (1,1), (1,0),
    (1,0), (1,0): +0.75, McNemar b = 3, c = 0, p = 2 * 0.5**3 = 0.25."""
    dungeons = [EAST, WEST, EAST, WEST]
    toward = {
        "none": [1, 1, 0, 0],
        "rule": [1, 1, 1, 1],
        "rule_placebo": [1, 0, 0, 0],
        "inverted_rule": [0, 0, 0, 0],
    }
    records = []
    for arm, flags in toward.items():
        for t, (d, flag) in enumerate(zip(dungeons, flags)):
            away = "west" if d.side == "east" else "east"
            move = d.side if flag else (away if arm != "inverted_rule" or t % 2 else "north")
            records.append(record(arm, t, d, move))
    moves = bench.first_moves(records)
    assert moves["counts"]["none"] == {"landmark_side": 2, "other_side": 2, "other": 0}
    assert moves["counts"]["inverted_rule"] == {"landmark_side": 0, "other_side": 2, "other": 2}
    # won: only task 0's episodes that stepped to its side (none, rule, placebo)
    assert moves["won_after_landmark_side"] == {
        "none": 1,
        "rule": 1,
        "rule_placebo": 1,
        "inverted_rule": 0,
    }
    assert moves["landmark_side"]["rule"]["mean"] == 1.0
    assert moves["landmark_side"]["rule_placebo"]["mean"] == 0.25
    versus = moves["versus"]["rule minus rule_placebo"]
    assert versus["difference"]["mean"] == 0.75
    assert versus["mcnemar_p"] == pytest.approx(0.25)
    assert moves["versus"]["rule minus none"]["difference"]["mean"] == 0.5
