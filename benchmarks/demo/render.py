"""The demo page's tables (``docs/results/demo.md``), from ``demo.json``."""

from __future__ import annotations

from collections.abc import Callable

from benchmarks.tables import interval, result, table
from comprl_gym.evaluation.stream import paired_cell

#: How a stream's ``shown_verdicts`` group an arm's later visits, in the order printed.
AFTER, SHOWN_VERDICTS = ("after_won", "after_lost"), ("right", "wrong", "no_side")
#: ``make demo``'s two streams (``demo.json``), in the order its tables show them.
DEMO_STREAMS = {"before": "before training", "after": "after training"}


def demo_table() -> str:
    """``make demo``'s success by visit per arm, before and after training, from ``demo.json``
    (``run.py``); each cell as its streams printed it."""
    demo = result("demo.json")
    arms = demo["after"]["stream"]["arms"]  # in the stream's order (the file's keys are sorted)
    visits = [v for v in demo["after"]["streaming"][arms[0]]["visits"] if v != "all"]
    head = ["arm"] + [f"{label}: visit {v}" for label in DEMO_STREAMS.values() for v in visits]
    rows = [
        [arm]
        + [
            interval(demo[name]["streaming"][arm]["visits"][v]["success"])
            for name in DEMO_STREAMS
            for v in visits
        ]
        for arm in arms
    ]
    return table(head, rows)


def _visit_order(label: str) -> float:
    """Visits in order, ``all`` last."""
    return float("inf") if label == "all" else int(label)


def demo_versus_table() -> str:
    """``make demo``'s treatments minus their placebos at the last visit, before and after
    training (``demo.json``), each cell as its stream printed it."""
    demo = result("demo.json")
    last = [v for v in next(iter(demo["after"]["versus"].values())) if v != "all"][-1]
    head = [f"visit {last}, paired"] + list(DEMO_STREAMS.values())
    rows = [
        [name] + [paired_cell(demo[stream]["versus"][name][last]) for stream in DEMO_STREAMS]
        for name in demo["after"]["versus"]
    ]
    return table(head, rows)


def demo_shown_table() -> str:
    """What each arm of ``make demo``'s streams showed at visit 2, by how visit 1 ended."""
    demo = result("demo.json")
    rows = [
        [label, arm, *(str(row[after][v]) for after in AFTER for v in SHOWN_VERDICTS)]
        for name, label in DEMO_STREAMS.items()
        for arm in demo[name]["stream"]["arms"]
        if (row := demo[name]["shown_verdicts"].get(arm))
    ]
    head = [
        "stream",
        "arm",
        "after a win: right",
        "wrong",
        "no side",
        "after a loss: right",
        "wrong",
        "no side",
    ]
    return table(head, rows)


def demo_after_minus_before_table() -> str:
    """Per arm, ``make demo``'s trained run minus its starting point (``demo.json``)."""
    demo = result("demo.json")
    labels = sorted(next(iter(demo["after_minus_before"].values())), key=_visit_order)
    rows = [
        [arm] + [paired_cell(demo["after_minus_before"][arm][v]) for v in labels]
        for arm in demo["after"]["stream"]["arms"]
    ]
    head = ["arm"] + [f"visit {v}" if v != "all" else "all visits" for v in labels]
    return table(head, rows)


#: Table name (the page's ``<!-- generated: NAME -->``) -> its renderer.
TABLES: dict[str, Callable[[], str]] = {
    "demo": demo_table,
    "demo-versus": demo_versus_table,
    "demo-shown": demo_shown_table,
    "demo-after-minus-before": demo_after_minus_before_table,
}
