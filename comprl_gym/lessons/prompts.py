"""The extractor's prompts: what it is asked when it writes lessons.

* the operations prompt (distil a trajectory into ``add`` / ``update`` / ``return`` operations),
  one system prompt per env family and a shared user prompt, and the one-sentence ``plain``
  prompt for tiny extractors;
* the merge prompt (a chunk of knowledge items -> ``<<<KNOWLEDGE_ITEM>>>`` blocks or ``return``).

The store's own texts (a lesson as the reference writes it, what the actor is shown, the
search-and-ask refiner) stay with the store, in :mod:`comprl_gym.experience.prompts`.

The operation format follows the Complementary RL reference: reasoning inside ``<think>``, a
JSON list of ``{"function_name": ..., "parameters": {...}}`` inside ``<answer>``.

Example:
    >>> from comprl_gym.experience.records import Experience
    >>> msgs = build_extractor_messages("Environment: a room\\nAgent: east", True,
    ...                                 [Experience(1, "Stairs", "rooms", "go to >")], "minihack")
    >>> [m["role"] for m in msgs]
    ['system', 'user']
    >>> "**Memory Entry 1**" in msgs[1]["content"], msgs[1]["content"].split("\\n")[1]
    (True, 'SUCCESS')
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from comprl_gym.experience.prompts import format_experiences, memory_text
from comprl_gym.experience.records import Experience
from comprl_gym.families import family_spec

# ---------------------------------------------------------------------------------------------
# Extractor
# ---------------------------------------------------------------------------------------------
# Reference: ComplementaryRL examples/singletask-agentic/memory_prompts.yaml,
# FUNCTIONAL_MEMORY_MODEL_SYS_PROMPT_VOTING_251207 (operations add / update / return, memories
# as <title>..</title><content>..</content>, no drop, no max-ops number) and
# FUNCTIONAL_MEMORY_MODEL_USER_PROMPT_251223 (Outcome / Interaction / Previous Lessons). The
# wording here is ours and shorter (small extractors), the structure and the format are theirs.
_OPERATIONS = """\
## Operations (a JSON list inside <answer>...</answer>)
+ add(new_memory: str): a new lesson that no previous lesson covers.
+ update(target_idx: list[int], new_memory: str): replace the numbered previous lessons
  (Memory Entry numbers) by one better lesson: merge them, correct them or add detail.
  Prefer update over add when a previous lesson is related.
+ return(): write nothing, when the interaction teaches nothing new.

Every memory is <title>short headline</title><content>when it applies, what to do, what to
avoid</content>. Lessons must generalise: no coordinates or instance names; tie each action
to what the agent can observe, with an if-then rule and a fallback.

## Output
<think>why the agent succeeded or failed; do the previous lessons help or mislead?</think>
<answer>
[{{"function_name": "add", "parameters": {{"new_memory": "<title>...</title><content>...</content>"}}}},
 {{"function_name": "update", "parameters": {{"target_idx": [1], "new_memory": "<title>...</title><content>...</content>"}}}}]
</answer>
or
<answer>
{{"function_name": "return"}}
</answer>"""

_GENERIC_FOCUS = (
    "You are a knowledge archivist for an autonomous text agent. Extract reusable, high-level "
    "lessons from its interaction with an environment."
)

EXTRACTOR_SYSTEM_TEMPLATE = (
    """\
{focus}
You receive an agent's interaction with an environment, its outcome (SUCCESS or FAILURE) and
the lessons it was shown. Distil lessons that help a future agent succeed on similar tasks.

"""
    + _OPERATIONS
)

EXTRACTOR_USER_TEMPLATE = """\
Outcome:
{outcome}

Interaction:
{trajectory}

Previous Lessons:
{previous_memories}

Now, think carefully and perform your memory operations. Formulate your thinking process in \
the `<think>` tags and output the answer as a valid JSON list of operations wrapped in \
`<answer>` tags:"""

#: Speaker names of the interaction transcript (reference
#: ``memory_integration_mixin.py::_build_full_trajectory_messages``: user -> Environment,
#: assistant -> Agent, tool -> Tool Environment).
ROLE_ENVIRONMENT, ROLE_AGENT, ROLE_TOOL = "Environment", "Agent", "Tool Environment"


def extractor_system_prompt(env_family: str | None) -> str:
    """The extractor's system prompt for ``env_family`` (a generic one for unknown families)."""
    spec = family_spec(env_family or "")
    focus = spec.extractor_focus if spec and spec.extractor_focus else _GENERIC_FOCUS
    return EXTRACTOR_SYSTEM_TEMPLATE.format(focus=focus)


