"""What the extractor writes, one small object per format (``experience.extractor_format``).

A :class:`LessonFormat` owns the three things that differ between formats: the extractor's
prompt for an episode (:meth:`~LessonFormat.messages`), what the extractor model samples and
how its reply becomes store operations (:meth:`~LessonFormat.reply`, a :class:`Draft`), and
how those operations are written (:meth:`~LessonFormat.store`). Everything they share (the
quality gate, provenance, counts, keeping the sample for training) is the extractor's
(:meth:`~comprl_gym.trainers.extractor.ExperienceExtractor.write`).

* :class:`OperationsFormat` (``operations``, the reference's): the whole episode and the
  lessons it was shown; the reply is a JSON list of ``add`` / ``update`` / ``return`` in
  ``<answer>`` (:mod:`comprl_gym.experience.operations`).
* :class:`PlainFormat` (``plain``): one sentence of advice, stored as it is (tiny models).
* :class:`StemFormat` (``stem``): that sentence opened by the family's lesson stem
  (:attr:`~comprl_gym.lessons.core.FamilyLessons.stem`), so the model writes only the fact:
  one choice among the stem's, which CISPO's credit can reward or punish.

:func:`lesson_format` is the one place a name becomes a format; :func:`lesson_format_for_run`
also refuses, when the trainer starts, a format one of the run's families cannot write (a
:class:`~comprl_gym.core.ConfigurationError` naming the family).

Example:
    >>> lesson_format("plain").name, lesson_format("operations").uses_shown
    ('plain', True)
    >>> lesson_format_for_run("stem", ["comprl/MiniHack-Room-5x5-v0"])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    comprl_gym.core.ConfigurationError: experience.extractor_format 'stem' needs a family with a lesson stem; family 'minihack' ...
    >>> lesson_format_for_run("stem", ["comprl/Memory-Fork-v0"]).name
    'stem'
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from comprl_gym.core import ConfigurationError
from comprl_gym.experience.operations import (
    ExperienceText,
    ExtractorOutputError,
    Operation,
    parse_extractor_output,
)
from comprl_gym.experience.records import Provenance
from comprl_gym.experience.search_and_ask import SearchAndAskSyntax
from comprl_gym.families import family_spec
from comprl_gym.lessons import prompts
from comprl_gym.lessons.core import LessonStem, lesson_title
from comprl_gym.registration import families_of
from comprl_gym.rollouts import Trajectory

logger = logging.getLogger(__name__)
#: The one reader of ``search_and_ask`` calls in an episode's actions.
SEARCH_SYNTAX = SearchAndAskSyntax()


def is_tool_call(action: str) -> bool:
    """Whether an action was a ``search_and_ask`` call (a Tool Environment turn)."""
    return SEARCH_SYNTAX.parse(action) is not None


class Sampler(Protocol):
    """What a format needs of the extractor model (:class:`~comprl_gym.trainers.extractor.
    ExperienceExtractor` is one): its backend and two ways to sample from it."""

    backend: Any

    def generate_chat(
        self, messages: list[dict[str, str]], max_tokens: int | None = None
    ) -> Any: ...

    def generate_prompt(
        self, prompt: str, max_tokens: int, allowed_token_ids: tuple[int, ...] | None = None
    ) -> Any: ...


@dataclass
class Draft:
    """The extractor's reply to one episode, read: the generation it sampled and the store
    operations it asks for (``[]``: it declined; ``None``: the reply was unreadable)."""

    generation: Any
    operations: list[Operation] | None
    #: The ids of the lessons the extractor was shown (what ``target_idx`` numbers).
    shown_ids: list[int] = field(default_factory=list)


class LessonFormat(Protocol):
    """One way for the extractor to write a lesson from an episode."""

    #: Its ``experience.extractor_format`` name.
    name: ClassVar[str]
    #: Whether the extractor is shown the lessons the episode read (``shown`` below).
    uses_shown: ClassVar[bool]

    def check(self, family: str) -> None:
        """Raise :class:`~comprl_gym.core.ConfigurationError` naming ``family`` when this
        format cannot write its lessons (called when the trainer starts)."""

    def messages(
        self, episode: Trajectory, shown: Sequence[Any], transcript_chars: int
    ) -> list[dict[str, str]]:
        """The extractor's chat prompt for ``episode``."""

    def reply(
        self, sampler: Sampler, episode: Trajectory, shown: Sequence[Any], transcript_chars: int
    ) -> Draft:
        """Sample the extractor's reply to ``episode`` and read it."""

    def gate_text(self, operation: Operation) -> str:
        """The text of a written lesson that the ``min_quality`` gate judges."""

    def store(
        self,
        manager: Any,
        operations: list[Operation],
        shown_ids: list[int],
        provenance: Provenance,
    ) -> list[int] | None:
        """Write ``operations`` through ``manager``; the ids written, ``None`` when the store
        refused them (nothing written)."""


