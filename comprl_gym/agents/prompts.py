"""Actor prompt templates — the only place they live; each family's action grammar comes from
its :class:`~comprl_gym.families.FamilySpec`.

Every step the actor sees one conversation: a system message (who it is, the action grammar
of the env family, the answer format) and a user message (the task, a window of recent
observations and actions, the current observation, the admissible actions as a numbered
list). Small models copy a *number* from a numbered list far more reliably than a command
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

from comprl_gym.families import family_spec

#: A placeholder inside an action, as in ``search[<query>]``.
TEMPLATE_PATTERN = re.compile(r"<[^<>]+>")

#: The action grammar of a family whose spec gives none.
GENERIC_GRAMMAR = "You act in a text environment. An action is a short command."

EXPERIENCE_HEADER = "Lessons learned in earlier episodes (use the ones that apply to this task):"


@dataclass
class PromptConfig:
    """How the actor prompt is rendered.

    Attributes:
        history_window: how many past (observation, action) pairs are shown.
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

    history_window: int = 4
    max_observation_chars: int = 3000
    max_history_observation_chars: int = 400
    max_listed_actions: int = 60
    think: bool = False
    answer_style: str = "number"
    prefill: bool = True


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
        how = answer_instruction(bool(listed), config, has_templates(listed))
        how = how.split("reply with ", 1)[-1].split("Reply with ", 1)[-1].split(". Do not")[0]
        lines.append("\n" + FORMAT_ERROR_NOTE.format(how=how))
    lines.append(f"\nCurrent observation:\n{_clip(observation, config.max_observation_chars)}")
    if listed:
        lines.append("\nAdmissible actions:")
        lines.extend(f"{i}. {action}" for i, action in enumerate(listed, start=1))
        if admissible and len(admissible) > len(listed):
            lines.append(f"(and {len(admissible) - len(listed)} more)")
    lines.append("\n" + answer_instruction(bool(listed), config, has_templates(listed)))
    return [
        {"role": "system", "content": system_prompt(family, config, experiences)},
        {"role": "user", "content": "\n".join(lines)},
    ]


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
