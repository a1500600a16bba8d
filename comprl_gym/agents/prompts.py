"""Actor prompt templates — the only place they live; each family's action grammar comes from
its :class:`~comprl_gym.families.FamilySpec`.

Two conversation modes (:attr:`PromptConfig.conversation`):

* ``multi_turn`` (the trainers' default, as the reference implementation): ONE growing chat per
  episode. Step 0 is the system message (action grammar and the episode's experiences) and a
  user message (task, first observation, admissible actions, answer instruction); every later
  step appends the model's reply exactly as sampled and a user message with the observation
  it produced (:func:`turn_message`; a ``tool`` message for a search_and_ask answer). The agent
  builds these prompts as token ids (:mod:`comprl_gym.agents.conversation`).
* ``windowed``: every step a fresh system + user message with a window of recent observations
  and actions (:func:`build_messages`); for evaluation of tiny models and backends that
  cannot take token ids.

In both the admissible actions are a numbered list. Small models copy a *number* from a numbered list far more reliably than a command
from a comma list (measured with SmolLM2-135M on ALFWorld: 0 of 120 vs 3 of 3), so when an env
lists its actions the model may answer with the number.

Example:
    >>> messages = build_messages(
    ...     family="minihack", task="Reach the stairs.", history=[], observation="A wall.",
    ...     admissible=["north", "south"], config=PromptConfig())
    >>> [m["role"] for m in messages]
    ['system', 'user']
    >>> "1. north" in messages[1]["content"]
    True
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from comprl_gym.core import ConfigurationError
from comprl_gym.families import family_spec

#: A placeholder inside an action, as in ``search[<query>]``.
TEMPLATE_PATTERN = re.compile(r"<[^<>]+>")

#: The action grammar of a family whose spec gives none.
GENERIC_GRAMMAR = "You act in a text environment. An action is a short command."

#: How the actor's conversation grows (see :class:`PromptConfig`).
CONVERSATION_MODES = ("multi_turn", "windowed")

EXPERIENCE_HEADER = "Lessons learned in earlier episodes (use the ones that apply to this task):"


@dataclass
class PromptConfig:
    """How the actor prompt is rendered.

    Attributes:
        conversation: ``"multi_turn"`` (one growing token-exact chat per episode; the
            trainers' default) or ``"windowed"`` (a fresh prompt each step with
            ``history_window`` past steps; the default of a plain agent spec, whose
            ``conversation=multi_turn`` option switches).
        max_context_tokens: multi-turn only: the prompt plus the reply's ``max_tokens`` stay
            within this budget. When the next prompt would not, the conversation starts a new
            segment (system prompt, a one-line summary of the folded turns, the latest turns
            that fit); nothing is truncated silently (see
            :class:`~comprl_gym.agents.conversation.TokenConversation`).
        history_window: windowed only: how many past (observation, action) pairs are shown.
        max_observation_chars: the current observation is cut (middle elided) beyond this.
        max_history_observation_chars: each past observation is cut beyond this.
        max_listed_actions: at most this many admissible actions are listed (numbered).
        think: ask for brief reasoning inside <think>...</think> before the answer.
        answer_style: ``"number"`` (answer the number of a listed action; falls back to tags
            when the env lists none), ``"tag"`` (always <action>...</action>).
        prefill: start the model's reply for it (``Action number:`` or ``<action>``) when not
            thinking. SmolLM2-135M answered a valid number 6 times of 6 with the prefill and 1
            of 6 without (it chats instead).
    """

    conversation: str = "windowed"
    max_context_tokens: int = 2048
    history_window: int = 4
    max_observation_chars: int = 3000
    max_history_observation_chars: int = 400
    max_listed_actions: int = 60
    think: bool = False
    answer_style: str = "number"
    prefill: bool = True

    def __post_init__(self) -> None:
        if self.conversation not in CONVERSATION_MODES:
            raise ConfigurationError(
                f"conversation must be one of {CONVERSATION_MODES}, got {self.conversation!r}"
            )
        if self.max_context_tokens < 1:
            raise ConfigurationError("max_context_tokens must be at least 1")


#: A later multi-turn message whose admissible actions did not change says so in one line.
SAME_ACTIONS_NOTE = "Admissible actions and answer format: as before."

FORMAT_ERROR_NOTE = (
    "FORMAT ERROR: your last reply contained no action I could read. Reply with {how}."
)


def _clip(text: str, limit: int) -> str:
    """Keep the head and tail of an over-long text (the middle of a long log matters least)."""
    text = text.strip()
    if len(text) <= limit:
        return text
    half = max(limit // 2 - 10, 1)
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters cut ...]\n{text[-half:]}"


def listed_actions(admissible: list[str] | None, config: PromptConfig) -> list[str]:
    """The admissible actions the prompt numbers (template actions such as
    ``search[<query>]`` are shown but the model writes them out itself)."""
    if not admissible:
        return []
    return list(admissible)[: config.max_listed_actions]


def answer_instruction(
    numbered: bool, config: PromptConfig, numbered_templates: bool = False
) -> str:
    """How the model should answer, in words."""
    if numbered and config.answer_style == "number" and not numbered_templates:
        how = (
            "the number of one action from the list (for example: 1), or an action written "
            "out as <action>ACTION</action> (replace any <placeholder> with your words)"
        )
    else:
        how = "exactly one action inside tags, for example <action>ACTION</action>"
    if config.think:
        return f"First think briefly inside <think>...</think>, then reply with {how}."
    return f"Reply with {how}. Do not explain."


def experience_block(experiences: Sequence[str]) -> str:
    """The lessons from past episodes, as the system prompt carries them for a whole episode.

    Example:
        >>> print(experience_block(["Move toward the stairs."]))
        Lessons learned in earlier episodes (use the ones that apply to this task):
        1. Move toward the stairs.
    """
    lines = [EXPERIENCE_HEADER]
    lines.extend(f"{i}. {' '.join(text.split())}" for i, text in enumerate(experiences, start=1))
    return "\n".join(lines)


def system_prompt(family: str, config: PromptConfig, experiences: Sequence[str] = ()) -> str:
    """The system message of a family, with the episode's experiences when it has any (the
    search_and_ask tool is explained once, by the experience wrapper's first observation)."""
    spec = family_spec(family)
    grammar = spec.action_grammar if spec and spec.action_grammar else GENERIC_GRAMMAR
    return "\n\n".join([grammar, experience_block(experiences)] if experiences else [grammar])