def plain_extractor_messages(episode: Trajectory) -> list[dict[str, str]]:
    """The prompt of the ``plain`` format: one episode, one sentence of advice."""
    return prompts.build_plain_extractor_messages(
        episode.task, episode.won, episode.transcript(600)
    )


def plain_lesson(text: str) -> str | None:
    """The lesson of a ``plain`` answer: its first line, or ``None`` when under 8 characters.

    Example:
        >>> plain_lesson("  Go east first.\\nthen more"), plain_lesson("ok") is None
        ('Go east first.', True)
    """
    lines = [line.strip() for line in text.replace("<|im_end|>", "").strip().splitlines()]
    lesson = next((line for line in lines if line), "")
    return lesson if len(lesson) >= 8 else None


def operations_messages(
    episode: Trajectory, shown: list[Any], max_chars: int | None = None
) -> list[dict[str, str]]:
    """The prompt of the ``operations`` format (the reference's extractor input)."""
    interaction = prompts.format_interaction(
        episode.task, episode.turns, max_chars, is_tool_call=is_tool_call
    )
    return prompts.build_extractor_messages(interaction, episode.won, shown, episode.env_family)


class OperationsFormat:
    """The reference's format: the episode and the lessons it read in, ``add`` / ``update`` /
    ``return`` operations out (applied atomically; an ``update`` replaces shown lessons)."""

    name: ClassVar[str] = "operations"
    uses_shown: ClassVar[bool] = True

    def __init__(self, max_text_chars: int | None = None):
        #: The longest memory text an operation may carry (``experience.max_text_chars``).
        self.max_text_chars = max_text_chars

    def check(self, family: str) -> None:
        """Every family can be written in operations."""

    def messages(
        self, episode: Trajectory, shown: Sequence[Any], transcript_chars: int
    ) -> list[dict[str, str]]:
        return operations_messages(episode, list(shown), transcript_chars)

    def reply(
        self, sampler: Sampler, episode: Trajectory, shown: Sequence[Any], transcript_chars: int
    ) -> Draft:
        generation = sampler.generate_chat(self.messages(episode, shown, transcript_chars))
        shown_ids = [e.id for e in shown]
        try:
            operations = parse_extractor_output(generation.text, len(shown), self.max_text_chars)
        except ExtractorOutputError as exc:
            # The reference skips the whole generation: nothing written, never trained.
            logger.info("extractor answer ignored: %s", exc)
            return Draft(generation, None, shown_ids)
        return Draft(generation, operations, shown_ids)

    def gate_text(self, operation: Operation) -> str:
        assert operation.text is not None
        return f"{operation.text.title}. {operation.text.content}"

    def store(
        self,
        manager: Any,
        operations: list[Operation],
        shown_ids: list[int],
        provenance: Provenance,
    ) -> list[int] | None:
        result = manager.apply_operations(operations, shown_ids, provenance)
        return list(result.written_ids) if result.ok else None


class PlainFormat:
    """One sentence of advice, its first line stored as a new lesson titled with the task."""

    name: ClassVar[str] = "plain"
    uses_shown: ClassVar[bool] = False

    def check(self, family: str) -> None:
        """Every family can be written in plain sentences."""

    def messages(
        self, episode: Trajectory, shown: Sequence[Any] = (), transcript_chars: int = 0
    ) -> list[dict[str, str]]:
        return plain_extractor_messages(episode)

    def reply(
        self, sampler: Sampler, episode: Trajectory, shown: Sequence[Any], transcript_chars: int
    ) -> Draft:
        generation = sampler.generate_chat(self.messages(episode))
        return self.draft(generation, plain_lesson(generation.text), episode)

    @staticmethod
    def draft(generation: Any, lesson: str | None, episode: Trajectory) -> Draft:
        """The draft of one sentence: an ``add`` of it, or unreadable when there is none."""
        if lesson is None:
            return Draft(generation, None)
        title = lesson_title(episode)
        return Draft(generation, [Operation("add", (), ExperienceText(title, "", lesson))])

    def gate_text(self, operation: Operation) -> str:
        assert operation.text is not None
        return operation.text.content

    def store(
        self,
        manager: Any,
        operations: list[Operation],
        shown_ids: list[int],
        provenance: Provenance,
    ) -> list[int] | None:
        items = [
            {"title": op.text.title, "description": "", "content": op.text.content}
            for op in operations
            if op.text is not None
        ]
        return [int(i) for i in manager.add(items, provenance)]


class StemFormat(PlainFormat):
    """The plain sentence with the family's lesson stem as its opening: the model samples one
    token, the first of one of the stem's choices. A family without a stem is refused
    (:meth:`check`); a task its family has no stem for (its ``lessons.stem`` returns ``None``)
    is written as a plain sentence."""

    name: ClassVar[str] = "stem"

    def check(self, family: str) -> None:
        spec = family_spec(family)
        if spec is None or spec.lessons.stem is None:
            raise ConfigurationError(
                f"experience.extractor_format 'stem' needs a family with a lesson stem; "
                f"family {family!r} has none (use 'plain' or 'operations')"
            )

    def reply(
        self, sampler: Sampler, episode: Trajectory, shown: Sequence[Any], transcript_chars: int
    ) -> Draft:
        self.check(episode.env_family)
        stem = family_spec(episode.env_family).stem_for(episode.task_id)  # type: ignore[union-attr]
        if stem is None:
            return super().reply(sampler, episode, shown, transcript_chars)
        generation, lesson = fill_stem(sampler, self.messages(episode), stem)
        return self.draft(generation, lesson, episode)


