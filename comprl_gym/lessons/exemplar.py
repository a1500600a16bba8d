"""The case-based baseline: an episode's actions, stored verbatim as its lesson (no LLM).

The memory-agent literature's simplest memory keeps what worked: the task and the actions
that won it. A trained extractor has to beat this to be worth its weights, so the benchmark
(``benchmarks/experience_transfer/run.py``) runs it beside every other lesson source.
With ``keep_losses`` it keeps what failed as well (the task and the actions that lost it):
an actor whose blind guess already wins the dungeons it wins learns nothing from its own
wins, but can learn from a recorded loss which way not to go. The memories that store these
lessons (no model, nothing to train) are :mod:`comprl_gym.lessons.memories`.

Example:
    >>> exemplar_lesson("You are in the Vault of Marrow. Find the stairs.", ["west", "west"], True)
    'Task: You are in the Vault of Marrow. Find the stairs.\\nActions that won it, in order: west, west.'
    >>> exemplar_lesson("any task", ["east"], won=False) is None
    True
    >>> exemplar_lesson("any task", ["east"], won=False, keep_losses=True)
    'Task: any task\\nActions that lost it, in order: east.'
"""

from __future__ import annotations

from collections.abc import Sequence


def exemplar_lesson(
    task: str, actions: Sequence[str], won: bool, keep_losses: bool = False
) -> str | None:
    """The lesson of one episode: its task and the actions that won it (or, with
    ``keep_losses``, that lost it); ``None`` for an episode without actions, or a loss when
    losses are not kept."""
    actions = [a.strip() for a in actions if a and a.strip()]
    if not actions or not (won or keep_losses):
        return None
    outcome = "won" if won else "lost"
    return f"Task: {task.strip()}\nActions that {outcome} it, in order: {', '.join(actions)}."
