"""Parse what an extractor LLM writes into store operations.

The extractor thinks inside ``<think>`` and answers with a JSON list inside ``<answer>`` (the
Complementary RL reference format)::

    <think>the agent looped between two corridors ...</think>
    <answer>[
      {"function_name": "add", "parameters": {"new_memory": "## Title: ...\\n## Description: ...\\n## Content: ..."}},
      {"function_name": "update", "parameters": {"idx": [1, 2], "updated_memory": "..."}},
      {"function_name": "drop", "parameters": {"idx": [3]}}
    ]</answer>

``idx`` numbers are 1-based positions in the list of experiences shown to the extractor. A
merge call answers with ``keep`` / ``merge`` (``merged_memory``) / ``drop``. Anything malformed
raises :class:`ExtractorOutputError`; callers apply nothing in that case.

Example:
    >>> ops = parse_extractor_output('<think>x</think><answer>[{"function_name": "drop", '
    ...                              '"parameters": {"idx": [2]}}]</answer>', n_shown=2)
    >>> ops[0].kind, ops[0].idx
    ('drop', (2,))
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from comprl_gym.core import ComprlGymError
from comprl_gym.experience.embedding import clean_text

#: Operations an extractor may emit after reading a trajectory.
EXTRACT_KINDS = ("add", "update", "drop", "upvote", "downvote")
#: Operations a merge call may emit for a window of experiences.
MERGE_KINDS = ("keep", "merge", "drop")

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_TEXT_KEYS = ("new_memory", "updated_memory", "merged_memory", "memory", "text")
_MD_FIELD = re.compile(
    r"^\s*(?:#+\s*)?\**\s*(title|description|content)\s*\**\s*:\s*\**", re.IGNORECASE | re.MULTILINE
)
_XML_FIELD = re.compile(r"<(title|description|content)>(.*?)</\1>", re.DOTALL | re.IGNORECASE)


class ExtractorOutputError(ComprlGymError, ValueError):
    """The extractor's output cannot be parsed or applied; nothing was changed."""


@dataclass(frozen=True)
class ExperienceText:
    title: str
    description: str
    content: str


@dataclass(frozen=True)
class Operation:
    """One store operation. ``idx`` are 1-based positions in the shown experiences."""

    kind: str
    idx: tuple[int, ...] = ()
    text: ExperienceText | None = None


@dataclass
class ApplyResult:
    """What applying an extractor's operations did.

    ``updated`` maps each new id to the ids it replaced; ``written_ids`` are the ids the
    extractor is credited for (added and updated).
    """

    ok: bool = True
    added: list[int] = field(default_factory=list)
    updated: dict[int, list[int]] = field(default_factory=dict)
    dropped: list[int] = field(default_factory=list)
    voted: list[int] = field(default_factory=list)
    error: str | None = None

    @property
    def written_ids(self) -> list[int]:
        return [*self.added, *self.updated]


def parse_experience_text(text: str, max_chars: int | None = None) -> ExperienceText:
    """Split an experience string into title, description and content.

    Accepts ``## Title: / ## Description: / ## Content:`` blocks, ``<title>..</title>
    <content>..</content>`` tags, a JSON object with those keys, or plain text (first line is
    the title).

    Example:
        >>> parse_experience_text("<title>Keys</title><content>Pick up the key first.</content>")
        ExperienceText(title='Keys', description='', content='Pick up the key first.')
    """
    if isinstance(text, dict):
        title = str(text.get("title", "")).strip()
        description = str(text.get("description", "")).strip()
        content = str(text.get("content", "")).strip()
    else:
        if not isinstance(text, str | bytes):
            raise ExtractorOutputError(f"an experience must be a string, got {type(text).__name__}")
        text = clean_text(text).strip()
        title = description = content = ""
        xml = {m.group(1).lower(): m.group(2).strip() for m in _XML_FIELD.finditer(text)}
        markers = list(_MD_FIELD.finditer(text))
        if xml:
            title, description, content = (
                xml.get(k, "") for k in ("title", "description", "content")
            )
        elif markers:
            parts: dict[str, str] = {}
            for i, marker in enumerate(markers):
                end = markers[i + 1].start() if i + 1 < len(markers) else len(text)
                parts.setdefault(
                    marker.group(1).lower(), text[marker.end() : end].strip().strip("*").strip()
                )
            title, description, content = (
                parts.get(k, "") for k in ("title", "description", "content")
            )
        elif text.startswith("{"):
            try:
                data = json.loads(text)
            except json.JSONDecodeError:
                data = None
            if isinstance(data, dict):
                return parse_experience_text(data, max_chars)  # type: ignore[arg-type]
        if not (title or description or content):
            first = text.splitlines()[0] if text else ""
            title, content = first[:120].strip(), text
    if not content:
        content = description or title
    if not title:
        title = content.splitlines()[0][:120].strip() if content else ""
    if not content.strip():
        raise ExtractorOutputError("the experience text is empty")
    total = len(title) + len(description) + len(content)
    if max_chars is not None and total > max_chars:
        raise ExtractorOutputError(
            f"the experience text is {total} characters; the limit (max_text_chars) is {max_chars}"
        )
    return ExperienceText(title, description, content)


