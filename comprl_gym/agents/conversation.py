"""One episode's multi-turn chat as token ids: token-in/token-out, within a context budget.

The prompt of turn ``t + 1`` is the prompt of turn ``t``, the completion ids of turn ``t``
EXACTLY as sampled (never re-tokenised), the chat template's end-of-turn tokens the
completion lacks (masked: they were not sampled) and the next chat-templated user (or
``tool``) message. The system prompt with the episode's experiences therefore stays in
context token for token for the whole episode.

Reference: ``roll/pipeline/agentic/env_manager/traj_env_manager.py::format_messages`` (history
``prompt_ids + response_ids`` plus the new message; when a response did not end with the
template's end token, e.g. it stopped on a stop string, the end token ids are put in front of
the next prompt as prompt tokens) and ``::formulate_rollouts`` (one sequence per trajectory).

Context budget (ours; the reference has none: it ends an episode once its 32k context is
full, ``traj_env_manager.py::make_decision``): a prompt plus ``max_new_tokens`` must fit in
``max_tokens``. When the next prompt would not, a new *segment* starts: its prompt is the
system prompt, a one-line summary of the folded turns (``Earlier: N steps, actions: ...``)
and the latest turns that fit, kept token for token but as prompt (masked) tokens, so every
sampled token is trained in exactly one segment. A prompt that cannot fit even alone is sent
whole with a warning: nothing is cut silently.

Example:
    >>> from comprl_gym.llm import TransformersBackend
    >>> backend = TransformersBackend("tiny")
    >>> chat = TokenConversation(backend, max_tokens=2048)
    >>> system = {"role": "system", "content": "Play."}
    >>> p0 = chat.first_prompt(system, {"role": "user", "content": "obs 0"}, "Task", [], 8)
    >>> chat.record(p0, [backend.tokenizer.convert_tokens_to_ids("<|im_end|>")], "north")
    >>> p1 = chat.next_prompt({"role": "user", "content": "obs 1"}, [], 8)
    >>> p1[: len(p0) + 1] == p0 + [backend.tokenizer.convert_tokens_to_ids("<|im_end|>")]
    True
    >>> chat.segment
    0
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from comprl_gym.agents.prompts import fold_summary
from comprl_gym.core import ConfigurationError

logger = logging.getLogger(__name__)

#: A stand-in reply, to read what the chat template puts around an assistant message.
_MARK = "\x1fASSISTANT-REPLY\x1f"


@dataclass
class _TurnIds:
    """One turn's pieces: the message before it (with any prefill), the sampled completion and
    the end-of-turn ids appended after it (prompt tokens)."""

    message: list[int]
    completion: list[int]
    closing: list[int]
    action: str


@dataclass
class TokenConversation:
    """The token ids of one episode's chat (see the module docstring).

    Args:
        backend: an :class:`~comprl_gym.llm.base.LLMBackend` with a Hugging Face tokenizer
            (``backend.tokenizer``) and a chat template.
        max_tokens: the context budget (prompt plus a reply's ``max_new_tokens``).
    """

    backend: Any
    max_tokens: int = 2048
    segment: int = 0
    #: All turns of the episode, oldest first.
    turns: list[_TurnIds] = field(default_factory=list)
    #: Turns folded out of the context so far (they were trained in an earlier segment).
    folded: int = 0
    system: dict[str, str] = field(default_factory=dict)
    task: str = ""
    _prefix: list[int] = field(default_factory=list)  # current segment ids through the last turn
    _pending: list[int] = field(default_factory=list)
    _end: list[int] | None = None

    # ------------------------------------------------------------------ template pieces
    def _encode(self, text: str) -> list[int]:
        return list(self.backend.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _render(self, messages: list[dict[str, str]], add_generation_prompt: bool) -> str:
        return self.backend.apply_chat_template(
            messages, add_generation_prompt=add_generation_prompt
        )

    def _base(self) -> list[dict[str, str]]:
        return [
            self.system,
            {"role": "user", "content": "."},
            {"role": "assistant", "content": _MARK},
        ]

    def end_of_turn_ids(self) -> list[int]:
        """What the template writes after an assistant message's content (ChatML:
        ``<|im_end|>`` and a newline)."""
        if self._end is None:
            text = self._render(self._base(), add_generation_prompt=False)
            self._end = self._encode(text[text.rindex(_MARK) + len(_MARK) :])
        return self._end

    def message_ids(self, message: dict[str, str]) -> list[int]:
        """The ids a new user/tool message adds after a closed assistant turn, up to and
        including the generation prompt (``<|im_start|>assistant\\n``)."""
        base = self._render(self._base(), add_generation_prompt=False)
        full = self._render([*self._base(), message], add_generation_prompt=True)
        if not full.startswith(base):
            raise ConfigurationError(
                f"the chat template renders a {message['role']!r} message by changing earlier "
                "turns; multi-turn token prompts need a template that only appends "
                "(use conversation='windowed')"
            )
        return self._encode(full[len(base) :])

    def closing_ids(self, completion: list[int]) -> list[int]:
        """The end-of-turn ids the completion lacks (all of them after a stop string or the
        length limit; the newline after ``<|im_end|>`` when it stopped on the end token)."""
        end = self.end_of_turn_ids()
        for k in range(min(len(end), len(completion)), 0, -1):
            if completion[-k:] == end[:k]:
                return end[k:]
        return end

    # ------------------------------------------------------------------ the conversation
    def first_prompt(
        self,
        system: dict[str, str],
        user: dict[str, str],
        task: str,
        prefill: list[int],
        max_new_tokens: int,
    ) -> list[int]:
        """The prompt of step 0: system + first user message + generation prompt + prefill."""
        self.system, self.task = dict(system), task
        head = self._encode(self._render([system, user], add_generation_prompt=True))
        self._prefix = []
        self._pending = head + list(prefill)
        self._warn_if_over(self._pending, max_new_tokens)
        return list(self._pending)

    def next_prompt(
        self, message: dict[str, str], prefill: list[int], max_new_tokens: int
    ) -> list[int]:
        """The prompt of the next step: everything so far + ``message`` + prefill, or a new
        segment when that would not fit the budget."""
        if not self.turns:
            raise ConfigurationError("next_prompt before first_prompt/record")
        new = self.message_ids(message) + list(prefill)
        if len(self._prefix) + len(new) + max_new_tokens > self.max_tokens:
            self._fold(len(new) + max_new_tokens)
        self._pending = self._prefix + new
        self._warn_if_over(self._pending, max_new_tokens)
        return list(self._pending)

    def record(self, prompt: list[int], completion: list[int], action: str) -> None:
        """The model answered ``prompt`` (as returned by the last ``*_prompt`` call) with
        ``completion``."""
        if prompt != self._pending:
            raise ConfigurationError("record() got a prompt this conversation did not build")
        message = prompt[len(self._prefix) :]
        closing = self.closing_ids(completion)
        self.turns.append(_TurnIds(message, list(completion), closing, action))
        self._prefix = prompt + list(completion) + closing

    def _fold(self, needed: int) -> None:
        """Start a new segment: system + summary of the folded turns + the latest turns that fit.

        Turn 0 is always folded (its message holds the first system prompt and the task, which
        the summary restates).
        """
        episode = self.turns
        best: tuple[int, list[int]] | None = None
        for start in range(len(episode), 0, -1):
            summary = {
                "role": "user",
                "content": fold_summary(self.task, [t.action for t in episode[:start]]),
            }
            ids = self._encode(self._render([self.system, summary], add_generation_prompt=False))
            ids += [i for t in episode[start:] for i in t.message + t.completion + t.closing]
            if best is not None and len(ids) + needed > self.max_tokens:
                break
            best = (start, ids)
        assert best is not None
        self.folded, self._prefix = best
        self.segment += 1
        logger.debug(
            "context budget %d: segment %d folds %d turns, keeps %d",
            self.max_tokens,
            self.segment,
            self.folded,
            len(episode) - self.folded,
        )

    def _warn_if_over(self, prompt: list[int], max_new_tokens: int) -> None:
        if len(prompt) + max_new_tokens > self.max_tokens:
            logger.warning(
                "a prompt of %d tokens plus %d new tokens exceeds max_context_tokens=%d even "
                "after folding; it is sent whole (raise max_context_tokens or shorten "
                "observations)",
                len(prompt),
                max_new_tokens,
                self.max_tokens,
            )