def format_interaction(
    task: str, turns: Sequence[Any], max_chars: int | None = None, is_tool_call: Any = None
) -> str:
    """The episode as the reference's extractor reads it: one ``Role: text`` line per message.

    The first observation (``turns[0].observation``, preceded by the task unless it already
    contains it) is spoken by the Environment; then each action (the agent's full reply,
    ``turn.text``, or the action) by the Agent, followed by the observation it produced, by the
    Tool Environment when the action was a tool call (``is_tool_call(action)``). The observation
    after the last action is left out: the ``Outcome`` line tells how it ended (reference
    ``_build_full_trajectory_messages``: the terminal history entry has no messages).

    ``max_chars`` bounds the text (the reference has only its 65k-token context): the first
    message (the goal) and the last messages are kept, the middle is folded into one line that
    says how many messages were left out.

    Example:
        >>> from types import SimpleNamespace as T
        >>> turns = [T(observation="a room", action="east", text="", next_observation="a wall"),
        ...          T(observation="a wall", action="north", text="", next_observation="stairs")]
        >>> print(format_interaction("reach the stairs", turns))
        Environment: reach the stairs
        a room
        Agent: east
        Environment: a wall
        Agent: north
    """
    if not turns:
        return f"{ROLE_ENVIRONMENT}: {task}".rstrip()
    first = str(turns[0].observation)
    opening = first if task and task in first else f"{task}\n{first}".strip()
    messages = [f"{ROLE_ENVIRONMENT}: {opening}"]
    for n, turn in enumerate(turns):
        reply = str(getattr(turn, "text", "") or turn.action).strip()
        messages.append(f"{ROLE_AGENT}: {reply}")
        if n + 1 < len(turns):
            tool = is_tool_call is not None and is_tool_call(turn.action)
            role = ROLE_TOOL if tool else ROLE_ENVIRONMENT
            messages.append(f"{role}: {turn.next_observation}")
    text = "\n".join(messages)
    if max_chars is None or len(text) <= max_chars:
        return text
    head, tail = messages[0][: max_chars // 3], []
    budget = max_chars - len(head)
    for message in reversed(messages[1:]):
        if len(message) + 1 > budget - 60:
            break
        tail.insert(0, message)
        budget -= len(message) + 1
    left_out = len(messages) - 1 - len(tail)
    return "\n".join([head, f"[... {left_out} messages left out ...]", *tail])


def build_extractor_messages(
    interaction: str, won: bool, shown: Sequence[Experience], env_family: str | None
) -> list[dict[str, str]]:
    """Chat messages asking the extractor for operations over ``shown`` (numbered from 1).

    ``interaction`` is :func:`format_interaction`'s text; the outcome is ``SUCCESS`` or
    ``FAILURE`` (reference: ``"SUCCESS" if episode_score > 0 else "FAILURE"``).
    """
    user = EXTRACTOR_USER_TEMPLATE.format(
        outcome="SUCCESS" if won else "FAILURE",
        trajectory=interaction,
        previous_memories=format_experiences(shown),
    )
    return [
        {"role": "system", "content": extractor_system_prompt(env_family)},
        {"role": "user", "content": user},
    ]


#: The ``plain`` format for tiny extractors: one sentence of advice, stored as it is.
PLAIN_SYSTEM_PROMPT = (
    "You write short lessons for a game-playing agent. Read what happened and write ONE "
    "sentence of advice that would help on similar tasks. Write only the advice."
)


def build_plain_extractor_messages(task: str, won: bool, transcript: str) -> list[dict[str, str]]:
    """The prompt of the ``plain`` format: one episode, one sentence of advice."""
    outcome = "The agent succeeded." if won else "The agent failed."
    return [
        {"role": "system", "content": PLAIN_SYSTEM_PROMPT},
        {
            "role": "user",
            "content": f"Task: {task}\n{outcome}\nWhat happened:\n{transcript}\nAdvice:",
        },
    ]


# ---------------------------------------------------------------------------------------------
# Merge
# ---------------------------------------------------------------------------------------------
# Reference: MERGING_PROMPT_SYS_PROMPT_251207 (merge / rewrite / discard / return) and
# MERGING_PROMPT_USE_PROMPT_251201 ("--- Entry i ---" blocks, <<<KNOWLEDGE_ITEM>>> output).
MERGE_SYSTEM_PROMPT = """\
You curate a knowledge base of lessons for an autonomous agent. Produce fewer, stronger
lessons from the items you receive:
- MERGE items that share one principle into one item that keeps their conditions;
- REWRITE an item that is useful but too specific into a general if-then rule with a fallback;
- DISCARD an item that is wrong, contradictory or about one instance only (do not output it);
- RETURN when the items are already good and distinct.
Every item is <title>...</title><content>...</content>.

Output either
<think>what to merge, rewrite or discard, and why</think>
<answer>
<<<KNOWLEDGE_ITEM>>>
<title>...</title>
<content>...</content>
<<<END_ITEM>>>
</answer>
(one block per item you keep) or
<answer>
return
</answer>"""

MERGE_USER_TEMPLATE = """\
Knowledge items to merge:

{entries}

Merge related items and output using this EXACT format:
<think>[your analysis]</think>
<answer>
<<<KNOWLEDGE_ITEM>>>
[Your merged knowledge content]
<<<END_ITEM>>>
</answer>"""


def build_merge_messages(items: Sequence[str | Experience]) -> list[dict[str, str]]:
    """Chat messages asking the extractor to merge a chunk of knowledge items (texts).

    Example:
        >>> build_merge_messages(["<title>a</title><content>x</content>"])[1]["content"].splitlines()[2]
        '--- Entry 1 ---'
    """
    texts = [memory_text(item) if isinstance(item, Experience) else str(item) for item in items]
    entries = "\n\n".join(f"--- Entry {i} ---\n{text}" for i, text in enumerate(texts, 1))
    user = MERGE_USER_TEMPLATE.format(entries=entries)
    return [{"role": "system", "content": MERGE_SYSTEM_PROMPT}, {"role": "user", "content": user}]
