"""The ``search_and_ask`` protocol: how an actor asks the knowledge base, in one place.

Two spellings ask the same question:

* the bracket action ``search_and_ask[<question>]`` (the action name is configurable), and
* the tag ``<knowledge_search_and_ask>question</knowledge_search_and_ask>`` anywhere in a reply
  (the Complementary RL reference's form).

The wrapper parses actions with :class:`SearchAndAskSyntax`; the LLM agent finds the tag in a
chatty reply with :func:`find_tag`; the actor is told about the tool once, by
:func:`instructions` (shown in the first observation).

Example:
    >>> syntax = SearchAndAskSyntax()
    >>> syntax.parse("search_and_ask[where is the key?]")
    'where is the key?'
    >>> syntax.parse("hmm <knowledge_search_and_ask> stairs? </knowledge_search_and_ask>")
    'stairs?'
    >>> syntax.parse("search_and_ask[]"), syntax.parse("go north")
    ('', None)
    >>> find_tag("I will ask. <knowledge_search_and_ask>a</knowledge_search_and_ask>")
    '<knowledge_search_and_ask>a</knowledge_search_and_ask>'
"""

from __future__ import annotations

import re
from typing import Any

from comprl_gym.core import ConfigurationError

#: The default name of the bracket action.
ACTION_NAME = "search_and_ask"
#: The tag of the reference's spelling.
TAG_NAME = "knowledge_search_and_ask"

_TAG = re.compile(rf"<{TAG_NAME}>(.*?)</{TAG_NAME}>", re.DOTALL | re.IGNORECASE)


def find_tag(text: str) -> str | None:
    """The last complete ``<knowledge_search_and_ask>...</...>`` call in ``text`` (tags
    included, so it can be passed on as the action), or ``None``."""
    calls = [m.group(0) for m in _TAG.finditer(text)]
    return calls[-1] if calls else None


class SearchAndAskSyntax:
    """Recognises a ``search_and_ask`` call in an action and returns its question.

    Args:
        action_name: the bracket action's name (an identifier).
    """

    def __init__(self, action_name: str = ACTION_NAME):
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", action_name):
            raise ConfigurationError(f"action_name must be an identifier, got {action_name!r}")
        self.action_name = action_name
        self._bracket = re.compile(
            rf"(?<![A-Za-z0-9_]){re.escape(action_name)}\s*\[(.*)\]", re.DOTALL | re.IGNORECASE
        )

    def parse(self, action: Any) -> str | None:
        """The question (possibly empty) if ``action`` is a call, else ``None``.

        The tag form wins over the bracket form; an unclosed tag or bracket is no call.
        """
        if not isinstance(action, str):
            return None
        tag = _TAG.search(action)
        if tag:
            return tag.group(1).strip()
        bracket = self._bracket.search(action)
        if bracket:
            return bracket.group(1).strip()
        return None

    @property
    def template(self) -> str:
        """The action as listed among the admissible actions."""
        return f"{self.action_name}[<question>]"


def instructions(budget: int, action_name: str = ACTION_NAME) -> str:
    """How the actor may ask the knowledge base (shown at reset when the budget is positive).

    Example:
        >>> instructions(2).startswith("You may consult a knowledge base")
        True
    """
    return (
        f"You may consult a knowledge base of past experience at most {budget} time(s) this "
        f"episode: answer with {action_name}[<your question>] (or wrap the question in "
        f"<{TAG_NAME}>...</{TAG_NAME}>). Describe what you see, what blocks you and what you "
        "tried. Asking does not use up a move."
    )


def answer_observation(answer: str, calls_left: int, observation: str, action_name: str) -> str:
    """The observation that carries the knowledge base's answer back to the actor."""
    return (
        f"Knowledge base answer:\n{answer}\n\n({calls_left} {action_name} call(s) left this "
        f"episode.)\n\nCurrent observation:\n{observation}"
    )


__all__ = [
    "ACTION_NAME",
    "TAG_NAME",
    "SearchAndAskSyntax",
    "answer_observation",
    "find_tag",
    "instructions",
]
