"""The one interface every LLM backend keeps: generate text with token ids and logprobs.

A backend turns prompts into :class:`Generation` records. Prompts are either raw strings
(:meth:`LLMBackend.generate`, the caller applied the chat template), chat conversations
(:meth:`LLMBackend.chat`, the backend applies the model's template) or token ids
(:meth:`LLMBackend.generate_ids`, token-in/token-out: a multi-turn agent extends its previous
prompt and completion ids and never re-tokenises what the model wrote). Every generation carries
the prompt and completion token ids and, where the backend can give them, the log-probability
of each sampled token under the model's *unprocessed* distribution (temperature 1, no top-p):
the quantity a policy-gradient trainer compares its own log-probabilities with.

Example:
    >>> from comprl_gym.llm import SamplingParams, TransformersBackend
    >>> from comprl_gym.llm.models import tiny_model_path
    >>> backend = TransformersBackend(tiny_model_path())
    >>> [gen] = backend.generate(["Hello"], SamplingParams(max_tokens=4, temperature=0))
    >>> len(gen.completion_token_ids) == len(gen.completion_logprobs) <= 4
    True
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from typing import Any

from comprl_gym.core import ComprlGymError, ConfigurationError

logger = logging.getLogger(__name__)

#: One chat message: ``{"role": "system" | "user" | "assistant", "content": str}``.
Message = dict[str, str]


class BackendError(ComprlGymError, RuntimeError):
    """A model backend failed: the server is unreachable, the model ran out of memory...

    The message says what failed and what to try; ``retryable`` tells a caller whether the
    same request may succeed later (a timeout, a busy server) or never will (a wrong URL).
    """

    def __init__(self, message: str, retryable: bool = False):
        super().__init__(message)
        self.retryable = retryable


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one completion per prompt.

    Attributes:
        max_tokens: most new tokens per completion.
        temperature: softmax temperature; ``0`` means greedy decoding.
        top_p: nucleus sampling mass (``1.0`` = off).
        top_k: sample among the ``k`` most likely tokens (``0`` = off).
        stop: strings that end a completion. The completion text keeps the stop string (so an
            agent that stops on ``"</action>"`` still sees a closed tag).
        logprobs: return the log-probability of each sampled token.
        seed: seed of the sampler for reproducible sampling (``None`` = not reproducible);
            request ``i`` of a batch is seeded ``seed + i``.
        seeds: one seed per request instead (overrides ``seed``): a request's draws then do
            not depend on what else is in its batch, which common random numbers across
            evaluation arms need (:meth:`request_seed`).
        allowed_token_ids: sample only these tokens (a choice among a few words, e.g. the
            extractor filling a family's lesson stem); ``None`` = any token.
    """

    max_tokens: int = 128
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    stop: tuple[str, ...] = ()
    logprobs: bool = True
    seed: int | None = None
    seeds: tuple[int, ...] | None = None
    allowed_token_ids: tuple[int, ...] | None = None

    def request_seed(self, index: int) -> int | None:
        """The seed of request ``index`` of a batch.

        Example:
            >>> SamplingParams(seed=10).request_seed(2), SamplingParams(seeds=(7, 3)).request_seed(1)
            (12, 3)
        """
        if self.seeds is not None:
            return int(self.seeds[index])
        return None if self.seed is None else self.seed + index

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ConfigurationError(f"max_tokens must be at least 1, got {self.max_tokens}")
        if self.temperature < 0:
            raise ConfigurationError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ConfigurationError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.allowed_token_ids is not None:
            if not self.allowed_token_ids:
                raise ConfigurationError("allowed_token_ids is empty: no token could be sampled")
            object.__setattr__(
                self, "allowed_token_ids", tuple(int(t) for t in self.allowed_token_ids)
            )
        if isinstance(self.stop, str):  # a lone string is a common slip
            object.__setattr__(self, "stop", (self.stop,))
        else:
            object.__setattr__(self, "stop", tuple(self.stop))