def build_messages(
    family: str,
    task: str,
    history: list[tuple[str, str]],
    observation: str,
    admissible: list[str] | None,
    config: PromptConfig,
    format_error: bool = False,
    experiences: Sequence[str] = (),
) -> list[dict[str, str]]:
    """The conversation for one step.

    Args:
        history: past ``(observation, action)`` pairs, oldest first (the window is applied here).
        format_error: the previous reply had no readable action; say so first.
        experiences: lessons for this episode; they sit in the system message at every step, as
            the reference implementation appends retrieved memories to the system prompt.
    """
    listed = listed_actions(admissible, config)
    lines = [f"Task: {task.strip()}" if task else "Task: (see the observation)"]
    window = history[-config.history_window :] if config.history_window > 0 else []
    if window:
        lines.append("\nRecent steps (oldest first):")
        first = len(history) - len(window) + 1
        for i, (past_obs, past_action) in enumerate(window, start=first):
            lines.append(
                f"[{i}] observation: {_clip(past_obs, config.max_history_observation_chars)}"
            )
            lines.append(f"[{i}] your action: {past_action}")
    if format_error:
        lines.append("\n" + FORMAT_ERROR_NOTE.format(how=_how(listed, config)))
    lines.append(f"\nCurrent observation:\n{_clip(observation, config.max_observation_chars)}")
    if listed:
        numbered = _numbered(listed, admissible)
        lines.append("\n" + numbered[0])
        lines.extend(numbered[1:])
    lines.append("\n" + answer_instruction(bool(listed), config, has_templates(listed)))
    return [
        {"role": "system", "content": system_prompt(family, config, experiences)},
        {"role": "user", "content": "\n".join(lines)},
    ]


def turn_message(
    observation: str,
    admissible: list[str] | None,
    config: PromptConfig,
    format_error: bool = False,
    previous_admissible: list[str] | None = None,
) -> str:
    """A later user message of a multi-turn conversation: the observation the last action
    produced, the admissible actions (listed again only when they changed) and the answer
    instruction.

    Example:
        >>> print(turn_message("You see a wall.", ["north", "south"], PromptConfig(),
        ...     previous_admissible=["north", "south"]))
        Observation:
        You see a wall.
        <BLANKLINE>
        Admissible actions and answer format: as before.
    """
    listed = listed_actions(admissible, config)
    lines = []
    if format_error:
        lines.append(FORMAT_ERROR_NOTE.format(how=_how(listed, config)) + "\n")
    lines.append(f"Observation:\n{_clip(observation, config.max_observation_chars)}\n")
    if listed and listed == listed_actions(previous_admissible, config):
        # The list and the full instruction are in the context already: a reminder suffices
        # (each repetition costs every later turn its tokens again).
        lines.append(SAME_ACTIONS_NOTE)
    else:
        lines.extend(_numbered(listed, admissible) if listed else [])
        lines.append(answer_instruction(bool(listed), config, has_templates(listed)))
    return "\n".join(lines)


def fold_summary(task: str, actions: Sequence[str]) -> str:
    """The user message that opens a new context segment: the task and one line for the
    turns folded out of the context.

    Example:
        >>> print(fold_summary("Reach the stairs.", ["north", "east"]))
        Task: Reach the stairs.
        Earlier: 2 steps, actions: north, east.
    """
    head = f"Task: {task.strip()}" if task else "Task: (see the observations)"
    return f"{head}\nEarlier: {len(actions)} steps, actions: {', '.join(actions)}."


