"""The second-reader page's tables (``docs/results/second-reader.md``), from
``second_reader.json``."""

from __future__ import annotations

from collections.abc import Callable

from benchmarks.tables import interval, result, table
from comprl_gym.evaluation.stream import paired_cell

#: The second-reader study's readers, in the order its tables print them.
SECOND_READERS = {"seed_0": "seed 0 (committed)", "seed_1": "seed 1"}


def second_reader_table() -> str:
    """Per reader and arm: success at each visit (``second_reader.json``), Wilson intervals."""
    study = result("second_reader.json")
    visits = sorted(
        {v for r in study["readers"].values() for v in r["streaming"]["none"]["visits"]} - {"all"}
    )
    rows = [
        [label, arm]
        + [
            interval(study["readers"][reader]["streaming"][arm]["visits"][v]["success"])
            for v in visits
        ]
        for reader, label in SECOND_READERS.items()
        for arm in study["arms"]
    ]
    return table(["reader", "arm", *[f"visit {v}" for v in visits]], rows)


def second_reader_versus_table() -> str:
    """Per reader: each comparison at visit 2, over all dungeons and split by the dungeon's
    visit-1 outcome, and oracle minus none at visit 1 (``second_reader.json``), paired."""
    study = result("second_reader.json")
    rows = []
    for reader, label in SECOND_READERS.items():
        r = study["readers"][reader]
        split = r["by_own_past"]
        won, lost = split["won_at_visit_1"], split["lost_at_visit_1"]
        for name in study["comparisons"]:
            rows.append(
                [
                    label,
                    name,
                    paired_cell(r["versus"][name]["2"]),
                    f"{paired_cell(won[name])} ({won['dungeons']})",
                    f"{paired_cell(lost[name])} ({lost['dungeons']})",
                ]
            )
        rows.append(
            [
                label,
                "oracle minus none, visit 1",
                paired_cell(r["streaming"]["oracle"]["minus_none"]["1"]),
                "",
                "",
            ]
        )
    head = [
        "reader",
        "comparison",
        "visit 2, all dungeons",
        "visit 2, dungeons won at visit 1 (n)",
        "visit 2, dungeons lost at visit 1 (n)",
    ]
    return table(head, rows)


def second_reader_warmups_table() -> str:
    """The seed-1 reader's two warm-ups (``second_reader.json``, ``seed_1_warmups``)."""
    warmups = result("second_reader.json")["seed_1_warmups"]
    rows = []
    for name in ("memory-reader-seed1-oe80", "memory-reader-seed1"):
        w = warmups[name]
        rows.append(
            [
                f"`runs/{name}`",
                f"{w['steps']}, {w['lr']:g}",
                ", ".join(w["formats"]),
                f"{w['time_s'] / 60:.0f} min",
                ", ".join(f"{f} {v:.2f}" for f, v in w["first_ten"].items()),
                ", ".join(f"{f} {v:.2f}" for f, v in w["last_ten"].items()),
                f"`{w['reader_sha256'][:8]}…`",
            ]
        )
    head = ["warm-up", "steps, lr", "formats", "warm-up time", "loss, first ten steps",
            "loss, last ten steps", "reader sha256"]  # fmt: skip
    return table(head, rows)


def second_reader_moves_table() -> str:
    """Per reader, own-past group and arm at visit 2: wins, first moves to the stairs' side,
    wins after one, and the shown record's side (``second_reader.json``, ``visit_2_moves``)."""
    study = result("second_reader.json")
    rows = []
    for reader, label in SECOND_READERS.items():
        moves = study["readers"][reader]["visit_2_moves"]
        for group in ("won_at_visit_1", "lost_at_visit_1"):
            for arm in study["arms"]:
                m = moves[group][arm]
                shown = m["record_names_stairs"] + m["record_names_other"]
                rows.append(
                    [
                        label,
                        group.replace("_", " "),
                        arm,
                        f"{m['won']} of {m['episodes']}",
                        str(m["first_move_to_stairs"]),
                        f"{m['won_after_first_move_to_stairs']} of {m['first_move_to_stairs']}",
                        f"{m['record_names_stairs']} / {m['record_names_other']}" if shown else "",
                        f"{m['first_move_as_record']} of {shown}" if shown else "",
                    ]
                )
    head = [
        "reader",
        "dungeons",
        "arm",
        "won",
        "first move to the stairs' side",
        "won after it",
        "record shown names the stairs' side / the other",
        "first move as the record's",
    ]
    return table(head, rows)


#: Table name (the page's ``<!-- generated: NAME -->``) -> its renderer.
TABLES: dict[str, Callable[[], str]] = {
    "second-reader": second_reader_table,
    "second-reader-versus": second_reader_versus_table,
    "second-reader-moves": second_reader_moves_table,
    "second-reader-warmups": second_reader_warmups_table,
}
