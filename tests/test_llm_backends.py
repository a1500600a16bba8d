"""The transformers backend and the OpenAI-compatible client, against real models and HTTP."""

from __future__ import annotations

import dataclasses
import http.server
import threading

import pytest
import torch
from conftest import teacher_forced_logprobs

from comprl_gym.core import ConfigurationError
from comprl_gym.llm import BackendError, SamplingParams, make_backend
from comprl_gym.llm.models import resolve_model, tiny_model_path
from comprl_gym.llm.openai_backend import OpenAIBackend
from comprl_gym.llm.openai_server import OpenAIServer
from comprl_gym.llm.transformers_backend import TransformersBackend

PROMPTS = ["go north and take the key", "You are in the middle of a room", "click[buy now]"]


@pytest.fixture(scope="module")
def tiny() -> TransformersBackend:
    return TransformersBackend("tiny")


def test_tiny_model_is_deterministic_and_cached():
    assert resolve_model("tiny") == tiny_model_path()
    assert (tiny_model_path() / "tokenizer.json").exists()
    with pytest.raises(Exception, match="no model folder"):
        resolve_model("/nonexistent/model")


def test_batched_generation_logprobs_match_a_teacher_forced_forward_pass(tiny):
    """The logprobs a trainer compares against: log p(token | prefix) of the raw model."""
    gens = tiny.generate(PROMPTS, SamplingParams(max_tokens=6, temperature=1.0, seed=3))
    assert len(gens) == 3
    for gen in gens:
        assert (
            gen.prompt_token_ids
            == tiny.tokenizer(gen.prompt, add_special_tokens=False)["input_ids"]
        )
        assert 1 <= len(gen.completion_token_ids) == len(gen.completion_logprobs) <= 6
        expected = teacher_forced_logprobs(
            tiny.model, gen.prompt_token_ids, gen.completion_token_ids
        )
        assert gen.completion_logprobs == pytest.approx(expected, abs=2e-4)


def test_greedy_is_reproducible_and_batch_independent(tiny):
    params = SamplingParams(max_tokens=5, temperature=0)
    alone = tiny.generate(PROMPTS[:1], params)[0]
    batched = tiny.generate(PROMPTS, params)[0]
    assert alone.completion_token_ids == batched.completion_token_ids
    assert alone.text == batched.text


def test_stop_string_ends_the_completion(tiny):
    prompt = tiny.apply_chat_template([{"role": "user", "content": "hello"}])
    free = tiny.generate([prompt], SamplingParams(max_tokens=12, temperature=0))[0]
    assert len(free.text) > 5, "the tiny model should produce some text"
    stop = free.text[3:5]
    stopped = tiny.generate([prompt], SamplingParams(max_tokens=12, temperature=0, stop=(stop,)))[0]
    assert stopped.text == free.text[: free.text.index(stop) + len(stop)]
    assert stopped.finish_reason == "stop"
    assert len(stopped.completion_token_ids) <= len(free.completion_token_ids)


def test_chat_template_and_token_counts(tiny):
    prompt = tiny.apply_chat_template([{"role": "user", "content": "hi"}])
    assert prompt == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert tiny.count_tokens(prompt) == len(
        tiny.tokenizer(prompt, add_special_tokens=False)["input_ids"]
    )
    [gen] = tiny.chat([[{"role": "user", "content": "hi"}]], SamplingParams(max_tokens=2))
    assert gen.prompt == prompt


def test_update_weights_changes_the_policy():
    backend = TransformersBackend("tiny")
    params = SamplingParams(max_tokens=4, temperature=0)
    before = backend.generate(["hello"], params)[0]
    state = {k: v + 0.3 * torch.randn_like(v) for k, v in backend.model.state_dict().items()}
    backend.update_weights(state)
    after = backend.generate(["hello"], params)[0]
    assert before.completion_logprobs != pytest.approx(after.completion_logprobs, abs=1e-3)
    with pytest.raises(ValueError, match="parameter name"):
        backend.update_weights({"not.a.weight": torch.zeros(1)})


def test_sampling_params_validation():
    with pytest.raises(ValueError):
        SamplingParams(max_tokens=0)
    with pytest.raises(ValueError):
        SamplingParams(temperature=-1)
    assert SamplingParams(stop="x").stop == ("x",)


def test_allowed_token_ids_restrict_sampling_and_keep_the_models_logprobs(tiny):
    """Only the allowed tokens are sampled, each prompt's draws vary between them, and the
    logprobs stay the raw model's (a trainer recomputes those, not the restricted ones)."""
    allowed = tuple(
        tiny.tokenizer(w, add_special_tokens=False)["input_ids"][0] for w in (" east", " west")
    )
    params = SamplingParams(max_tokens=4, temperature=1.0, seed=5, allowed_token_ids=allowed)
    gens = tiny.generate(PROMPTS * 3, params)
    drawn = [t for g in gens for t in g.completion_token_ids]
    assert len(drawn) == 4 * len(gens) and set(drawn) == set(allowed)
    for gen in gens:
        expected = teacher_forced_logprobs(
            tiny.model, gen.prompt_token_ids, gen.completion_token_ids
        )
        assert gen.completion_logprobs == pytest.approx(expected, abs=2e-4)
    with pytest.raises(ConfigurationError, match="empty"):
        SamplingParams(allowed_token_ids=())


