"""What the studies' renderers (``benchmarks/<study>/render.py``) share: a committed result
file, and how the pages print an interval, a p-value, a rate and a table."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from benchmarks.common import RESULTS


@cache
def result(name: str) -> dict[str, Any]:
    """A committed result file, read once."""
    return json.loads((RESULTS / name).read_text(encoding="utf-8"))


def interval(cell: dict[str, Any], signed: bool = False) -> str:
    """``0.48 [0.41, 0.55]`` (``+0.11 [+0.03, +0.19]`` when signed) from a stats interval."""
    fmt = "{:+.2f}" if signed else "{:.2f}"
    return f"{fmt.format(cell['mean'])} [{fmt.format(cell['low'])}, {fmt.format(cell['high'])}]"


def p_value(p: float) -> str:
    """McNemar's p as the pages print it: three decimals, or ``p < 0.001``."""
    return "p < 0.001" if p < 0.001 else f"p {p:.3f}"


def rate(cell: dict[str, Any]) -> str:
    """``0.17 [0.10, 0.28]`` from a bench file's ``success`` / ``ci_low`` / ``ci_high``."""
    return f"{cell['success']:.2f} [{cell['ci_low']:.2f}, {cell['ci_high']:.2f}]"


def table(head: list[str], rows: list[list[str]]) -> str:
    """A Markdown table: the head, its rule, one line a row."""
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])