def _answer_payload(output: str) -> str:
    if not isinstance(output, str | bytes):
        raise ExtractorOutputError(f"extractor output must be text, got {type(output).__name__}")
    output = clean_text(output)
    matches = _ANSWER.findall(output)
    if not matches:
        raise ExtractorOutputError("no <answer>...</answer> block in the extractor output")
    return matches[-1].strip()


def _parse_ops(
    output: str, kinds: tuple[str, ...], n_shown: int | None, max_chars: int | None
) -> list[Operation]:
    payload = _answer_payload(output)
    if payload.lower() in ("", "return", "[]", "none"):
        return []
    payload = re.sub(r"^```(?:json)?\s*|\s*```$", "", payload)
    try:
        data = json.loads(payload)
    except json.JSONDecodeError as exc:
        raise ExtractorOutputError(f"the <answer> block is not valid JSON: {exc}") from exc
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        raise ExtractorOutputError(
            f"the <answer> block must hold a JSON list, got {type(data).__name__}"
        )
    ops = []
    for position, item in enumerate(data, 1):
        ops.extend(_parse_one(item, position, kinds, n_shown, max_chars))
    return ops


def _parse_one(
    item: Any, position: int, kinds: tuple[str, ...], n_shown: int | None, max_chars: int | None
) -> list[Operation]:
    where = f"operation {position}"
    if not isinstance(item, dict) or "function_name" not in item:
        raise ExtractorOutputError(f"{where} is not an object with a 'function_name'")
    kind = str(item["function_name"]).strip().lower()
    if kind == "return":
        return []
    if kind not in kinds:
        raise ExtractorOutputError(
            f"{where}: unknown function {kind!r}; allowed: {', '.join(kinds)}"
        )
    params = item.get("parameters", {})
    if not isinstance(params, dict):
        raise ExtractorOutputError(f"{where}: 'parameters' must be an object")
    idx: tuple[int, ...] = ()
    if kind != "add":
        raw = params.get("idx", params.get("target_idx"))
        if isinstance(raw, int) and not isinstance(raw, bool):
            raw = [raw]
        if (
            not isinstance(raw, list)
            or not raw
            or not all(isinstance(i, int) and not isinstance(i, bool) for i in raw)
        ):
            raise ExtractorOutputError(f"{where}: {kind} needs 'idx', a non-empty list of integers")
        if n_shown is not None and any(not 1 <= i <= n_shown for i in raw):
            raise ExtractorOutputError(f"{where}: idx {raw} outside 1..{n_shown}")
        idx = tuple(dict.fromkeys(raw))
    text = None
    if kind in ("add", "update", "merge"):
        raw_text = next((params[k] for k in _TEXT_KEYS if k in params), None)
        if raw_text is None:
            raise ExtractorOutputError(f"{where}: {kind} needs the memory text (e.g. 'new_memory')")
        if not isinstance(raw_text, str | dict):
            raise ExtractorOutputError(f"{where}: the memory text must be a string")
        try:
            text = parse_experience_text(raw_text, max_chars)  # type: ignore[arg-type]
        except ExtractorOutputError as exc:
            raise ExtractorOutputError(f"{where}: {exc}") from None
    return [Operation(kind, idx, text)]


def parse_extractor_output(
    output: str, n_shown: int | None = None, max_chars: int | None = None
) -> list[Operation]:
    """Parse an extractor answer into ``add``/``update``/``drop``/``upvote``/``downvote`` ops.

    ``n_shown`` is the number of experiences the extractor saw (checks ``idx``). ``[]`` or
    ``return`` mean "no change". Raises :class:`ExtractorOutputError` on anything malformed.
    """
    return _parse_ops(output, EXTRACT_KINDS, n_shown, max_chars)


def parse_merge_output(output: str, n_window: int, max_chars: int | None = None) -> list[Operation]:
    """Parse a merge answer (``keep``/``merge``/``drop`` over a window of ``n_window``)."""
    ops = _parse_ops(output, MERGE_KINDS, n_window, max_chars)
    claimed: set[int] = set()
    for op in ops:
        if op.kind == "keep":
            continue
        overlap = claimed.intersection(op.idx)
        if overlap:
            raise ExtractorOutputError(f"entries {sorted(overlap)} are merged or dropped twice")
        claimed.update(op.idx)
    return ops