def _numbered(listed: list[str], admissible: list[str] | None) -> list[str]:
    lines = ["Admissible actions:"]
    lines.extend(f"{i}. {action}" for i, action in enumerate(listed, start=1))
    if admissible and len(admissible) > len(listed):
        lines.append(f"(and {len(admissible) - len(listed)} more)")
    return lines


def _how(listed: list[str], config: PromptConfig) -> str:
    how = answer_instruction(bool(listed), config, has_templates(listed))
    return how.split("reply with ", 1)[-1].split("Reply with ", 1)[-1].split(". Do not")[0]


def has_templates(actions: list[str]) -> bool:
    """Whether EVERY listed action is a template the model must fill in (``search[<query>]``):
    then a number cannot name a complete action and the model writes the action out."""
    return bool(actions) and all(TEMPLATE_PATTERN.search(a) for a in actions)


def answer_prefill(
    admissible: list[str] | None, config: PromptConfig
) -> tuple[str, tuple[str, ...]]:
    """The start of the model's reply and the stop strings that end it.

    Example:
        >>> answer_prefill(["north", "south"], PromptConfig())
        ('Action number: ', ('\\n',))
        >>> answer_prefill(None, PromptConfig())
        ('<action>', ('</action>',))
    """
    if config.think or not config.prefill:
        return "", ("</action>",)
    listed = listed_actions(admissible, config)
    if listed and config.answer_style == "number" and not has_templates(listed):
        return "Action number: ", ("\n",)
    return "<action>", ("</action>",)


# --------------------------------------------------------------------------------------------
# The actor's critique of retrieved experiences (reference: ``ACTOR_CRITIC_SYS_PROMPT_251113``
# and ``ACTOR_CRITIC_USER_PROMPT_251113`` in ``examples/singletask-agentic/memory_prompts.yaml``,
# used by ``memory_integration_mixin.py::actor_critic``; the wording here is our own).
# --------------------------------------------------------------------------------------------
CRITIQUE_SYSTEM = """\
Before you start a task you are shown knowledge retrieved from a knowledge base of earlier \
experience. Judge whether it will help you with the task at hand, then choose one operation:

1. reject: the knowledge does not help. Use it when it is irrelevant to this task, wrong or \
misleading, tied to a different situation in a way that cannot be adapted, or contradicts the \
task's rules; also when you already solve such tasks well on your own.
2. accept: the knowledge is relevant, correct, general enough and tells you what to do. It is \
used exactly as written.
3. refine: the knowledge holds a useful idea but should be clarified, made more general or \
adapted to this task. Give the improved text in the parameter "refined_knowledge"; it replaces \
the knowledge for this task.

Weigh relevance (does it address what this task needs?), quality (is it correct, actionable, \
not over-specific?) and your historical performance (if you often fail, does it address your \
weaknesses; if you often succeed, does it add to what already works?).

Answer format: first reason inside <think>...</think>, then give exactly one operation as a \
JSON object inside <answer>...</answer>, for example
<answer>{"function_name": "accept", "parameters": {}}</answer>
<answer>{"function_name": "refine", "parameters": {"refined_knowledge": "..."}}</answer>
The JSON must be valid (escape quotes and newlines inside strings). When in doubt, refine \
rather than reject, so that a useful idea is not lost."""

CRITIQUE_USER = """\
Task prompt:
{task_prompt}

Knowledge:
{knowledge}

Historical performance:
Average score on similar tasks: {avg_score:.2f}
Trajectories so far: {trajectories}

Reason inside <think>...</think>, then give your decision as one JSON object inside \
<answer>...</answer>."""


def build_critique_messages(
    task_prompt: str, experiences: Sequence[str], avg_score: float, trajectories: int
) -> list[dict[str, str]]:
    """The chat in which the actor judges the experiences retrieved for its next episode.

    ``task_prompt`` is what the actor will be asked at step 0 (reference: ``"Environment
    Instruction: {system}\\nObservation: {first user message}"``); ``avg_score`` and
    ``trajectories`` are its running performance on the env family (reference
    ``get_tag_performance``).

    Example:
        >>> messages = build_critique_messages("Find the stairs.", ["Walk to '>'."], 0.25, 8)
        >>> [m["role"] for m in messages]
        ['system', 'user']
        >>> print(messages[1]["content"].split("Historical")[0].strip())
        Task prompt:
        Find the stairs.
        <BLANKLINE>
        Knowledge:
        1. Walk to '>'.
    """
    knowledge = "\n\n".join(f"{i}. {text.strip()}" for i, text in enumerate(experiences, start=1))
    user = CRITIQUE_USER.format(
        task_prompt=task_prompt.strip(),
        knowledge=knowledge,
        avg_score=avg_score,
        trajectories=trajectories,
    )
    return [{"role": "system", "content": CRITIQUE_SYSTEM}, {"role": "user", "content": user}]
