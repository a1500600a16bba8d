"""The embedded default backend: a Hugging Face causal LM in this process, CPU or GPU.

The backend owns a torch model and its tokenizer and exposes both (:attr:`model`,
:attr:`tokenizer`) so a trainer can optimise the very weights that generate rollouts: after
an optimiser step the next :meth:`generate` samples from the new policy, no sync needed.

Example:
    >>> from comprl_gym.llm import SamplingParams, TransformersBackend
    >>> backend = TransformersBackend("tiny")
    >>> [gen] = backend.chat([[{"role": "user", "content": "hi"}]],
    ...                      SamplingParams(max_tokens=3, temperature=0))
    >>> gen.prompt.startswith("<|im_start|>user")
    True
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from comprl_gym.core import ConfigurationError, require
from comprl_gym.llm.base import (
    BackendError,
    Generation,
    LLMBackend,
    SamplingParams,
    truncate_at_stop,
)
from comprl_gym.llm.models import resolve_model

logger = logging.getLogger(__name__)


class TransformersBackend(LLMBackend):
    """Generate with ``transformers`` ``model.generate`` in batches, left-padded.

    Args:
        model: a model folder, or ``"smollm2"`` (the default) / ``"tiny"``.
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``...; ``None`` picks CUDA when present.
        dtype: torch dtype name; float32 on CPU by default, bfloat16 on GPU.
        max_batch_size: prompts per forward pass; bigger batches are split.
        model_object / tokenizer_object: use an already-loaded model and tokenizer instead.
    """

    name = "transformers"

    def __init__(
        self,
        model: str | os.PathLike[str] = "smollm2",
        device: str | None = None,
        dtype: str | None = None,
        max_batch_size: int = 32,
        model_object: Any = None,
        tokenizer_object: Any = None,
    ):
        torch = require("torch", "the transformers backend", "llm")
        transformers = require("transformers", "the transformers backend", "llm")
        self._torch = torch
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        if dtype is None:
            dtype = "float32" if self.device.type == "cpu" else "bfloat16"
        self.max_batch_size = max_batch_size
        if model_object is not None:
            self.model = model_object
            self.tokenizer = tokenizer_object
            self.model_name = str(getattr(model_object, "name_or_path", "custom"))
        else:
            path = resolve_model(model)
            self.model_name = str(path)
            self.tokenizer = transformers.AutoTokenizer.from_pretrained(str(path))
            try:
                self.model = transformers.AutoModelForCausalLM.from_pretrained(
                    str(path), dtype=getattr(torch, dtype)
                ).to(self.device)
            except torch.OutOfMemoryError as exc:  # pragma: no cover - needs a small GPU
                raise BackendError(
                    f"out of memory loading {path} on {self.device}: use a smaller model, "
                    f"dtype='bfloat16' or device='cpu'"
                ) from exc
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.tokenizer.padding_side = "left"
        self.model.eval()

    # ---- interface -----------------------------------------------------------------------
    def update_weights(self, state_dict: dict[str, Any]) -> None:
        """Copy ``state_dict`` into the model; a partial dict (e.g. trained layers only) is
        fine, but a name the model does not have is an error (it would silently change nothing).
        """
        result = self.model.load_state_dict(state_dict, strict=False)
        if result.unexpected_keys:
            raise ConfigurationError(
                f"update_weights got {len(result.unexpected_keys)} parameter name(s) the model does "
                f"not have, e.g. {result.unexpected_keys[:3]}; use Hugging Face parameter names"
            )

    def close(self) -> None:
        self.model = None
        self.tokenizer = None

    supports_token_prompts = True

    def generate(self, prompts: list[str], params: SamplingParams) -> list[Generation]:
        ids = [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        return self._generate_all(ids, prompts, params)

    def generate_ids(
        self, prompt_token_ids: list[list[int]], params: SamplingParams
    ) -> list[Generation]:
        """Complete prompts given as token ids (see :meth:`LLMBackend.generate_ids`)."""
        ids = [list(map(int, row)) for row in prompt_token_ids]
        if any(not row for row in ids):
            raise ConfigurationError("generate_ids needs a non-empty prompt for every row")
        texts = [self.tokenizer.decode(row) for row in ids]
        return self._generate_all(ids, texts, params)

    # ---- internals -----------------------------------------------------------------------
    def _generate_all(
        self, ids: list[list[int]], texts: list[str], params: SamplingParams
    ) -> list[Generation]:
        if self.model is None:
            raise BackendError("the transformers backend was closed")
        out: list[Generation] = []
        for start in range(0, len(ids), self.max_batch_size):
            end = start + self.max_batch_size
            out.extend(self._generate_batch(ids[start:end], texts[start:end], params))
        return out

    def _left_pad(self, ids: list[list[int]]) -> dict[str, Any]:
        torch = self._torch
        width = max(len(row) for row in ids)
        pad = int(self.tokenizer.pad_token_id)
        input_ids = torch.full((len(ids), width), pad, dtype=torch.long)
        attention = torch.zeros((len(ids), width), dtype=torch.long)
        for i, row in enumerate(ids):
            input_ids[i, width - len(row) :] = torch.tensor(row, dtype=torch.long)
            attention[i, width - len(row) :] = 1
        return {"input_ids": input_ids.to(self.device), "attention_mask": attention.to(self.device)}

    def _generate_batch(
        self, prompt_ids: list[list[int]], prompts: list[str], params: SamplingParams
    ) -> list[Generation]:
        torch = self._torch
        if not prompts:
            return []
        started = time.perf_counter()
        encoded = self._left_pad(prompt_ids)
        eos_ids = self._eos_ids()
        kwargs: dict[str, Any] = {
            "max_new_tokens": params.max_tokens,
            "return_dict_in_generate": True,
            "output_logits": params.logprobs,
            "pad_token_id": self.tokenizer.pad_token_id,
            "eos_token_id": eos_ids,
        }
        if params.temperature > 0:
            kwargs.update(do_sample=True, temperature=params.temperature, top_p=params.top_p)
            kwargs["top_k"] = params.top_k if params.top_k > 0 else None
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        if params.stop:
            kwargs["stopping_criteria"] = transformers_stop_criteria(
                self.tokenizer, params.stop, encoded["input_ids"].shape[1]
            )
        if params.seed is not None:
            torch.manual_seed(params.seed)
        try:
            with torch.inference_mode():
                result = self.model.generate(**encoded, **kwargs)
        except torch.OutOfMemoryError as exc:  # pragma: no cover - needs a small GPU
            raise BackendError(
                f"out of memory generating {len(prompts)} completions of up to "
                f"{params.max_tokens} tokens on {self.device}: lower the batch size "
                f"(max_batch_size={self.max_batch_size}) or max_tokens",
                retryable=True,
            ) from exc
        elapsed = time.perf_counter() - started
        prompt_len = encoded["input_ids"].shape[1]
        new_tokens = result.sequences[:, prompt_len:].tolist()
        logprob_rows = None
        if params.logprobs and result.logits:
            # Raw logits (before temperature / top-p): log-probs of the unprocessed policy.
            logits = torch.stack(result.logits, dim=1).float()
            logprobs = torch.log_softmax(logits, dim=-1)
            index = result.sequences[:, prompt_len:].unsqueeze(-1)
            logprob_rows = logprobs.gather(-1, index).squeeze(-1).tolist()
        generations = []
        for row, prompt in enumerate(prompts):
            tokens = new_tokens[row]
            finish = "length"
            cut = len(tokens)
            for i, token in enumerate(tokens):
                if token in eos_ids:
                    cut, finish = i + 1, "stop"
                    break
            if params.stop:
                # A row stopped by a stop string is padded afterwards (with the pad token, often
                # the EOS): keep only the tokens sampled up to the stop string.
                at_stop = self._stop_cut(tokens[:cut], params.stop)
                if at_stop is not None:
                    cut, finish = at_stop, "stop"
            tokens = tokens[:cut]
            text_tokens = [t for t in tokens if t not in eos_ids]
            text = self.tokenizer.decode(text_tokens, skip_special_tokens=True)
            if params.stop:
                text, _ = truncate_at_stop(text, params.stop)
            lps = logprob_rows[row][:cut] if logprob_rows is not None else None
            generations.append(
                Generation(
                    prompt=prompt,
                    text=text,
                    prompt_token_ids=list(prompt_ids[row]),
                    completion_token_ids=tokens,
                    completion_logprobs=lps,
                    finish_reason=finish,
                    gen_time_s=elapsed,
                )
            )
        return generations

    def _stop_cut(self, tokens: list[int], stop: tuple[str, ...]) -> int | None:
        """The number of leading tokens whose text first holds a stop string (``None``: none)."""
        full = self.tokenizer.decode(tokens, skip_special_tokens=True)
        if not any(s and s in full for s in stop):
            return None
        for n in range(1, len(tokens) + 1):
            text = self.tokenizer.decode(tokens[:n], skip_special_tokens=True)
            if any(s and s in text for s in stop):
                return n
        return None  # pragma: no cover - the full text holds one

    def _eos_ids(self) -> list[int]:
        ids = self.model.generation_config.eos_token_id
        if ids is None:
            ids = self.tokenizer.eos_token_id
        ids = ids if isinstance(ids, list) else [ids]
        return [int(i) for i in ids if i is not None]


def transformers_stop_criteria(tokenizer: Any, stop: tuple[str, ...], prompt_len: int) -> Any:
    """Stop a row once its NEW text holds a stop string.

    transformers' own ``stop_strings`` also match text that spans the end of the prompt (a
    prompt ending in a newline plus a completion starting with one matches a ``"\\n\\n"`` stop),
    which cuts completions short.
    """
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList

    longest = max(len(s) for s in stop)

    class _NewTextStop(StoppingCriteria):
        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
            done = []
            for row in input_ids[:, prompt_len:].tolist():
                # Only the tail can hold a stop string that was not there one token ago.
                tail = tokenizer.decode(row[-(longest + 8) :], skip_special_tokens=True)
                text = (
                    tokenizer.decode(row, skip_special_tokens=True) if len(tail) < longest else tail
                )
                done.append(any(s in text for s in stop))
            return torch.tensor(done, dtype=torch.bool, device=input_ids.device)

    return StoppingCriteriaList([_NewTextStop()])
