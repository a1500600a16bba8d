"""The embedded default backend: a Hugging Face causal LM in this process, CPU or GPU.

The backend owns a torch model and its tokenizer and exposes both (:attr:`model`,
:attr:`tokenizer`) so a trainer can optimise the very weights that generate rollouts: after
an optimiser step the next :meth:`generate` samples from the new policy, no sync needed.

Shared-prefix reuse: the keys and values of each finished sequence (prompt + completion) are
kept (:class:`PrefixKVCache`, bounded by ``prefix_cache_tokens``), so a multi-turn prompt that
extends an earlier prompt and reply, or shares a system prompt with another episode,
re-encodes only what is new. The cached rows of a batch are left-padded into one cache and
the new tokens follow their own padding; positions come from the attention mask, so every
token sees what it would without the cache. Any in-place change of the weights (an optimiser
step, :meth:`TransformersBackend.update_weights`) empties the cache.

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
from collections import OrderedDict
from dataclasses import replace
from typing import Any

import numpy as np

from comprl_gym.core import ConfigurationError, require
from comprl_gym.llm.base import (
    BackendError,
    Generation,
    LLMBackend,
    SamplingParams,
    truncate_at_stop,
)
from comprl_gym.llm.devices import module_device, resolve_dtype, resolve_placement
from comprl_gym.llm.models import resolve_model

logger = logging.getLogger(__name__)


class PrefixKVCache:
    """Per-layer keys and values of finished token sequences, looked up by longest common prefix.

    Entries are ``(ids, [(keys, values) per layer])`` with tensors of shape ``(heads, len(ids),
    head_dim)``; the oldest go when more than ``max_tokens`` positions are held, and an entry
    whose ids start a newer one is dropped (the newer one covers it).

    Example:
        >>> import torch
        >>> cache = PrefixKVCache(max_tokens=100)
        >>> cache.put([1, 2, 3], [(torch.zeros(1, 3, 2), torch.ones(1, 3, 2))])
        >>> length, layers = cache.lookup([1, 2, 9, 9])
        >>> length, tuple(layers[0][0].shape)
        (2, (1, 2, 2))
        >>> cache.lookup([1, 2, 3])[0]  # at least one token is left to encode
        2
    """

    def __init__(self, max_tokens: int):
        self.max_tokens = max_tokens
        self.entries: OrderedDict[tuple[int, ...], tuple[np.ndarray, list[tuple[Any, Any]]]] = (
            OrderedDict()
        )
        self.tokens = 0

    def clear(self) -> None:
        self.entries.clear()
        self.tokens = 0

    def lookup(self, ids: list[int]) -> tuple[int, list[tuple[Any, Any]] | None]:
        """The longest cached prefix of ``ids`` (leaving its last token) and its layers, sliced."""
        wanted = np.asarray(ids, dtype=np.int64)
        best, best_key = 0, None
        for key, (stored, _) in self.entries.items():
            n = min(len(stored), len(wanted) - 1)
            if n <= best:
                continue
            differ = np.flatnonzero(stored[:n] != wanted[:n])
            common = int(differ[0]) if differ.size else n
            if common > best:
                best, best_key = common, key
        if best_key is None:
            return 0, None
        self.entries.move_to_end(best_key)
        layers = self.entries[best_key][1]
        return best, [(k[:, :best], v[:, :best]) for k, v in layers]

    def put(self, ids: list[int], layers: list[tuple[Any, Any]]) -> None:
        key = tuple(ids)
        if not key or len(key) > self.max_tokens:
            return
        for old in [k for k in self.entries if len(k) <= len(key) and key[: len(k)] == k]:
            self.tokens -= len(old)
            del self.entries[old]
        self.entries[key] = (np.asarray(ids, dtype=np.int64), layers)
        self.tokens += len(key)
        while self.tokens > self.max_tokens:
            old, _ = self.entries.popitem(last=False)
            self.tokens -= len(old)


class TransformersBackend(LLMBackend):
    """Generate with ``transformers`` ``model.generate`` in batches, left-padded.

    Args:
        model: a model folder, or ``"smollm2"`` (the default) / ``"tiny"``.
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"auto"`` or a ``torch.device``; ``None``
            is ``auto`` (CUDA when present) for a model loaded here, and the model's own
            device for ``model_object`` (kept as the very object given, when one is given).
        dtype: ``float32`` / ``bfloat16`` / ``auto`` (float32 on CPU, bfloat16 on GPU): the
            dtype the model is loaded in, or for ``model_object`` the one generation computes
            in (under autocast when it is below the weights' float32).
        max_batch_size: prompts per forward pass; bigger batches are split.
        model_object / tokenizer_object: use an already-loaded model and tokenizer instead
            (a trainer's: the backend follows the model's device, never moves it).
        prefix_cache_tokens: token positions whose keys and values are kept for shared-prefix
            reuse (0 turns reuse off).
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
        prefix_cache_tokens: int = 32768,
    ):
        torch = require("torch", "the transformers backend", "llm")
        transformers = require("transformers", "the transformers backend", "llm")
        self._torch = torch
        self.max_batch_size = max_batch_size
        if model_object is not None:
            own = module_device(model_object)
            if device is None:
                device = own
            elif resolve_placement(device).device != own:
                raise ConfigurationError(
                    f"the transformers backend was asked for device {device!s} but its model "
                    f"sits on {own}: build it with the model's own device"
                )
            self.device = device if isinstance(device, torch.device) else own
            #: The dtype generation computes in (autocast below the weights' own).
            self.compute_dtype = resolve_dtype(dtype or "float32", self.device)
            self.model = model_object
            self.tokenizer = tokenizer_object
            self.model_name = str(getattr(model_object, "name_or_path", "custom"))
        else:
            placement = resolve_placement(device or "auto", dtype or "auto", "backend")
            self.device = placement.device
            self.compute_dtype = placement.dtype
            path = resolve_model(model)
            self.model_name = str(path)
            self.tokenizer = transformers.AutoTokenizer.from_pretrained(str(path))
            try:
                self.model = transformers.AutoModelForCausalLM.from_pretrained(
                    str(path), dtype=placement.dtype
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
        self.prefix_cache = PrefixKVCache(prefix_cache_tokens) if prefix_cache_tokens > 0 else None
        self._weights_seen: int | None = None

    # ---- interface -----------------------------------------------------------------------
    def update_weights(self, state_dict: Any) -> None:
        """Copy ``state_dict`` (a mapping, or ``(name, tensor)`` pairs such as a trainer's
        :class:`~comprl_gym.trainers.policy.WeightStream`, copied one at a time) into the model;
        a partial set (e.g. trained layers only) is fine, but a name the model does not have is
        an error (it would silently change nothing).
        """
        pairs = state_dict.items() if hasattr(state_dict, "items") else state_dict
        targets = self.model.state_dict(keep_vars=True)
        unknown = []
        with self._torch.no_grad():
            for name, tensor in pairs:
                if name in targets:
                    targets[name].copy_(tensor)
                else:
                    unknown.append(name)
        if unknown:
            raise ConfigurationError(
                f"update_weights got {len(unknown)} parameter name(s) the model does "
                f"not have, e.g. {unknown[:3]}; use Hugging Face parameter names"
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
        if params.seeds is not None:
            # One torch draw serves a whole batch, so per-request seeds mean one row at a time.
            for i, row in enumerate(ids):
                one = replace(params, seed=params.seeds[i], seeds=None)
                out.extend(self._generate_batch([row], [texts[i]], one))
            return out
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
        encoded, past, cached = self._encode(prompt_ids)
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
        if params.allowed_token_ids is not None:
            allowed = list(params.allowed_token_ids)
            kwargs["prefix_allowed_tokens_fn"] = lambda _row, _ids: allowed
        if params.seed is not None:
            torch.manual_seed(params.seed)
        autocast = torch.autocast(
            self.device.type,
            dtype=self.compute_dtype,
            enabled=self.compute_dtype != torch.float32
            and any(p.dtype != self.compute_dtype for p in self.model.parameters()),
        )
        try:
            with torch.inference_mode(), autocast:
                result = self.model.generate(**encoded, past_key_values=past, **kwargs)
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
        kept_rows: list[tuple[list[int], list[int]]] = []
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
            kept_rows.append((list(prompt_ids[row]), tokens))
            generations.append(
                Generation(
                    prompt=prompt,
                    text=text,
                    prompt_token_ids=list(prompt_ids[row]),
                    completion_token_ids=tokens,
                    completion_logprobs=lps,
                    finish_reason=finish,
                    gen_time_s=elapsed,
                    extra={"cached_prompt_tokens": cached[row]},
                )
            )
        self._keep_prefixes(result.past_key_values, encoded["attention_mask"], kept_rows)
        return generations

    # ---- shared-prefix reuse ---------------------------------------------------------------
    def _weights_version(self) -> int:
        """Grows whenever a parameter is changed in place (optimiser step, load_state_dict)."""
        return sum(p._version for p in self.model.parameters())

    def _encode(self, ids: list[list[int]]) -> tuple[dict[str, Any], Any, list[int]]:
        """Inputs for ``generate``: ``(encoded, past_key_values or None, cached length per row)``.

        With cached prefixes, row ``i`` is laid out as ``[pad][cached c_i][pad][new n_i]``: the
        first ``max(c)`` columns live in the cache, the rest are encoded now.
        """
        if self.prefix_cache is None:
            return self._left_pad(ids), None, [0] * len(ids)
        version = self._weights_version()
        if version != self._weights_seen:
            self.prefix_cache.clear()
            self._weights_seen = version
        hits = [self.prefix_cache.lookup(row) for row in ids]
        cached_width = max(length for length, _ in hits)
        if cached_width == 0:
            return self._left_pad(ids), None, [0] * len(ids)
        torch = self._torch
        transformers = require("transformers", "the transformers backend", "llm")
        new_width = max(len(row) - length for row, (length, _) in zip(ids, hits))
        pad = int(self.tokenizer.pad_token_id)
        width = cached_width + new_width
        input_ids = torch.full((len(ids), width), pad, dtype=torch.long)
        attention = torch.zeros((len(ids), width), dtype=torch.long)
        n_layers = len(next(layers for _, layers in hits if layers is not None))
        keys: list[Any] = [None] * n_layers
        values: list[Any] = [None] * n_layers
        for i, (row, (length, layers)) in enumerate(zip(ids, hits)):
            start = cached_width - length
            input_ids[i, start:cached_width] = torch.tensor(row[:length], dtype=torch.long)
            attention[i, start:cached_width] = 1
            fresh = row[length:]
            input_ids[i, width - len(fresh) :] = torch.tensor(fresh, dtype=torch.long)
            attention[i, width - len(fresh) :] = 1
            if layers is None:
                continue
            for layer, (k, v) in enumerate(layers):
                if keys[layer] is None:
                    shape = (len(ids), k.shape[0], cached_width, k.shape[2])
                    keys[layer] = torch.zeros(shape, dtype=k.dtype, device=k.device)
                    values[layer] = torch.zeros(shape, dtype=v.dtype, device=v.device)
                keys[layer][i, :, start:] = k
                values[layer][i, :, start:] = v
        past = transformers.DynamicCache(config=self.model.config)
        for layer in range(n_layers):
            past.update(keys[layer], values[layer], layer)
        encoded = {
            "input_ids": input_ids.to(self.device),
            "attention_mask": attention.to(self.device),
        }
        return encoded, past, [length for length, _ in hits]

    def _keep_prefixes(
        self, past: Any, prompt_mask: Any, rows: list[tuple[list[int], list[int]]]
    ) -> None:
        """Store each row's prompt + completion (all but the last token, whose keys and values
        were never computed) from the batch's cache."""
        if self.prefix_cache is None or past is None:
            return
        torch = self._torch
        layers = [(layer.keys, layer.values) for layer in past.layers]
        width = prompt_mask.shape[1]
        for i, (prompt, completion) in enumerate(rows):
            positions = torch.cat(
                [
                    torch.nonzero(prompt_mask[i]).reshape(-1),
                    torch.arange(width, width + len(completion) - 1, device=prompt_mask.device),
                ]
            )
            if positions.numel() == 0 or int(positions[-1]) >= layers[0][0].shape[2]:
                continue
            self.prefix_cache.put(
                (prompt + completion)[: positions.numel()],
                [(k[i][:, positions].clone(), v[i][:, positions].clone()) for k, v in layers],
            )
        self._weights_seen = self._weights_version()

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