def stem_prompt(
    backend: Any, messages: list[dict[str, str]], stem: LessonStem
) -> tuple[str, list[int]]:
    """The raw prompt at which the stem extractor samples its choice (the chat template of
    ``messages`` followed by the stem's opening) and the first token of each of the stem's
    choices, in the stem's order: the only tokens it may sample there."""
    prompt = backend.apply_chat_template(messages) + stem.opening
    firsts = [
        int(backend.tokenizer(c, add_special_tokens=False)["input_ids"][0]) for c in stem.choices
    ]
    if len(set(firsts)) != len(firsts):
        raise ConfigurationError(
            f"the lesson stem's choices {stem.choices} do not start with distinct tokens: "
            "the extractor could not tell which one it chose"
        )
    return prompt, firsts


def fill_stem(
    sampler: Sampler, messages: list[dict[str, str]], stem: LessonStem
) -> tuple[Any, str | None]:
    """Generate a reply to ``messages`` that starts with the stem's opening, which is part of
    the prompt, so the sample's completion is only the model's choice: one token, the first of
    one of the stem's choices. Returns the generation and the lesson, the opening and the
    chosen choice (``None`` if the backend sampled another token). Needs a backend that takes
    raw prompts and ``allowed_token_ids`` (transformers, vLLM)."""
    backend = sampler.backend
    if not getattr(backend, "supports_raw_prompts", False):
        raise ConfigurationError(
            f"extractor_format 'stem' needs a backend that takes raw prompts; "
            f"{getattr(backend, 'name', 'this backend')} does not (use 'plain')"
        )
    prompt, firsts = stem_prompt(backend, messages, stem)
    generation = sampler.generate_prompt(prompt, 1, allowed_token_ids=tuple(firsts))
    chosen = generation.completion_token_ids[:1]
    if not chosen or chosen[0] not in firsts:
        return generation, None
    return generation, stem.opening + stem.choices[firsts.index(chosen[0])]


def stem_choice_logprobs(
    backend: Any, messages: list[dict[str, str]], stem: LessonStem
) -> list[float]:
    """The log-probability the model gives the first token of each of the stem's choices
    where :func:`fill_stem` samples (temperature 1, the whole vocabulary, in the stem's order):
    a softmax of them is the model's own choice distribution restricted to the stem's choices,
    and their argmax its greedy choice. Each is read from a one-token greedy generation that
    may emit only that token (so any backend that takes raw prompts, ``allowed_token_ids`` and
    log-probs serves), not from a sample: no random draw is made."""
    from comprl_gym.llm import SamplingParams

    prompt, firsts = stem_prompt(backend, messages, stem)
    out = []
    for token in firsts:
        params = SamplingParams(
            max_tokens=1, temperature=0.0, logprobs=True, allowed_token_ids=(token,)
        )
        [generation] = backend.generate([prompt], params)
        if (
            list(generation.completion_token_ids[:1]) != [token]
            or not generation.completion_logprobs
        ):
            raise ConfigurationError(
                f"{getattr(backend, 'name', 'the backend')} did not report the log-prob of the "
                "one token it was allowed: choice probabilities need allowed_token_ids and logprobs"
            )
        out.append(float(generation.completion_logprobs[0]))
    return out


#: The lesson formats by name.
LESSON_FORMATS: dict[str, type] = {
    cls.name: cls for cls in (OperationsFormat, PlainFormat, StemFormat)
}


def lesson_format(name: str, max_text_chars: int | None = None) -> LessonFormat:
    """The format called ``name`` (``experience.extractor_format``): the one place a name
    becomes a format. ``max_text_chars`` bounds what an ``operations`` reply may write."""
    if name == "exemplar":
        raise ConfigurationError(
            "'exemplar' is a memory, not a lesson format: set experience.memory: exemplar "
            "(no extractor model)"
        )
    if name not in LESSON_FORMATS:
        raise ConfigurationError(
            f"unknown experience.extractor_format {name!r}; known: {', '.join(LESSON_FORMATS)}"
        )
    if name == OperationsFormat.name:
        return OperationsFormat(max_text_chars)
    return LESSON_FORMATS[name]()


def lesson_format_for_run(
    name: str, env_ids: Iterable[str], max_text_chars: int | None = None
) -> LessonFormat:
    """:func:`lesson_format`, refused (:class:`~comprl_gym.core.ConfigurationError` naming the
    family) when a family of ``env_ids`` cannot be written in it. Ids of no known family (a
    served env, say) are not checked."""
    chosen = lesson_format(name, max_text_chars)
    for family in families_of(env_ids):
        chosen.check(family)
    return chosen
