"""A small OpenAI-compatible HTTP server around any :class:`LLMBackend`.

Serves ``GET /v1/models``, ``POST /v1/completions`` and ``POST /v1/chat/completions`` with the
fields vLLM adds (``token_ids``, ``prompt_token_ids``, ``logprobs``), so tools written for an
OpenAI endpoint can use the embedded model, and so :class:`OpenAIBackend` is tested over real
HTTP without a GPU. Requests are served one at a time (the model is not thread-safe).

Example:
    >>> from comprl_gym.llm import TransformersBackend
    >>> from comprl_gym.llm.openai_backend import OpenAIBackend
    >>> with OpenAIServer(TransformersBackend("tiny"), model_name="tiny") as server:
    ...     client = OpenAIBackend(server.url)
    ...     client.model_name
    'tiny'
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from comprl_gym.llm.base import Generation, LLMBackend, SamplingParams

logger = logging.getLogger(__name__)


def _params(body: dict[str, Any]) -> SamplingParams:
    stop = body.get("stop") or ()
    return SamplingParams(
        max_tokens=int(body.get("max_tokens") or 16),
        temperature=float(body.get("temperature", 1.0)),
        top_p=float(body.get("top_p", 1.0)),
        top_k=max(0, int(body.get("top_k") or 0)),
        stop=(stop,) if isinstance(stop, str) else tuple(stop),
        logprobs=bool(body.get("logprobs")),
        seed=body.get("seed"),
    )


def _strip_stop(text: str, params: SamplingParams, keep: bool) -> str:
    if keep:
        return text
    for s in params.stop:
        if s and text.endswith(s):
            return text[: -len(s)]
    return text


class OpenAIServer:
    """Run ``backend`` behind an OpenAI-compatible API on ``host:port`` (0 = any free port)."""

    def __init__(
        self, backend: LLMBackend, model_name: str = "local", host: str = "127.0.0.1", port: int = 0
    ):
        self.backend = backend
        self.model_name = model_name
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, fmt: str, *args: Any) -> None:
                logger.debug("openai server: " + fmt, *args)

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode("utf-8")
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                if self.path.rstrip("/") == "/v1/models":
                    self._send(
                        200,
                        {"object": "list", "data": [{"id": server.model_name, "object": "model"}]},
                    )
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:  # noqa: N802
                try:
                    length = int(self.headers.get("Content-Length") or 0)
                    body = json.loads(self.rfile.read(length) or b"{}")
                    if self.path == "/v1/completions":
                        self._send(200, server.complete(body))
                    elif self.path == "/v1/chat/completions":
                        self._send(200, server.chat(body))
                    else:
                        self._send(404, {"error": {"message": f"no route {self.path}"}})
                except (ValueError, KeyError, TypeError) as exc:
                    self._send(400, {"error": {"message": f"bad request: {exc}"}})
                except Exception as exc:  # the server must answer, not hang the client
                    logger.exception("openai server failed")
                    self._send(500, {"error": {"message": str(exc)}})

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> OpenAIServer:
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> OpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- endpoints -----------------------------------------------------------------------
    def _generate(self, prompts: list[str], params: SamplingParams) -> list[Generation]:
        with self._lock:
            return self.backend.generate(prompts, params)

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        prompts = body["prompt"]
        prompts = [prompts] if isinstance(prompts, str) else list(prompts)
        params = _params(body)
        keep = bool(body.get("include_stop_str_in_output"))
        gens = self._generate(prompts, params)
        choices = []
        for i, gen in enumerate(gens):
            choice: dict[str, Any] = {
                "index": i,
                "text": _strip_stop(gen.text, params, keep),
                "finish_reason": gen.finish_reason,
                "logprobs": None,
            }
            if params.logprobs and gen.completion_logprobs is not None:
                choice["logprobs"] = {
                    "tokens": [
                        self.backend.tokenizer.decode([t]) for t in gen.completion_token_ids
                    ],
                    "token_logprobs": gen.completion_logprobs,
                }
            if body.get("return_token_ids"):
                choice["token_ids"] = gen.completion_token_ids
                choice["prompt_token_ids"] = gen.prompt_token_ids
            choices.append(choice)
        return self._envelope("text_completion", choices, gens)

    def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        params = _params(body)
        prompt = self.backend.apply_chat_template(body["messages"])
        [gen] = self._generate([prompt], params)
        keep = bool(body.get("include_stop_str_in_output"))
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": _strip_stop(gen.text, params, keep)},
            "finish_reason": gen.finish_reason,
            "logprobs": None,
        }
        if params.logprobs and gen.completion_logprobs is not None:
            choice["logprobs"] = {
                "content": [
                    {"token": self.backend.tokenizer.decode([t]), "logprob": lp}
                    for t, lp in zip(gen.completion_token_ids, gen.completion_logprobs)
                ]
            }
        if body.get("return_token_ids"):
            choice["token_ids"] = gen.completion_token_ids
        response = self._envelope("chat.completion", [choice], [gen])
        if body.get("return_token_ids"):
            response["prompt_token_ids"] = gen.prompt_token_ids
        return response

    def _envelope(
        self, kind: str, choices: list[dict[str, Any]], gens: list[Generation]
    ) -> dict[str, Any]:
        prompt_tokens = sum(g.num_prompt_tokens for g in gens)
        completion_tokens = sum(g.num_completion_tokens for g in gens)
        return {
            "id": f"cmpl-{uuid.uuid4().hex[:12]}",
            "object": kind,
            "created": int(time.time()),
            "model": self.model_name,
            "choices": choices,
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
