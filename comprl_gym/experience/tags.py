"""THE reader of the tags models answer in: ``<answer>``, ``<title>``, ``<content>``, ...

The extractor's operations, the refiner's answer and the actor's critique all put their
payload in ``<answer>...</answer>`` and (for memories) ``<title>`` / ``<description>`` /
``<content>``. Tags are read case-insensitively across lines, and a reply that thinks aloud
before answering is read by its LAST block (the reference parsers take the last match).

Example:
    >>> reply = "<think>maybe <answer>x</answer></think> <ANSWER> final </ANSWER>"
    >>> tag_blocks(reply, "answer")
    ['x', 'final']
    >>> last_tag(reply, "answer"), last_tag("no tags", "answer") is None
    ('final', True)
    >>> tag_fields("<title>Go</title><Content>east\\nthen north</Content>", ("title", "content"))
    {'title': 'Go', 'content': 'east\\nthen north'}
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import cache


@cache
def _pattern(tag: str) -> re.Pattern[str]:
    name = re.escape(tag)
    return re.compile(rf"<{name}>(.*?)</{name}>", re.DOTALL | re.IGNORECASE)


def tag_blocks(text: str, tag: str) -> list[str]:
    """The stripped contents of every ``<tag>...</tag>`` block of ``text``, in order."""
    return [block.strip() for block in _pattern(tag).findall(text)]


def last_tag(text: str, tag: str) -> str | None:
    """The last ``<tag>`` block's content, or ``None`` when there is none."""
    blocks = tag_blocks(text, tag)
    return blocks[-1] if blocks else None


def tag_fields(text: str, tags: Iterable[str]) -> dict[str, str]:
    """``{tag: content}`` of each of ``tags`` present in ``text`` (its last block)."""
    found = {tag: last_tag(text, tag) for tag in tags}
    return {tag: value for tag, value in found.items() if value is not None}
