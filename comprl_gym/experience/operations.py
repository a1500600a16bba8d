"""Parse what an extractor LLM writes into store operations.

The extractor thinks inside ``<think>`` and answers with a JSON list inside ``<answer>``, as
the Complementary RL reference does (``async_memory_manager.py::
parse_functional_operations_from_response``, l.1172-1312)::

    <think>the agent looped between two corridors ...</think>
    <answer>[
      {"function_name": "add", "parameters": {"new_memory": "<title>..</title><content>..</content>"}},
      {"function_name": "update", "parameters": {"target_idx": [1, 2], "new_memory": "..."}},
      {"function_name": "return"}
    ]</answer>

``target_idx`` numbers are 1-based positions in the list of experiences shown to the extractor;
as in the reference's executor (``_execute_functional_operations``) numbers outside that list
are ignored. ``return`` ends the list: the operations after it are not applied, and a
``return`` alone writes nothing (the extractor declines). Older spellings are accepted too:
``idx`` for ``target_idx``, ``updated_memory`` for ``new_memory``, ``## Title:`` blocks for the
tags, ``[]`` for ``return``. The reference has no ``drop``: an unknown function, bad JSON or a
missing field raises :class:`ExtractorOutputError`, and callers then apply nothing (the
reference skips the whole generation, and never trains on it).

A merge call answers with ``<<<KNOWLEDGE_ITEM>>>`` blocks or ``return``
(:func:`parse_merge_items`).

Example:
    >>> ops = parse_extractor_output('<think>x</think><answer>[{"function_name": "update", '
    ...     '"parameters": {"target_idx": [2, 7], "new_memory": "<title>T</title><content>C</content>"}},'
    ...     ' {"function_name": "return"}, {"function_name": "add", "parameters": '
    ...     '{"new_memory": "ignored after return"}}]</answer>', n_shown=2)
    >>> [(op.kind, op.idx, op.text.title) for op in ops]
    [('update', (2,), 'T')]
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from comprl_gym.core import ComprlGymError
from comprl_gym.experience.embedding import clean_text
from comprl_gym.experience.tags import last_tag, tag_fields

#: Operations an extractor may emit after reading a trajectory (the reference parser's set;
#: its prompt offers add / update / return only).
EXTRACT_KINDS = ("add", "update", "upvote", "downvote")

_TEXT_KEYS = ("new_memory", "updated_memory", "memory", "text")
_ITEM = re.compile(r"<<<KNOWLEDGE_ITEM>>>(.*?)<<<END_ITEM>>>", re.DOTALL)
#: Placeholder-like merge items the reference rejects (``async_memory_manager.py::
#: _is_placeholder``), and its shortest accepted item (more than 30 characters).
_PLACEHOLDER = re.compile(
    r"^(string\d*|item\s*\d*|knowledge\s*\d*|entry\s*\d*|your\s+(comprehensive\s+)?knowledge.*"
    r"|\[.*placeholder.*\]|<[^<>]*>|\.\.\.|xxx+|(first|second)\s+(merged\s+)?knowledge.*)$",
    re.IGNORECASE | re.DOTALL,
)
MIN_MERGE_ITEM_CHARS = 31
_MD_FIELD = re.compile(
    r"^\s*(?:#+\s*)?\**\s*(title|description|content)\s*\**\s*:\s*\**", re.IGNORECASE | re.MULTILINE
)


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
        xml = tag_fields(text, ("title", "description", "content"))
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
    answer = last_tag(output, "answer")
    if answer is None:
        raise ExtractorOutputError("no <answer>...</answer> block in the extractor output")
    return answer


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
        op = _parse_one(item, position, kinds, n_shown, max_chars)
        if op is None:  # ``return``: the reference stops processing here
            break
        ops.append(op)
    return ops


def _parse_one(
    item: Any, position: int, kinds: tuple[str, ...], n_shown: int | None, max_chars: int | None
) -> Operation | None:
    where = f"operation {position}"
    if not isinstance(item, dict) or "function_name" not in item:
        raise ExtractorOutputError(f"{where} is not an object with a 'function_name'")
    kind = str(item["function_name"]).strip().lower()
    if kind == "return":
        return None
    if kind not in kinds:
        raise ExtractorOutputError(
            f"{where}: unknown function {kind!r}; allowed: {', '.join(kinds)}"
        )
    params = item.get("parameters", {})
    if not isinstance(params, dict):
        raise ExtractorOutputError(f"{where}: 'parameters' must be an object")
    idx: tuple[int, ...] = ()
    if kind != "add":
        raw = params.get("target_idx", params.get("idx"))
        if isinstance(raw, int) and not isinstance(raw, bool):
            raw = [raw]
        if (
            not isinstance(raw, list)
            or not raw
            or not all(isinstance(i, int) and not isinstance(i, bool) for i in raw)
        ):
            raise ExtractorOutputError(
                f"{where}: {kind} needs 'target_idx', a non-empty list of integers"
            )
        # Numbers outside the shown list are ignored, as the reference's executor does.
        idx = tuple(i for i in dict.fromkeys(raw) if n_shown is None or 1 <= i <= n_shown)
        if kind != "update" and not idx:
            raise ExtractorOutputError(f"{where}: target_idx {raw} outside 1..{n_shown}")
    text = None
    if kind in ("add", "update"):
        raw_text = next((params[k] for k in _TEXT_KEYS if k in params), None)
        if raw_text is None:
            raise ExtractorOutputError(f"{where}: {kind} needs the memory text (e.g. 'new_memory')")
        if not isinstance(raw_text, str | dict):
            raise ExtractorOutputError(f"{where}: the memory text must be a string")
        try:
            text = parse_experience_text(raw_text, max_chars)  # type: ignore[arg-type]
        except ExtractorOutputError as exc:
            raise ExtractorOutputError(f"{where}: {exc}") from None
    return Operation(kind, idx, text)


def parse_extractor_output(
    output: str, n_shown: int | None = None, max_chars: int | None = None
) -> list[Operation]:
    """Parse an extractor answer into ``add`` / ``update`` (/ ``upvote`` / ``downvote``) ops.

    ``n_shown`` is the number of experiences the extractor saw (``target_idx`` beyond it are
    ignored). ``return`` (or ``[]``) means "no change" and ends the list. Raises
    :class:`ExtractorOutputError` on anything malformed.
    """
    return _parse_ops(output, EXTRACT_KINDS, n_shown, max_chars)


def parse_merge_items(output: str, max_chars: int | None = None) -> list[ExperienceText]:
    """The knowledge items of a merge answer; ``[]`` for ``return`` (keep the chunk).

    Reference ``async_memory_manager.py::parse_answer_to_list``: the last ``<answer>`` block
    holds ``<<<KNOWLEDGE_ITEM>>> ... <<<END_ITEM>>>`` blocks, or ``return`` (also as JSON
    ``{"function_name": "return"}``). Items of 30 characters or fewer and placeholder-like
    items are left out. No answer, no block, or nothing left raises
    :class:`ExtractorOutputError` (the caller keeps the chunk unchanged).

    Example:
        >>> parse_merge_items("<answer>return</answer>")
        []
        >>> [i.title for i in parse_merge_items("<answer><<<KNOWLEDGE_ITEM>>><title>Stairs</title>"
        ...     "<content>Walk toward the '>' one step at a time.</content><<<END_ITEM>>></answer>")]
        ['Stairs']
    """
    payload = _answer_payload(output)
    if payload.lower() == "return":
        return []
    if payload.startswith("{") and payload.endswith("}"):
        with contextlib.suppress(json.JSONDecodeError):
            data = json.loads(payload)
            if isinstance(data, dict) and str(data.get("function_name", "")).lower() == "return":
                return []
    blocks = [b.strip() for b in _ITEM.findall(payload)]
    if not blocks:
        raise ExtractorOutputError("no <<<KNOWLEDGE_ITEM>>>...<<<END_ITEM>>> block in the answer")
    kept = [b for b in blocks if len(b) >= MIN_MERGE_ITEM_CHARS and not _PLACEHOLDER.match(b)]
    if not kept:
        raise ExtractorOutputError("every merged item was too short or a placeholder")
    return [parse_experience_text(b, max_chars) for b in kept]
