"""``comprl-gym lessons`` and ``lesson``: the lessons of a store or an exported bank listed,
and one lesson's full text and history."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import comprl_gym

#: Each command's examples, shown at the end of its --help.
EXAMPLES = {
    "lessons": """examples:
  comprl-gym lessons runs/demo/experience
  comprl-gym lessons runs/demo/experience --status active --min-uses 2 --limit 20
  comprl-gym lessons bank/ --family memory --json""",
    "lesson": """examples:
  comprl-gym lesson runs/demo/experience 12
  comprl-gym lesson bank/ 12 --json""",
}


#: A lesson's statuses (``comprl_gym.experience.records.STATUSES``, named here so that the
#: command line loads without the experience extra; tests/test_lessons_cli.py compares them).
LESSON_STATUSES = ("active", "merged", "dropped", "expired")


def _cmd_lessons(args: argparse.Namespace) -> int:
    """``comprl-gym lessons FOLDER``: the lessons of a store or an exported bank, filtered."""
    from comprl_gym.experience.lineage import filter_lessons, format_lessons, read_lessons

    if args.limit is not None and args.limit < 1:
        raise comprl_gym.ConfigurationError("--limit must be at least 1")
    _, lessons = read_lessons(args.store_dir)
    shown = filter_lessons(lessons, args.family, args.status, args.min_uses, args.limit)
    if args.json:
        for lesson in shown:
            print(lesson.to_json())
    else:
        print(format_lessons(shown, lessons))
    return 0


def add_lessons(sub: Any) -> None:
    p = sub.add_parser(
        "lessons",
        help="list the lessons of an experience store or an exported bank: id, uses, wins, "
        "status, family, title",
        description="List the lessons of an experience store (a training run's experience/ "
        "folder, an eval's --experience) or of an exported bank, by id, every status unless "
        "--status names one. Reads the files only: no embedding model is loaded. "
        "`comprl-gym lesson FOLDER ID` shows one lesson's full text and history.",
    )
    p.add_argument("store_dir", metavar="FOLDER", help="a store folder or an exported bank")
    p.add_argument(
        "--family",
        default=None,
        help="only the lessons of this env family (memory, minihack, ...); '' for family-less ones",
    )
    p.add_argument(
        "--status",
        choices=LESSON_STATUSES,
        default=None,
        help="only the lessons with this status (default: every status)",
    )
    p.add_argument(
        "--min-uses", type=int, default=0, help="only the lessons shown at least this many times"
    )
    p.add_argument("--limit", type=int, default=None, help="show at most this many (by id)")
    p.add_argument(
        "--json", action="store_true", help="one JSON object per lesson, every field, no table"
    )
    p.set_defaults(func=_cmd_lessons)


def _cmd_lesson(args: argparse.Namespace) -> int:
    """``comprl-gym lesson FOLDER ID``: one lesson's full text and history (a store's revision
    log; an exported bank keeps the lesson's provenance and tallies only)."""
    import json

    from comprl_gym.experience.database import DB_NAME, ExperienceDatabase
    from comprl_gym.experience.lineage import (
        BANK,
        bank_history,
        format_history,
        lesson_history,
        read_lessons,
        store_kind,
    )

    if store_kind(args.store_dir) == BANK:
        _, lessons = read_lessons(args.store_dir)
        found = [e for e in lessons if e.id == args.id]
        history = bank_history(found[0]) if found else None
    else:
        database = ExperienceDatabase(Path(args.store_dir) / DB_NAME, quick_check=False)
        try:
            history = lesson_history(database, args.id)
        finally:
            database.close()
    if history is None:
        raise comprl_gym.ConfigurationError(
            f"no lesson {args.id} in {args.store_dir} (no row and no kept revision names it)"
        )
    print(json.dumps(history, indent=2) if args.json else format_history(history))
    return 0


def add_lesson(sub: Any) -> None:
    p = sub.add_parser(
        "lesson",
        help="one lesson: its full text, where it came from, what it was merged into, its uses "
        "and wins",
        description="Show one lesson of an experience store or an exported bank: its full "
        "text, where it came from, what it was merged into, and its uses and wins (a bank "
        "keeps no revision log: its lessons show their provenance and tallies only).",
    )
    p.add_argument("store_dir", metavar="FOLDER", help="a store folder or an exported bank")
    p.add_argument("id", type=int, help="the lesson's id (`comprl-gym lessons FOLDER` lists them)")
    p.add_argument("--json", action="store_true", help="print the history as JSON")
    p.set_defaults(func=_cmd_lesson)