@dataclass
class Generation:
    """One completion and the tokens behind it.

    Attributes:
        prompt: the prompt text the model saw (after the chat template).
        text: the completion text (stop string kept, end-of-sequence token dropped).
        prompt_token_ids: token ids of ``prompt``.
        completion_token_ids: sampled token ids, including a final end-of-sequence token.
        completion_logprobs: log-probability of each sampled token (``None`` if unavailable).
        finish_reason: ``"stop"`` (EOS or stop string), ``"length"`` (hit ``max_tokens``).
        gen_time_s: wall time of the batched call this completion came from.
    """

    prompt: str
    text: str
    prompt_token_ids: list[int]
    completion_token_ids: list[int]
    completion_logprobs: list[float] | None
    finish_reason: str
    gen_time_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_completion_tokens(self) -> int:
        return len(self.completion_token_ids)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class LLMBackend(ABC):
    """A language model that completes batches of prompts.

    Subclasses implement :meth:`generate` and :meth:`apply_chat_template` (and
    :meth:`count_tokens`); :meth:`chat` comes for free. A backend that serves its own copy of
    a model being trained says so with :attr:`supports_weight_sync` and takes new weights
    through :meth:`update_weights`.
    """

    #: Short backend name: ``"transformers"``, ``"vllm"``, ``"openai"``.
    name: str = "base"
    #: The model's name or folder.
    model_name: str = ""
    #: Whether :meth:`generate` takes raw prompt strings in the model's own template (an agent
    #: may then start the reply for the model). An OpenAI server without a local tokenizer
    #: does not: its chat template is unknown here.
    supports_raw_prompts: bool = True
    #: Whether the backend holds its own copy of the weights, which a trainer must refresh
    #: with :meth:`update_weights` after every update (vLLM). A backend that generates with the
    #: trained module itself (transformers, given ``model_object``) has nothing to sync.
    supports_weight_sync: bool = False
    #: Whether :meth:`generate_ids` takes prompts as token ids (transformers, vLLM). A remote
    #: OpenAI server does not; a multi-turn agent then falls back to windowed prompts.
    supports_token_prompts: bool = False

    @abstractmethod
    def generate(self, prompts: list[str], params: SamplingParams) -> list[Generation]:
        """One completion per raw prompt string, in order."""

    def generate_ids(
        self, prompt_token_ids: list[list[int]], params: SamplingParams
    ) -> list[Generation]:
        """One completion per prompt given as token ids, in order; each generation's
        ``prompt_token_ids`` are exactly the ids given (token-in/token-out).

        Backends that can (:attr:`supports_token_prompts`) override this.
        """
        raise ConfigurationError(
            f"the {self.name} backend cannot generate from token ids; use windowed prompts"
        )

    def apply_chat_template(
        self, messages: list[Message], add_generation_prompt: bool = True
    ) -> str:
        """The prompt string the model's chat template makes of ``messages``.

        The default uses the backend's Hugging Face tokenizer (``self.tokenizer``).
        """
        return self.tokenizer.apply_chat_template(  # type: ignore[attr-defined]
            messages, tokenize=False, add_generation_prompt=add_generation_prompt
        )

    def count_tokens(self, text: str) -> int:
        """Number of tokens of ``text`` under the model's tokenizer (``self.tokenizer``)."""
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])  # type: ignore[attr-defined]

    def chat(self, conversations: list[list[Message]], params: SamplingParams) -> list[Generation]:
        """One completion per conversation; the chat template is applied here."""
        prompts = [self.apply_chat_template(messages) for messages in conversations]
        return self.generate(prompts, params)

    def update_weights(self, state_dict: dict[str, Any]) -> None:
        """Load new weights (a torch ``state_dict`` in HF parameter names) into the served model."""
        raise ConfigurationError(f"the {self.name} backend cannot load new weights")

    def close(self) -> None:  # noqa: B027 - optional hook, nothing to release by default
        """Release the model and its memory."""

    def __enter__(self) -> LLMBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def truncate_at_stop(text: str, stop: tuple[str, ...]) -> tuple[str, bool]:
    """Cut ``text`` right after the first stop string (kept); say whether one was found.

    Example:
        >>> truncate_at_stop("go north</action> more", ("</action>",))
        ('go north</action>', True)
    """
    best = -1
    best_end = len(text)
    for s in stop:
        if not s:
            continue
        i = text.find(s)
        if i >= 0 and (best < 0 or i < best):
            best, best_end = i, i + len(s)
    if best < 0:
        return text, False
    return text[:best_end], True
