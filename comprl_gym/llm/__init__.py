"""LLM backends with one interface: transformers (embedded), vLLM, OpenAI-compatible HTTP.

Backends import their heavy dependencies lazily, so ``import comprl_gym.llm`` is cheap.

Example:
    >>> from comprl_gym.llm import make_backend, SamplingParams
    >>> backend = make_backend("hf:tiny")
    >>> backend.name
    'transformers'
"""

from __future__ import annotations

from typing import Any

from comprl_gym.llm.base import BackendError, Generation, LLMBackend, Message, SamplingParams

__all__ = [
    "BackendError",
    "Generation",
    "LLMBackend",
    "Message",
    "OpenAIBackend",
    "SamplingParams",
    "TransformersBackend",
    "VLLMBackend",
    "make_backend",
]


def __getattr__(name: str) -> Any:
    if name == "TransformersBackend":
        from comprl_gym.llm.transformers_backend import TransformersBackend

        return TransformersBackend
    if name == "VLLMBackend":
        from comprl_gym.llm.vllm_backend import VLLMBackend

        return VLLMBackend
    if name == "OpenAIBackend":
        from comprl_gym.llm.openai_backend import OpenAIBackend

        return OpenAIBackend
    raise AttributeError(name)


#: THE list of backend kinds a ``KIND:MODEL`` spec may name, and the engine each one builds
#: (``llm`` and ``transformers`` are aliases of ``hf``). Agent specs, evaluation and the CLI
#: read it here.
BACKEND_KINDS: dict[str, str] = {
    "hf": "transformers",
    "llm": "transformers",
    "transformers": "transformers",
    "vllm": "vllm",
    "openai": "openai",
}


def make_backend(spec: str, **kwargs: Any) -> LLMBackend:
    """Build a backend from ``KIND:MODEL``.

    * ``hf:smollm2``, ``hf:tiny``, ``hf:/path/to/folder`` — :class:`TransformersBackend`
      (``llm:`` is an alias of ``hf:``);
    * ``vllm:smollm2``, ``vllm:/path`` — :class:`VLLMBackend`;
    * ``openai:http://127.0.0.1:8000/v1#MODEL`` — :class:`OpenAIBackend` (``#MODEL`` optional:
      the server's first model is used; the key comes from ``OPENAI_API_KEY``).
    """
    from comprl_gym.core import ConfigurationError

    kind, sep, rest = spec.partition(":")
    if not sep:
        raise ConfigurationError(
            f"backend spec {spec!r} must look like hf:MODEL, vllm:MODEL or openai:URL#MODEL"
        )
    engine = BACKEND_KINDS.get(kind)
    if engine == "transformers":
        from comprl_gym.llm.transformers_backend import TransformersBackend

        return TransformersBackend(rest or "smollm2", **kwargs)
    if engine == "vllm":
        from comprl_gym.llm.vllm_backend import VLLMBackend

        return VLLMBackend(rest or "smollm2", **kwargs)
    if engine == "openai":
        from comprl_gym.llm.openai_backend import OpenAIBackend

        url, _, model = rest.partition("#")
        return OpenAIBackend(url, model=model or None, **kwargs)
    raise ConfigurationError(
        f"unknown backend kind {kind!r} in {spec!r}: use one of {sorted(BACKEND_KINDS)}"
    )