# ---- OpenAI-compatible client against a real HTTP server (our in-process one) --------------
@pytest.fixture(scope="module")
def server(tiny):
    with OpenAIServer(tiny, model_name="tiny-qwen2") as srv:
        yield srv


def test_openai_completions_match_the_served_model(server, tiny):
    client = OpenAIBackend(server.url)
    assert client.model_name == "tiny-qwen2"  # taken from GET /models
    params = SamplingParams(max_tokens=5, temperature=0)
    remote = client.generate(PROMPTS, params)
    local = tiny.generate(PROMPTS, params)
    for r, loc in zip(remote, local):
        assert r.completion_token_ids == loc.completion_token_ids
        assert r.prompt_token_ids == loc.prompt_token_ids
        assert r.completion_logprobs == pytest.approx(loc.completion_logprobs, abs=1e-5)
        assert r.text == loc.text


def test_openai_backend_refuses_allowed_token_ids_rather_than_ignore_them(server, tiny):
    client = OpenAIBackend(server.url)
    with pytest.raises(ConfigurationError, match="allowed_token_ids"):
        client.generate(PROMPTS[:1], SamplingParams(max_tokens=1, allowed_token_ids=(5, 6)))


def test_openai_chat_returns_tokens_and_logprobs(server, tiny):
    client = OpenAIBackend(server.url, model="tiny-qwen2")
    conversations = [[{"role": "user", "content": c}] for c in PROMPTS]
    gens = client.chat(conversations, SamplingParams(max_tokens=4, temperature=0))
    for conv, gen in zip(conversations, gens):
        assert (
            gen.prompt_token_ids
            == tiny.tokenizer(tiny.apply_chat_template(conv), add_special_tokens=False)["input_ids"]
        )
        assert len(gen.completion_logprobs) == len(gen.completion_token_ids) >= 1
    assert not client.supports_raw_prompts  # no local tokenizer: the server's template is unknown
    assert OpenAIBackend(server.url, tokenizer="tiny").supports_raw_prompts


def test_make_backend_spec_for_openai(server):
    backend = make_backend(f"openai:{server.url}#tiny-qwen2")
    assert backend.name == "openai" and backend.model_name == "tiny-qwen2"


def test_unreachable_server_gives_a_clear_error():
    with pytest.raises(
        BackendError, match="cannot reach the OpenAI-compatible server.*is it running"
    ):
        OpenAIBackend("http://127.0.0.1:9/v1", model="m", max_retries=0).generate(
            ["x"], SamplingParams()
        )


class _GarbageHandler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):  # noqa: N802
        self.do_POST()

    def do_POST(self):  # noqa: N802
        body = b"<html>502 proxy says no</html>"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_a_server_answering_garbage_gives_a_clear_error():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _GarbageHandler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        client = OpenAIBackend(
            f"http://127.0.0.1:{httpd.server_address[1]}/v1", model="m", max_retries=0
        )
        with pytest.raises(BackendError, match="not JSON"):
            client.generate(["x"], SamplingParams())
    finally:
        httpd.shutdown()
        httpd.server_close()


# ---- token-in/token-out ------------------------------------------------------------------------
def test_generate_ids_keeps_the_given_prompt_ids_and_matches_text_generation(tiny):
    params = SamplingParams(max_tokens=5, temperature=0)
    from_text = tiny.generate(PROMPTS, params)
    ids = [tiny.tokenizer(p, add_special_tokens=False)["input_ids"] for p in PROMPTS]
    # A prompt that re-tokenising its text would not give back (two tokens spelling one).
    whole = ids[0]
    odd = [
        i for ch in PROMPTS[0] for i in tiny.tokenizer(ch, add_special_tokens=False)["input_ids"]
    ]
    assert odd != whole and tiny.tokenizer.decode(odd) == PROMPTS[0]
    from_ids = tiny.generate_ids([*ids, odd], params)
    for text_gen, id_gen, prompt_ids in zip(from_text, from_ids, ids):
        assert id_gen.prompt_token_ids == prompt_ids
        assert id_gen.completion_token_ids == text_gen.completion_token_ids
        assert id_gen.completion_logprobs == pytest.approx(text_gen.completion_logprobs, abs=1e-5)
    assert from_ids[-1].prompt_token_ids == odd  # token-in: never re-tokenised
    expected = teacher_forced_logprobs(tiny.model, odd, from_ids[-1].completion_token_ids)
    assert from_ids[-1].completion_logprobs == pytest.approx(expected, abs=2e-4)


