"""The landmark-rule page's tables (``docs/results/landmark-rule.md``), from
``landmark_rule.json``."""

from __future__ import annotations

from collections.abc import Callable

from benchmarks.tables import interval, result, table
from comprl_gym.evaluation.stream import paired_cell

#: The readers of ``landmark_rule.json`` (``run.py``), as the page names them.
LANDMARK_READERS = {"memory_reader": "fork reader", "landmark_reader": "rule reader"}


def landmark_rule_table() -> str:
    """Per reader and arm: success and the first move to the landmark's side at visit 1
    (``landmark_rule.json``), each a rate with its Wilson interval."""
    study = result("landmark_rule.json")
    rows = []
    for reader, label in LANDMARK_READERS.items():
        r = study["readers"][reader]
        for arm in study["arms"]:
            rate, counts = r["first_moves"]["landmark_side"][arm], r["first_moves"]["counts"][arm]
            rows.append(
                [
                    label,
                    arm,
                    interval(r["streaming"][arm]["visits"]["1"]["success"]),
                    interval(rate),
                    f"{counts['landmark_side']} / {counts['other_side']} / {counts['other']}",
                    f"{r['first_moves']['won_after_landmark_side'][arm]} of "
                    f"{counts['landmark_side']}",
                ]
            )
    head = [
        "reader",
        "arm",
        "success",
        "first move to the landmark's side",
        "first moves: landmark / other side / elsewhere",
        "won after a first move to the landmark's side",
    ]
    return table(head, rows)


def landmark_rule_versus_table() -> str:
    """Per reader: each treatment minus its control at visit 1, on success and on the first
    move (``landmark_rule.json``), paired episode by episode."""
    study = result("landmark_rule.json")
    rows = [
        [
            label,
            name,
            paired_cell(study["readers"][reader]["versus"][name]["1"]),
            paired_cell(study["readers"][reader]["first_moves"]["versus"][name]),
        ]
        for reader, label in LANDMARK_READERS.items()
        for name in study["comparisons"]
    ]
    head = ["reader", "visit 1, paired", "success", "first move to the landmark's side"]
    return table(head, rows)


#: Table name (the page's ``<!-- generated: NAME -->``) -> its renderer.
TABLES: dict[str, Callable[[], str]] = {
    "landmark-rule": landmark_rule_table,
    "landmark-rule-versus": landmark_rule_versus_table,
}
