"""The second-reader benchmark's split of the visit-2 contrasts by the dungeon's own past
(``benchmarks/second_reader/run.py``), worked by hand: a lookup memory helps only the
dungeons won at visit 1, and the split must say so."""

from __future__ import annotations

import pytest

from benchmarks.second_reader import run as bench
from comprl_gym.envs.memory import dungeon


def records(visit_1: list[int], visit_2: dict[str, list[int]]) -> list[dict]:
    """Every arm plays visit 1 as ``none`` does (an empty store), then visit 2 as given."""
    out = []
    for arm in bench.ARMS:
        for task, won in enumerate(visit_1):
            out.append({"arm": arm, "visit": 1, "task_index": task, "won": won})
        for task, won in enumerate(visit_2.get(arm, visit_1)):
            out.append({"arm": arm, "visit": 2, "task_index": task, "won": won})
    return out


def test_a_lookup_helps_only_the_dungeons_already_won():
    # dungeons 0-3 won at visit 1, 4-7 lost; the exemplar memory wins every won one again
    # and nothing else; its placebo (the coin's side) wins two of the four won ones
    visit_1 = [1, 1, 1, 1, 0, 0, 0, 0]
    split = bench.by_own_past(
        records(
            visit_1,
            {
                "none": [1, 0, 1, 0, 0, 1, 0, 0],
                "exemplar": [1, 1, 1, 1, 0, 0, 0, 0],
                "coin_exemplar": [1, 0, 0, 1, 0, 0, 0, 0],
            },
        )
    )
    won, lost = split["won_at_visit_1"], split["lost_at_visit_1"]
    assert won["dungeons"] == lost["dungeons"] == 4
    # won ones: exemplar 4/4, placebo 2/4, none 2/4 -> +0.5 and +0.5, two discordant pairs
    assert won["exemplar minus coin_exemplar"]["difference"]["mean"] == 0.5
    assert won["exemplar minus coin_exemplar"]["mcnemar_p"] == pytest.approx(0.5)
    assert won["exemplar minus none"]["difference"]["mean"] == 0.5
    # lost ones: exemplar 0/4, placebo 0/4, none 1/4
    assert lost["exemplar minus coin_exemplar"]["difference"]["mean"] == 0.0
    assert lost["exemplar minus none"]["difference"]["mean"] == -0.25
    assert lost["coin_exemplar minus none"]["pairs"] == 4


def test_first_visits_that_differ_from_none_are_counted():
    rs = [
        {"arm": arm, "visit": 1, "task_index": t, "turns": [{"action": move}]}
        for arm, moves in (
            ("none", ["east", "west"]),
            ("oracle", ["west", "west"]),
            ("exemplar", ["east", "west"]),
            ("coin_exemplar", ["east", "east"]),
        )
        for t, move in enumerate(moves)
    ]
    assert bench.first_visit_identical(rs) == {"exemplar": 2, "coin_exemplar": 1}


def test_visit_2_moves_say_which_way_a_shown_record_sent_the_actor():
    # an east dungeon won at visit 1 (its own record is stored) and a west one lost at visit
    # 1, shown the east dungeon's record at visit 2: the actor walks east in both
    east = next(dungeon(i) for i in range(256, 512) if dungeon(i).side == "east")
    west = next(dungeon(i) for i in range(256, 512) if dungeon(i).side == "west")
    record = f"Task: You are in the {east.name}.\nActions that won it, in order: east, east."

    def episode(arm, visit, task, d, moves, won, shown=()):
        return {
            "arm": arm,
            "visit": visit,
            "task_index": task,
            "task_id": d.task_id("fork"),
            "turns": [{"action": m} for m in moves],
            "won": won,
            "experiences": [{"content": text} for text in shown],
        }

    records = []
    for arm in bench.ARMS:
        records += [episode(arm, 1, 0, east, ["east", "east"], True)]
        records += [episode(arm, 1, 1, west, ["east", "east"], False)]
    records += [
        episode("exemplar", 2, 0, east, ["east", "east"], True, [record]),
        episode("exemplar", 2, 1, west, ["east", "east"], False, [record]),
        episode("none", 2, 0, east, ["east", "west"], False),
        episode("none", 2, 1, west, ["west", "west"], True),
    ]
    moves = bench.visit_2_moves(records)
    assert moves["won_at_visit_1"]["exemplar"] == {
        "episodes": 1,
        "won": 1,
        "first_move_to_stairs": 1,
        "won_after_first_move_to_stairs": 1,
        "record_names_stairs": 1,
        "record_names_other": 0,
        "first_move_as_record": 1,
    }
    lost = moves["lost_at_visit_1"]
    assert (lost["exemplar"]["record_names_other"], lost["exemplar"]["first_move_to_stairs"]) == (
        1,
        0,
    )
    assert lost["exemplar"]["first_move_as_record"] == 1
    # none: a first step to the stairs' side that was not finished counts as such
    assert moves["won_at_visit_1"]["none"]["first_move_to_stairs"] == 1
    assert moves["won_at_visit_1"]["none"]["won_after_first_move_to_stairs"] == 0
    assert lost["none"]["won"] == lost["none"]["first_move_to_stairs"] == 1
