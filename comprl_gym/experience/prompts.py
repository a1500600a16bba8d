"""Every prompt of the experience system, in one place.

* the extractor prompt (distil a trajectory into ``add`` / ``update`` / ``drop`` operations),
  one system prompt per env family and a shared user prompt;
* the merge prompt (a window of experiences -> ``keep`` / ``merge`` / ``drop``);
* the search-and-ask refiner prompt (answer an agent's question from retrieved experiences);
* the texts the actor sees (experiences injected at reset, the search tool's instructions).

The operation format follows the Complementary RL reference: reasoning inside ``<think>``, a
JSON list of ``{"function_name": ..., "parameters": {...}}`` inside ``<answer>``.

Example:
    >>> from comprl_gym.experience.records import Experience
    >>> msgs = build_extractor_messages("reach the stairs", "success", "step 1: ...",
    ...                                 [Experience(1, "Stairs", "rooms", "go to >")], "minihack")
    >>> [m["role"] for m in msgs]
    ['system', 'user']
    >>> "Memory Entry 1" in msgs[1]["content"]
    True
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from comprl_gym.experience.records import Experience
from comprl_gym.families import family_spec

# ---------------------------------------------------------------------------------------------
# Extractor
# ---------------------------------------------------------------------------------------------
_OPERATIONS = """\
**Operations** (output them as a JSON list):
1. `add(new_memory: str)`: a new lesson, orthogonal to the memories shown.
2. `update(idx: list[int], updated_memory: str)`: replace one or more shown memories by a
   refined, corrected or merged lesson (idx are the numbers of the Memory Entries).
3. `drop(idx: list[int])`: remove shown memories that are wrong or misleading.
Return `[]` when the knowledge base already covers the lesson.

**Memory format** (every memory string):
## Title: <short, retrieval-friendly headline>
## Description: <when the lesson applies>
## Content: <the guidance: conditions, steps, pitfalls>

**Rules**
- Lessons must generalise: no coordinates, object numbers or quotes of this trajectory;
  state the condition that makes each action right.
- Judge knowledge quality apart from execution quality: a sound memory the agent ignored
  stays; only wrong or too specific memories are updated or dropped.
- At most {max_operations} operations.

**Output**
<think>your analysis: why the agent won or lost, which memories helped or misled</think>
<answer>
[{{"function_name": "add", "parameters": {{"new_memory": "## Title: ...\\n## Description: ...\\n## Content: ..."}}}},
 {{"function_name": "update", "parameters": {{"idx": [1], "updated_memory": "## Title: ...\\n## Description: ...\\n## Content: ..."}}}}]
</answer>"""

_GENERIC_FOCUS = (
    "You are a knowledge archivist for an autonomous text agent. Extract reusable, high-level "
    "lessons from its interaction with an environment."
)

EXTRACTOR_SYSTEM_TEMPLATE = (
    """\
{focus}
Your mission: distil the trajectory below into lessons that help a future agent succeed on
similar tasks, and keep the knowledge base accurate.

"""
    + _OPERATIONS
)

EXTRACTOR_USER_TEMPLATE = """\
* **Task goal:** {task}
* **Outcome:** {outcome}
* **Max operations:** {max_operations}
* **Previous memories shown to the agent:**
{previous_memories}
* **Interaction trajectory:**
{trajectory}

Think inside <think> </think>, then output the JSON list of operations inside <answer> </answer>."""


def extractor_system_prompt(env_family: str | None, max_operations: int = 3) -> str:
    """The extractor's system prompt for ``env_family`` (a generic one for unknown families)."""
    spec = family_spec(env_family or "")
    focus = spec.extractor_focus if spec and spec.extractor_focus else _GENERIC_FOCUS
    return EXTRACTOR_SYSTEM_TEMPLATE.format(focus=focus, max_operations=max_operations)


def format_experiences(
    experiences: Sequence[Experience], label: str = "Memory Entry", max_chars: int | None = None
) -> str:
    """Number experiences the way the operations' ``idx`` refer to them (1-based)."""
    if not experiences:
        return "[No previous memories]"
    parts = []
    for i, exp in enumerate(experiences, 1):
        text = (
            exp.text
            if max_chars is None or len(exp.text) <= max_chars
            else exp.text[: max_chars - 3] + "..."
        )
        parts.append(f"**{label} {i}**\n{text}")
    return "\n\n".join(parts)


def build_extractor_messages(
    task: str,
    outcome: str,
    trajectory: str,
    shown: Sequence[Experience],
    env_family: str | None,
    max_operations: int = 3,
) -> list[dict[str, str]]:
    """Chat messages asking the extractor for operations over ``shown`` (numbered from 1)."""
    user = EXTRACTOR_USER_TEMPLATE.format(
        task=task,
        outcome=outcome,
        max_operations=max_operations,
        previous_memories=format_experiences(shown),
        trajectory=trajectory,
    )
    return [
        {"role": "system", "content": extractor_system_prompt(env_family, max_operations)},
        {"role": "user", "content": user},
    ]


# ---------------------------------------------------------------------------------------------
# Merge
# ---------------------------------------------------------------------------------------------
MERGE_SYSTEM_PROMPT = """\
You curate a knowledge base of lessons for an autonomous agent. You receive a window of related
entries. Consolidate them: merge entries that say the same thing or belong together into one
better entry, drop entries that are wrong, vague or fully covered by another, keep the rest.

Operations (JSON list):
- `keep(idx: list[int])`: leave these entries as they are.
- `merge(idx: list[int], merged_memory: str)`: replace these entries by one merged entry.
- `drop(idx: list[int])`: remove these entries.
Each entry may appear in at most one merge or drop. Entries you do not mention are kept.
Memory format: ## Title: ...\\n## Description: ...\\n## Content: ...

Output:
<think>which entries overlap, which are wrong</think>
<answer>
[{"function_name": "merge", "parameters": {"idx": [1, 3], "merged_memory": "## Title: ...\\n## Description: ...\\n## Content: ..."}},
 {"function_name": "keep", "parameters": {"idx": [2]}}]
</answer>"""

MERGE_USER_TEMPLATE = """\
Knowledge entries ({count}):

{entries}

Think inside <think> </think>, then output the JSON list of operations inside <answer> </answer>."""


def build_merge_messages(window: Sequence[Experience]) -> list[dict[str, str]]:
    """Chat messages asking the extractor to keep / merge / drop a window of experiences."""
    user = MERGE_USER_TEMPLATE.format(
        count=len(window), entries=format_experiences(window, "Entry")
    )
    return [{"role": "system", "content": MERGE_SYSTEM_PROMPT}, {"role": "user", "content": user}]


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


_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)


def extract_answer(text: str) -> str:
    """The last ``<answer>`` block of a model reply, or the reply without ``<think>`` blocks."""
    found = _ANSWER.findall(text)
    if found:
        return found[-1].strip()
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
