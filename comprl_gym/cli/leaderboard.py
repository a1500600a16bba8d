"""``comprl-gym leaderboard`` and ``table``: result folders turned into tables; the
leaderboard ranks runs, the method table pools each method's runs over seeds
(:mod:`comprl_gym.evaluation.leaderboard`, :mod:`comprl_gym.evaluation.table`).

Example:
    >>> parser = argparse.ArgumentParser(); sub = parser.add_subparsers()
    >>> add_table(sub)
    >>> args = parser.parse_args(["table", "--method", "GRPO", "a.json", "b.json",
    ...                           "--versus", "GRPO", "--out", "t"])
    >>> args.method, args.versus
    ([['GRPO', 'a.json', 'b.json']], ['GRPO'])
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from comprl_gym.core import ConfigurationError
from comprl_gym.evaluation.leaderboard import build_leaderboard, write_leaderboard
from comprl_gym.evaluation.table import Run, load_run, markdown, write_table
from comprl_gym.utils import STDOUT

#: Each command's examples, shown at the end of its --help.
EXAMPLES = {
    "leaderboard": """examples:
  comprl-gym leaderboard results/* --out leaderboard/
  comprl-gym leaderboard results/* --suite minihack-nav@1 --out leaderboard/""",
    "table": """examples:
  comprl-gym table --method GRPO runs/grpo-0/stream runs/grpo-1/stream \\
      --method "Complementary RL" runs/crl-0/stream runs/crl-1/stream \\
      --versus GRPO --out results/table""",
}


def _cmd_leaderboard(args: argparse.Namespace) -> int:
    if args.out == STDOUT:  # three files; the Markdown is printed anyway
        raise ConfigurationError("--out names a folder (leaderboard.md, .json, .html), not -")
    board = build_leaderboard(args.results, suite=args.suite)
    paths = write_leaderboard(board, args.out, title=args.title)
    print(paths["markdown"].read_text())
    print("written: " + ", ".join(str(p) for p in paths.values()))
    return 0


def add_leaderboard(sub: Any) -> None:
    p = sub.add_parser(
        "leaderboard",
        help="turn eval result folders into one table (Markdown, JSON, HTML)",
        description="Rank eval and stream result folders in one table. Rows are ranked only "
        "within a suite version, and a run on a training pool only among such runs.",
    )
    p.add_argument("results", nargs="+", help="eval result folders")
    p.add_argument("--out", required=True, help="folder for leaderboard.md / .json / .html")
    p.add_argument("--title", default="comprl-gym leaderboard", help="the page's heading")
    p.add_argument(
        "--suite",
        default=None,
        metavar="NAME@VERSION",
        help="rank only runs of this suite version with its published content hash; others "
        "are refused, with the reason",
    )
    p.set_defaults(func=_cmd_leaderboard)


def _cmd_table(args: argparse.Namespace) -> int:
    if args.out == STDOUT:  # three files, a plot among them: no one stream holds them
        raise ConfigurationError("--out names a stem (it writes STEM.json, .md and .png), not -")
    methods: dict[str, list[Run]] = {}
    for name, *paths in args.method:
        if not paths:
            raise ConfigurationError(f"--method {name!r}: give its runs (one per seed) after it")
        if name in methods:
            raise ConfigurationError(f"--method {name!r} twice: give all its seeds after one")
        methods[name] = [load_run(p) for p in paths]
    try:
        result = write_table(args.out, methods, args.versus)
    except ValueError as exc:  # a seed given twice, a --versus that is no method, ...
        raise ConfigurationError(str(exc)) from exc
    print(markdown(result), end="")
    print(f"wrote {Path(args.out).with_suffix('.json')}, .md and .png")
    return 0


def add_table(sub: Any) -> None:
    p = sub.add_parser(
        "table",
        help="the method table: each method's deployed arm pooled over seeds, paired against "
        "other methods on common random numbers",
    )
    p.add_argument(
        "--method",
        nargs="+",
        action="append",
        required=True,
        metavar="NAME_THEN_RUNS",
        help="a method's name, then its runs, one per seed (repeat per method)",
    )
    p.add_argument(
        "--versus",
        action="append",
        default=[],
        metavar="METHOD",
        help="a method every row's deployed arm is paired against (repeatable)",
    )
    p.add_argument("--out", required=True, help="stem of the .json, .md and .png written")
    p.set_defaults(func=_cmd_table)
