"""Shared fixtures: where the official benchmark data lives, offline settings."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from comprl_gym.llm.base import Generation

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO_ROOT = Path(__file__).resolve().parents[1]


def shared_data_dir() -> Path:
    """``../shared/data`` beside the checkout (CI lays it there), or ``$COMPRL_SHARED_DATA``."""
    candidates = [os.environ.get("COMPRL_SHARED_DATA"), REPO_ROOT.parent / "shared" / "data"]
    for candidate in candidates:
        if candidate and Path(candidate).is_dir():
            return Path(candidate)
    raise FileNotFoundError(
        "official benchmark data not found: expected ../shared/data beside the checkout "
        "or COMPRL_SHARED_DATA pointing at it"
    )


def require_sandbox(kind: str) -> None:
    """Fail clearly when a Docker test finds no engine (skip only where COMPRL_NO_DOCKER=1)."""
    from comprl_gym.envs.swebench.sandbox.docker import docker_available

    if kind != "docker" or docker_available():
        return
    if os.environ.get("COMPRL_NO_DOCKER") == "1":
        pytest.skip("COMPRL_NO_DOCKER=1: this machine has no Docker engine")
    pytest.fail(
        "no Docker engine answers: start one with `bash scripts/services.sh start`, "
        "or set COMPRL_NO_DOCKER=1 on a machine without Docker"
    )


@pytest.fixture(scope="session")
def shared_data() -> Path:
    return shared_data_dir()


def teacher_forced_logprobs(model, prompt_ids: list[int], completion: list[int]) -> list[float]:
    """log p(token | prefix) of each completion token under a Hugging Face causal LM."""
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([prompt_ids + completion])).logits[0].float()
    logprobs = torch.log_softmax(logits, dim=-1)
    return [float(logprobs[len(prompt_ids) - 1 + i, t]) for i, t in enumerate(completion)]


def assert_model_logprobs(backend, model, generations, max_tokens: int) -> None:
    """Each generation keeps its prompt's token ids and carries ``model``'s own logprobs.

    The engine's logprobs must be those of the raw model, as a trainer recomputes them
    (5e-3: float32 engine kernels against the Hugging Face forward).
    """
    import pytest

    for gen in generations:
        prompt_ids = backend.tokenizer(gen.prompt, add_special_tokens=False)["input_ids"]
        assert gen.prompt_token_ids == prompt_ids
        assert 1 <= len(gen.completion_token_ids) == len(gen.completion_logprobs) <= max_tokens
        expected = teacher_forced_logprobs(model, gen.prompt_token_ids, gen.completion_token_ids)
        assert gen.completion_logprobs == pytest.approx(expected, abs=5e-3)


class ScriptedBackend:
    """Answers every chat with the next text of ``answers`` (token ids: one per character)."""

    def __init__(self, answers: list[str]):
        self.answers = list(answers)
        self.prompts: list[list[dict[str, str]]] = []

    def chat(self, conversations, params):
        out = []
        for messages in conversations:
            self.prompts.append(messages)
            text = self.answers.pop(0)
            ids = [ord(c) % 200 for c in text][:32] or [1]
            out.append(Generation("p", text, [1, 2, 3], ids, [-0.1] * len(ids), "stop"))
        return out


def ray_session_processes(session_dir: str) -> list:
    """The processes of one Ray session (other Ray clusters on this machine are not ours)."""
    import psutil

    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if session_dir in " ".join(proc.info["cmdline"] or []):
            found.append(proc)
    return found


def assert_listens_on_loopback_only(pids: set[int]) -> None:
    """Every listening socket of ``pids`` is bound to a loopback address (and there is one)."""
    import ipaddress

    import psutil

    addresses = {
        c.laddr.ip
        for c in psutil.net_connections("inet")
        if c.status == psutil.CONN_LISTEN and c.pid in pids
    }
    assert addresses, "no listening socket found: the check would prove nothing"
    for address in addresses:
        ip = ipaddress.ip_address(address)
        assert (getattr(ip, "ipv4_mapped", None) or ip).is_loopback, f"listens on {address}"


@pytest.fixture
def one_torch_thread():
    """torch on one thread for the test. The box is shared: one torch thread is far faster
    than two under contention."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
