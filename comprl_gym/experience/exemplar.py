"""The case-based baseline: a won episode's actions, stored verbatim as its lesson (no LLM).

The memory-agent literature's simplest memory keeps what worked: the task and the actions
that won it. A trained extractor has to beat this to be worth its weights, so the benchmark
(``benchmarks/bench_experience_transfer.py``) runs it beside every other lesson source.

Example:
    >>> exemplar_lesson("You are in the Vault of Marrow. Find the stairs.", ["west", "west"], True)
    'Task: You are in the Vault of Marrow. Find the stairs.\\nActions that won it, in order: west, west.'
    >>> exemplar_lesson("any task", ["east"], won=False) is None
    True
"""

from __future__ import annotations

from collections.abc import Sequence


def exemplar_lesson(task: str, actions: Sequence[str], won: bool) -> str | None:
    """The lesson of one episode: its task and the actions that won it; ``None`` for a loss
    or an episode without actions (nothing worth repeating)."""
    actions = [a.strip() for a in actions if a and a.strip()]
    if not won or not actions:
        return None
    return f"Task: {task.strip()}\nActions that won it, in order: {', '.join(actions)}."
