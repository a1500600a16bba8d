"""The store's texts: a lesson as the reference writes it, what the actor is shown (lessons
injected at reset, search results), and the search-and-ask refiner's prompt (the extractor LLM
answering an agent's question from retrieved lessons). What the extractor is asked when it
writes lessons is :mod:`comprl_gym.lessons.prompts`.

Example:
    >>> from comprl_gym.experience.records import Experience
    >>> memory_text(Experience(1, "Stairs", "", "Walk to '>'."))
    "<title>Stairs</title><content>Walk to '>'.</content>"
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from comprl_gym.experience.records import Experience
from comprl_gym.experience.tags import last_tag


def memory_text(exp: Experience | Any) -> str:
    """An experience as the reference writes memories: ``<title>..</title><content>..</content>``
    (a description, from older formats, opens the content).

    Example:
        >>> memory_text(Experience(1, "Stairs", "", "Walk to '>'."))
        "<title>Stairs</title><content>Walk to '>'.</content>"
    """
    content = f"{exp.description}\n{exp.content}" if exp.description else exp.content
    return f"<title>{exp.title}</title><content>{content}</content>"


def format_experiences(
    experiences: Sequence[Experience], label: str = "Memory Entry", max_chars: int | None = None
) -> str:
    """Number experiences the way the operations' ``target_idx`` refer to them (1-based)."""
    if not experiences:
        return "[No previous memories]"
    parts = []
    for i, exp in enumerate(experiences, 1):
        text = memory_text(exp)
        if max_chars is not None and len(text) > max_chars:
            text = text[: max_chars - 3] + "..."
        parts.append(f"**{label} {i}**\n{text}")
    return "\n\n".join(parts)


# ---------------------------------------------------------------------------------------------
# search_and_ask refiner
# ---------------------------------------------------------------------------------------------
REFINER_SYSTEM_PROMPT = """\
You answer an agent's question using a knowledge base of lessons. Combine the retrieved lessons
that apply to the agent's situation into short, concrete advice for its next actions. Say so
when none of them applies. Think inside <think> </think> and put the advice inside
<answer> </answer>."""

REFINER_USER_TEMPLATE = """\
Task: {task}
Current observation:
{observation}

Question: {question}

Retrieved knowledge:
{knowledge}"""


def build_refiner_messages(
    question: str, experiences: Sequence[Experience], context: dict[str, Any] | None = None
) -> list[dict[str, str]]:
    """Chat messages asking the extractor to answer ``question`` from ``experiences``."""
    context = context or {}
    observation = str(context.get("observation", ""))
    if len(observation) > 4000:
        observation = observation[:4000] + "..."
    user = REFINER_USER_TEMPLATE.format(
        task=context.get("task", ""),
        observation=observation,
        question=question,
        knowledge=format_experiences(experiences, "Knowledge", max_chars=4000),
    )
    return [{"role": "system", "content": REFINER_SYSTEM_PROMPT}, {"role": "user", "content": user}]


def extract_answer(text: str) -> str:
    """The last ``<answer>`` block of a model reply, or the reply without ``<think>`` blocks."""
    answer = last_tag(text, "answer")
    if answer is not None:
        return answer
    return re.sub(r"<think>.*?</think>", "", text, flags=re.DOTALL | re.IGNORECASE).strip()


Refiner = Callable[[str, Sequence[Experience], dict[str, Any]], str]


def make_llm_refiner(generate: Callable[[list[dict[str, str]]], str]) -> Refiner:
    """A ``refiner(question, experiences, context) -> str`` from any chat ``generate`` function.

    Example:
        >>> refiner = make_llm_refiner(lambda messages: "<think>t</think><answer>go east</answer>")
        >>> refiner("where?", [], {})
        'go east'
    """

    def refiner(question: str, experiences: Sequence[Experience], context: dict[str, Any]) -> str:
        return extract_answer(generate(build_refiner_messages(question, experiences, context)))

    return refiner


# ---------------------------------------------------------------------------------------------
# What the actor sees
# ---------------------------------------------------------------------------------------------
INJECTION_HEADER = "Lessons from past experience (use them when they apply):"


def format_injection(experiences: Sequence[Experience]) -> str:
    """The block of experiences prepended to the first observation of an episode."""
    lines = [INJECTION_HEADER]
    for i, exp in enumerate(experiences, 1):
        lines.append(f"[{i}] {exp.title}: {exp.description}\n    {exp.content}".rstrip())
    return "\n".join(lines)


def format_search_results(experiences: Sequence[Experience]) -> str:
    """The search_and_ask answer when no refiner is configured: the retrieved lessons."""
    if not experiences:
        return "No relevant knowledge found."
    return "\n\n".join(f"[{i}] {exp.text}" for i, exp in enumerate(experiences, 1))