def test_a_stop_string_completion_holds_only_sampled_tokens(tiny):
    """A row that stops on a stop string is padded while the others run on: the padding is not
    sampled and must not be in the completion (the next turn's prompt extends these ids)."""
    params = SamplingParams(max_tokens=12, temperature=1.0, seed=3)
    free = tiny.generate(PROMPTS, params)
    # A stop string that ends one row early and appears in no other row.
    row, stop = next(
        (r, gen.text[i : i + 3])
        for r, gen in enumerate(free)
        for i in range(len(gen.text) - 6)
        if gen.text[i : i + 3].isalpha()
        and not any(gen.text[i : i + 3] in other.text for other in free if other is not gen)
    )
    stopped = tiny.generate(PROMPTS, dataclasses.replace(params, stop=(stop,)))
    gen = stopped[row]
    assert gen.finish_reason == "stop" and gen.text.endswith(stop)
    n = len(gen.completion_token_ids)
    assert n < len(free[row].completion_token_ids)
    assert gen.completion_token_ids == free[row].completion_token_ids[:n]  # sampled, no padding
    assert gen.completion_logprobs == pytest.approx(free[row].completion_logprobs[:n])
    assert stop in tiny.tokenizer.decode(gen.completion_token_ids)
    assert stop not in tiny.tokenizer.decode(gen.completion_token_ids[:-1])
    for other, original in zip(stopped, free):  # the other rows are untouched
        if other is not gen:
            assert other.completion_token_ids == original.completion_token_ids


def test_openai_backend_cannot_take_token_prompts_and_the_agent_falls_back(server, caplog):
    from comprl_gym.agents.llm_agent import LLMAgent, LLMAgentConfig
    from comprl_gym.agents.prompts import PromptConfig

    client = OpenAIBackend(server.url, tokenizer="tiny")
    assert not client.supports_token_prompts
    with pytest.raises(ValueError, match="token ids"):
        client.generate_ids([[1, 2, 3]], SamplingParams(max_tokens=2))
    config = LLMAgentConfig(prompt=PromptConfig(conversation="multi_turn"))
    with caplog.at_level("WARNING"):
        agent = LLMAgent(client, config)
    assert not agent.multi_turn and "falls back to windowed" in caplog.text
    assert LLMAgent(TransformersBackend("tiny"), config).multi_turn


def test_shared_prefix_reuse_gives_the_tokens_and_logprobs_of_a_full_encode(tiny):
    """Multi-turn conversations (ragged, batched, one system prompt) with the prefix cache give
    the greedy tokens and logprobs of encoding every prompt from scratch, while re-encoding
    only the new tokens; a weight change empties the cache."""
    fresh = TransformersBackend(
        model_object=tiny.model, tokenizer_object=tiny.tokenizer, prefix_cache_tokens=0
    )
    reuse = TransformersBackend(model_object=tiny.model, tokenizer_object=tiny.tokenizer)
    params = SamplingParams(max_tokens=5, temperature=0)
    encode = tiny.tokenizer.encode
    system = encode("You are an agent in a dungeon. Reply with one move.\n")
    prompts = [system + encode(f"obs {i}: " + "wall " * i) for i in range(4)]
    previous: list[list[int]] = []
    for turn in range(3):
        with_cache = reuse.generate_ids(prompts, params)
        plain = fresh.generate_ids(prompts, params)
        for a, b in zip(with_cache, plain):
            assert a.completion_token_ids == b.completion_token_ids
            assert a.completion_logprobs == pytest.approx(b.completion_logprobs, abs=1e-4)
            assert b.extra["cached_prompt_tokens"] == 0
        cached = [g.extra["cached_prompt_tokens"] for g in with_cache]
        if turn == 0:  # one batch fills the cache only once it is done
            assert cached == [0, 0, 0, 0]
        else:  # the previous prompt and reply come from the cache
            for gen, before in zip(with_cache, previous):
                assert gen.extra["cached_prompt_tokens"] >= len(before) - 1
        previous = [p + g.completion_token_ids for p, g in zip(prompts, with_cache)]
        prompts = [p + encode(f" step {turn} row {i}" * (i + 1)) for i, p in enumerate(previous)]
    [newcomer] = reuse.generate_ids([system + encode("obs 9: door")], params)
    assert newcomer.extra["cached_prompt_tokens"] >= len(system)  # the shared system prompt
    expected = teacher_forced_logprobs(
        tiny.model, newcomer.prompt_token_ids, newcomer.completion_token_ids
    )
    assert newcomer.completion_logprobs == pytest.approx(expected, abs=2e-4)
    reuse.update_weights({k: v + 0.0 for k, v in tiny.model.state_dict().items()})
    [after] = reuse.generate_ids(prompts[:1], params)
    assert after.extra["cached_prompt_tokens"] == 0
