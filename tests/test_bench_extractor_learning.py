"""The extractor-learning benchmark's reading of a probe (``benchmarks/bench_extractor_learning.py``),
worked by hand on probe reports shaped as ``comprl-gym probe --out`` writes them: 8 dungeons
with the stairs east and 8 west, each walked both ways, so 16 won and 16 lost episodes."""

from __future__ import annotations

import importlib.util

import pytest
from conftest import REPO_ROOT

BENCH = REPO_ROOT / "benchmarks" / "bench_extractor_learning.py"
spec = importlib.util.spec_from_file_location("bench_extractor_learning", BENCH)
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)

STAIRS = ["east"] * 8 + ["west"] * 8


def report(name: str, names) -> dict:
    """A probe report whose writer names ``names(walked, won)`` for every episode."""
    verdicts = []
    for i, stairs in enumerate(STAIRS):
        for walked in ("east", "west"):
            won = walked == stairs
            side = names(walked, won)
            verdicts.append(
                {
                    "episode_id": f"d{i}-{walked}",
                    "won": won,
                    "walked": walked,
                    "verdict": "right" if side == stairs else "wrong",
                    "lessons": [
                        f"In the Hall {i} the staircase down is at the end of the {side} branch."
                    ],
                }
            )
    return {"name": name, "verdicts": verdicts}


def other(side: str) -> str:
    return "west" if side == "east" else "east"


RULE = report("rule", lambda walked, won: walked if won else other(walked))
COPY = report("frozen", lambda walked, won: walked)  # copies the walked side
WEST = report("constant", lambda walked, won: "west")


def test_the_side_a_lesson_names_is_read_from_its_last_words():
    assert (
        bench.lesson_side("In the Hall 3 the staircase down is at the end of the west branch.")
        == "west"
    )
    assert bench.lesson_side("Go east, then down the stairs.") == ""  # not a stem lesson


def test_cells_count_the_named_side_per_walk_and_outcome():
    cells = bench.cells(WEST["verdicts"])
    assert cells == {
        "walked east, lost": {"east": 0, "west": 8, "none": 0},
        "walked east, won": {"east": 0, "west": 8, "none": 0},
        "walked west, lost": {"east": 0, "west": 8, "none": 0},
        "walked west, won": {"east": 0, "west": 8, "none": 0},
    }


def test_the_rule_meets_the_bar_and_a_constant_side_does_not():
    learnt = bench.probe_summary([RULE, COPY, RULE])
    assert learnt["trained"]["counts"] == {"right_won": 16, "won": 16, "right_lost": 16, "lost": 16}
    # against a writer that copies the walked side: equal after a win, +1 after every loss
    assert learnt["trained_minus_frozen"]["after_won"]["difference"]["mean"] == 0.0
    assert learnt["trained_minus_frozen"]["after_lost"]["difference"]["mean"] == 1.0
    # ... so the bar (above the frozen one after wins too) is not met against a copier
    assert learnt["meets_the_bar"] is False
    against_constant = bench.probe_summary([RULE, WEST, RULE])
    # a constant side is right after 8 wins and 8 losses: the rule is +0.5 on both, 8 of 16
    # discordant pairs each (McNemar p = 2 / 2**8)
    versus = against_constant["trained_minus_frozen"]
    assert versus["after_won"]["difference"]["mean"] == 0.5
    assert versus["after_won"]["mcnemar_p"] == pytest.approx(2 / 2**8)
    assert against_constant["meets_the_bar"] is True
    constant = bench.probe_summary([WEST, COPY, RULE])
    assert (
        constant["trained"]["counts"]["right_won"]
        == constant["trained"]["counts"]["right_lost"]
        == 8
    )
    assert constant["meets_the_bar"] is False
