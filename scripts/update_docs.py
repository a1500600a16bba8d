"""Regenerate the tables the README and the docs pages print from files (``make readme``).

A page marks a generated part with a pair of comments naming its table::

    <!-- generated: demo -->
    ...the table, rewritten by this script...
    <!-- end generated: demo -->

and this script rewrites every marked part of ``README.md`` and ``docs/**/*.md`` from its source:
the env id table from :mod:`comprl_gym.registration`, every results table from its committed
file under ``benchmarks/results/``. A study's tables are rendered by its own folder: each
``benchmarks/<study>/render.py`` registers its renderers in a ``TABLES`` dict (table name ->
function), and :func:`study_tables` collects them all. So a number in those tables is the
file's number, and a changed file shows up as a stale page: ``python scripts/update_docs.py
--check`` (run by ``tests/test_docs.py``) exits non-zero naming the pages and tables to
regenerate. A marker naming no known table, or an unclosed one, is an error.
"""

from __future__ import annotations

import argparse
import gzip
import importlib
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the checkout's benchmarks package: the studies' renderers

from benchmarks.common import RESULTS  # noqa: E402
from comprl_gym.registration import markdown_table  # noqa: E402
from comprl_gym.utils import atomic_write_text  # noqa: E402

MARKED = re.compile(
    r"(<!-- generated: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- end generated: (?P=name) -->)",
    re.S,
)
OPENING = re.compile(r"<!-- generated: ([\w-]+) -->")


def _quoted_figures(node: Any, intervals: set, p_values: set) -> None:
    """Every interval (``mean``/``low``/``high`` and the benches' other spellings) and every
    p-value anywhere in a result file's JSON."""
    if isinstance(node, list):
        for value in node:
            _quoted_figures(value, intervals, p_values)
        return
    if not isinstance(node, dict):
        return
    for keys in INTERVAL_KEYS:
        values = [node.get(key) for key in keys]
        if all(isinstance(v, int | float) for v in values):
            intervals.add(tuple(values))
    if isinstance(node.get("rate"), int | float) and isinstance(node.get("ci95"), list):
        intervals.add((node["rate"], *node["ci95"]))
    for key, value in node.items():
        if (key == "p" or key.endswith("_p")) and isinstance(value, int | float):
            p_values.add(value)
        _quoted_figures(value, intervals, p_values)


#: How the result files spell an interval: (estimate, low, high) keys of one dict.
INTERVAL_KEYS = (
    ("mean", "low", "high"),
    ("success", "ci_low", "ci_high"),
    ("difference", "difference_ci_low", "difference_ci_high"),
)
#: ``0.48 [0.41, 0.55]`` or ``+0.11 [+0.03, +0.19]`` as the pages print an interval.
QUOTED_INTERVAL = re.compile(r"([+-]?\d+\.\d+)\s+\[([+-]?\d+\.\d+),\s+([+-]?\d+\.\d+)\]")
#: ``p 0.014`` as the pages print McNemar's p (``p < 0.001`` is a bound, not a figure).
QUOTED_P = re.compile(r"\bp\s+(\d\.\d+)\b")


def unsupported_figures(text: str, results: Path = RESULTS) -> list[str]:
    """The intervals and p-values ``text`` prints that no file under ``results`` holds (each
    compared at the number of decimals printed). A figure no file holds cannot be printed.

    >>> unsupported_figures("GRPO 0.48 [0.41, 0.55]; made up: 0.99 [0.12, 0.13], p 0.0123")
    ['0.99 [0.12, 0.13]', 'p 0.0123']
    """
    intervals, p_values = _figures_in(results)
    wrong = []
    for match in QUOTED_INTERVAL.finditer(text):
        printed = tuple(float(x) for x in match.groups())
        places = len(match.group(1).split(".")[1])
        if not any(
            all(round(v, places) == p for v, p in zip(held, printed, strict=True))
            for held in intervals
        ):
            wrong.append(" ".join(match.group(0).split()))
    for match in QUOTED_P.finditer(text):
        places = len(match.group(1).split(".")[1])
        if not any(round(v, places) == float(match.group(1)) for v in p_values):
            wrong.append(" ".join(match.group(0).split()))
    return wrong


def _figures_in(results: Path) -> tuple[set, set]:
    intervals: set = set()
    p_values: set = set()
    # the result files, and the records committed gzipped beside them (a probe's report)
    for path in sorted([*results.rglob("*.json"), *results.rglob("*.json.gz")]):
        raw = path.read_bytes()
        text = gzip.decompress(raw) if path.suffix == ".gz" else raw
        _quoted_figures(json.loads(text.decode("utf-8")), intervals, p_values)
    return intervals, p_values


def study_tables(tables: dict[str, Callable[[], str]]) -> dict[str, Callable[[], str]]:
    """``tables`` and every study's: the ``TABLES`` of each ``benchmarks/<study>/render.py``,
    by table name. A name registered twice is an error."""
    found = dict(tables)
    for path in sorted((ROOT / "benchmarks").glob("*/render.py")):
        module = importlib.import_module(f"benchmarks.{path.parent.name}.render")
        for name, renderer in module.TABLES.items():
            if name in found:
                raise SystemExit(f"generated table {name!r} registered twice ({path})")
            found[name] = renderer
    return found


#: Table name -> its renderer: the env id table and every study's.
TABLES = study_tables({"envs": markdown_table})


def render(text: str) -> str:
    """``text`` with every marked part regenerated."""
    names = OPENING.findall(text)
    closed = [m.group("name") for m in MARKED.finditer(text)]
    if names != closed:
        raise SystemExit(f"unclosed generated part(s): {sorted(set(names) - set(closed))}")
    unknown = sorted(set(names) - set(TABLES))
    if unknown:
        raise SystemExit(f"unknown generated table(s) {unknown}; known: {sorted(TABLES)}")
    return MARKED.sub(lambda m: m.group(1) + TABLES[m.group("name")]() + "\n" + m.group(4), text)


def pages() -> list[Path]:
    """The README and every docs page."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check",
        action="store_true",
        help="rewrite nothing; exit 1 naming the pages whose generated tables are stale",
    )
    check = parser.parse_args(argv).check
    stale = []
    for page in pages():
        current = page.read_text(encoding="utf-8")
        updated = render(current)
        if updated == current:
            continue
        stale.append(page.relative_to(ROOT).as_posix())
        if not check:
            atomic_write_text(page, updated)
    if stale and check:
        print(f"stale generated tables in {', '.join(stale)}: run `make readme`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
