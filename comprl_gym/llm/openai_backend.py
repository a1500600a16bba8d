"""Client of any OpenAI-compatible server: ``vllm serve``, hosted APIs, our own test server.

Speaks plain HTTP+JSON with the standard library (no extra package). ``generate`` sends one
``/completions`` request with the whole batch of prompts; ``chat`` sends one
``/chat/completions`` request per conversation, several at once. Token ids and logprobs come
back when the server gives them: vLLM does with ``return_token_ids`` (sent by default; servers
that reject the field are retried once without it and remembered).

Errors are :class:`~comprl_gym.llm.base.BackendError` with the URL and what to check; timeouts,
429 and 5xx are retried with back-off (``max_retries``).

Example (needs a running server)::
    from comprl_gym.llm.openai_backend import OpenAIBackend
    backend = OpenAIBackend("http://127.0.0.1:8000/v1", model="smollm2")
    backend.chat([[{"role": "user", "content": "hi"}]], SamplingParams())
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from comprl_gym.core import ConfigurationError
from comprl_gym.llm.base import BackendError, Generation, LLMBackend, Message, SamplingParams
from comprl_gym.llm.models import resolve_model

logger = logging.getLogger(__name__)

#: Fields only vLLM-like servers understand; dropped after a server rejects them.
_VLLM_FIELDS = ("return_token_ids", "include_stop_str_in_output", "top_k", "seed")


class OpenAIBackend(LLMBackend):
    """An OpenAI-compatible HTTP endpoint behind the :class:`LLMBackend` interface.

    Args:
        base_url: the API root, e.g. ``http://127.0.0.1:8000/v1``.
        model: model name on the server; ``None`` takes the first of ``GET /models``.
        api_key: bearer token; defaults to ``$OPENAI_API_KEY`` (none for local servers).
        timeout_s: per-request timeout.
        max_retries: retries of timeouts, 429 and 5xx answers.
        max_concurrency: chat requests in flight at once.
        tokenizer: optional local tokenizer (folder or ``"smollm2"``) for exact chat templates
            and token counts; without it counts come from the server (``/tokenize``) or an estimate.
    """

    name = "openai"

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 2,
        max_concurrency: int = 8,
        tokenizer: str | None = None,
    ):
        if not base_url.startswith(("http://", "https://")):
            raise ConfigurationError(
                f"base_url must start with http:// or https://, got {base_url!r}"
            )
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.max_concurrency = max_concurrency
        self._vllm_fields = True
        self.tokenizer = None
        if tokenizer is not None:
            from transformers import AutoTokenizer

            self.tokenizer = AutoTokenizer.from_pretrained(str(resolve_model(tokenizer)))
        self.supports_raw_prompts = self.tokenizer is not None
        self.model_name = model or self._first_model()

    # ---- HTTP ----------------------------------------------------------------------------
    def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        url = self.base_url + path
        data = None if body is None else json.dumps(body).encode("utf-8")
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        delay = 0.5
        for attempt in range(self.max_retries + 1):
            request = urllib.request.Request(url, data=data, headers=headers, method=method)
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    payload = response.read()
                try:
                    return json.loads(payload)
                except json.JSONDecodeError as exc:
                    raise BackendError(
                        f"{url} answered with something that is not JSON: {payload[:200]!r}"
                    ) from exc
            except urllib.error.HTTPError as exc:
                detail = exc.read()[:500].decode("utf-8", errors="replace")
                if exc.code in (429, 500, 502, 503, 504) and attempt < self.max_retries:
                    logger.warning("%s answered %s; retrying in %.1f s", url, exc.code, delay)
                    time.sleep(delay)
                    delay *= 2
                    continue
                error = BackendError(
                    f"{url} answered HTTP {exc.code}: {detail}", retryable=exc.code >= 429
                )
                error.status = exc.code  # type: ignore[attr-defined]
                raise error from exc
            except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as exc:
                reason = getattr(exc, "reason", exc)
                if attempt < self.max_retries:
                    logger.warning("%s unreachable (%s); retrying in %.1f s", url, reason, delay)
                    time.sleep(delay)
                    delay *= 2
                    continue
                raise BackendError(
                    f"cannot reach the OpenAI-compatible server at {self.base_url} ({reason}); "
                    f"is it running, and is the URL right (it usually ends in /v1)?",
                    retryable=True,
                ) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _post_with_fallback(self, path: str, body: dict[str, Any]) -> Any:
        if not self._vllm_fields:
            body = {k: v for k, v in body.items() if k not in _VLLM_FIELDS}
        try:
            return self._request("POST", path, body)
        except BackendError as exc:
            if getattr(exc, "status", None) == 400 and self._vllm_fields:
                logger.info("server rejected vLLM-only fields; retrying without them")
                self._vllm_fields = False
                return self._request(
                    "POST", path, {k: v for k, v in body.items() if k not in _VLLM_FIELDS}
                )
            raise

    def _first_model(self) -> str:
        listing = self._request("GET", "/models")
        models = [m.get("id") for m in listing.get("data", []) if m.get("id")]
        if not models:
            raise BackendError(f"{self.base_url}/models lists no model; pass model=NAME")
        return models[0]

    # ---- interface -----------------------------------------------------------------------
    def _sampling_body(self, params: SamplingParams) -> dict[str, Any]:
        if params.allowed_token_ids is not None:
            # The OpenAI API has no such field (logit_bias is capped and ignored by some
            # servers): refusing is better than sampling tokens the caller excluded.
            raise ConfigurationError(
                "the openai backend cannot restrict sampling to allowed_token_ids; use the "
                "transformers or vllm backend"
            )
        body: dict[str, Any] = {
            "model": self.model_name,
            "max_tokens": params.max_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "return_token_ids": True,
            "include_stop_str_in_output": True,
        }
        if params.stop:
            body["stop"] = list(params.stop)[:4]  # the OpenAI API takes at most 4
        if params.top_k > 0:
            body["top_k"] = params.top_k
        if params.seed is not None:
            body["seed"] = params.seed
        return body

    def generate(self, prompts: list[str], params: SamplingParams) -> list[Generation]:
        if not prompts:
            return []
        if params.seeds is not None and len(prompts) > 1:
            # One seed per request: one request per prompt (a batched request has one seed).
            return [
                g
                for i, prompt in enumerate(prompts)
                for g in self.generate([prompt], replace(params, seed=params.seeds[i], seeds=None))
            ]
        started = time.perf_counter()
        body = self._sampling_body(params) | {"prompt": prompts}
        if params.logprobs:
            body["logprobs"] = 1
        response = self._post_with_fallback("/completions", body)
        elapsed = time.perf_counter() - started
        choices = sorted(response.get("choices", []), key=lambda c: c.get("index", 0))
        if len(choices) != len(prompts):
            raise BackendError(
                f"{self.base_url}/completions returned {len(choices)} choices for {len(prompts)} prompts"
            )
        out = []
        for prompt, choice in zip(prompts, choices):
            logprobs = (choice.get("logprobs") or {}).get("token_logprobs")
            out.append(
                self._generation(
                    prompt, choice, choice.get("text") or "", logprobs, params, elapsed
                )
            )
        return out

    def chat(self, conversations: list[list[Message]], params: SamplingParams) -> list[Generation]:
        if not conversations:
            return []
        started = time.perf_counter()

        def one(index: int, messages: list[Message]) -> dict[str, Any]:
            body = self._sampling_body(params) | {"messages": messages}
            if params.request_seed(index) is not None:
                body["seed"] = params.request_seed(index)
            if params.logprobs:
                body["logprobs"] = True
            return self._post_with_fallback("/chat/completions", body)

        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(conversations))) as pool:
            responses = list(pool.map(one, range(len(conversations)), conversations))
        elapsed = time.perf_counter() - started
        out = []
        for messages, response in zip(conversations, responses):
            choices = response.get("choices") or []
            if not choices:
                raise BackendError(f"{self.base_url}/chat/completions returned no choices")
            choice = choices[0]
            if "prompt_token_ids" not in choice and response.get("prompt_token_ids"):
                choice["prompt_token_ids"] = response["prompt_token_ids"]
            content = (choice.get("message") or {}).get("content") or ""
            content_logprobs = (choice.get("logprobs") or {}).get("content")
            logprobs = [e.get("logprob") for e in content_logprobs] if content_logprobs else None
            prompt = self.apply_chat_template(messages)
            out.append(self._generation(prompt, choice, content, logprobs, params, elapsed))
        return out

    def _generation(
        self,
        prompt: str,
        choice: dict[str, Any],
        text: str,
        logprobs: list[float | None] | None,
        params: SamplingParams,
        elapsed: float,
    ) -> Generation:
        token_ids = choice.get("token_ids") or []
        if logprobs is not None:
            logprobs = [float(x) if x is not None else -math.inf for x in logprobs]
            if token_ids and len(logprobs) != len(token_ids):
                logprobs = None  # a server that mixes conventions: better none than misaligned
        return Generation(
            prompt=prompt,
            text=text,
            prompt_token_ids=list(choice.get("prompt_token_ids") or []),
            completion_token_ids=list(token_ids),
            completion_logprobs=logprobs if params.logprobs else None,
            finish_reason="length" if choice.get("finish_reason") == "length" else "stop",
            gen_time_s=elapsed,
            extra={"usage_estimated": not token_ids},
        )

    def apply_chat_template(
        self, messages: list[Message], add_generation_prompt: bool = True
    ) -> str:
        if self.tokenizer is not None:
            return self.tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=add_generation_prompt
            )
        # The server applies its own template; this rendering is for records only.
        text = "".join(f"<|{m['role']}|>\n{m['content']}\n" for m in messages)
        return text + ("<|assistant|>\n" if add_generation_prompt else "")

    def count_tokens(self, text: str) -> int:
        if self.tokenizer is not None:
            return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        return max(1, math.ceil(len(text) / 4))  # the usual ~4 characters per token estimate
