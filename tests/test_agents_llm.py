"""LLM agents: action extraction from chatty replies, prompts, batched acting, real episodes."""

from __future__ import annotations

import gymnasium as gym
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import comprl_gym  # noqa: F401
from comprl_gym.agents import make_agent
from comprl_gym.agents.llm_agent import (
    LLMAgent,
    LLMAgentConfig,
    extract_action,
    parse_agent_spec,
    shared_backend,
)
from comprl_gym.agents.prompts import PromptConfig, answer_prefill, build_messages
from comprl_gym.core import ConfigurationError
from comprl_gym.rollouts import collect_rollouts

ALFWORLD_ACTIONS = [
    "look",
    "inventory",
    "go to drawer 1",
    "go to drawer 10",
    "open drawer 1",
    "take apple 1 from countertop 2",
]

# Noise: chatty text without the markers the extractor looks for.
noise = st.text(
    alphabet=st.characters(blacklist_characters="<>`\x00", blacklist_categories=("Cs",)),
    max_size=80,
)
action_text = st.from_regex(r"[a-z][a-z0-9 \[\]_]{0,30}[a-z0-9\]]", fullmatch=True)


# ---- extraction ------------------------------------------------------------------------------
@settings(max_examples=150, deadline=None)
@given(before=noise, action=action_text, after=noise)
def test_action_tag_wins_over_any_surrounding_chatter(before, action, after):
    got = extract_action(f"{before}<action>{action}</action>{after}")
    assert got.action == action and got.method == "tag"


@settings(max_examples=150, deadline=None)
@given(
    before=noise,
    number=st.integers(1, len(ALFWORLD_ACTIONS)),
    suffix=st.sampled_from(["", ".", ")", ":"]),
)
def test_a_listed_number_on_the_last_line_names_that_action(before, number, suffix):
    text = f"{before}\n{number}{suffix}"
    assert extract_action(text, ALFWORLD_ACTIONS).action == ALFWORLD_ACTIONS[number - 1]


@settings(max_examples=100, deadline=None)
@given(
    before=noise,
    command=st.from_regex(r"[a-z][a-z0-9 ./|=-]{0,40}[a-z0-9]", fullmatch=True),
    lang=st.sampled_from(["", "bash", "sh"]),
)
def test_fenced_block_gives_the_command_of_open_ended_envs(before, command, lang):
    text = f"{before}\n```{lang}\n{command}\n```\nHope this helps"
    assert extract_action(text, None).action == command


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=300), use_list=st.booleans())
def test_extraction_never_raises_and_returns_admissible_or_text(text, use_list):
    got = extract_action(text, ALFWORLD_ACTIONS if use_list else None)
    assert got.action is None or isinstance(got.action, str)
    if got.action is None:
        assert got.format_error


@settings(max_examples=100, deadline=None)
@given(
    action=st.sampled_from(ALFWORLD_ACTIONS),
    style=st.sampled_from(["upper", "underscore", "prefix", "quoted", "numbered"]),
)
def test_listed_actions_are_recognised_in_common_variations(action, style):
    index = ALFWORLD_ACTIONS.index(action) + 1
    text = {
        "upper": action.upper(),
        "underscore": action.replace(" ", "_"),
        "prefix": f"Action: {action}.",
        "quoted": f"I will do '{action}'",
        "numbered": f"{index}. {action}",
    }[style]
    assert (
        extract_action(f"Let me think about the room.\n{text}", ALFWORLD_ACTIONS).action == action
    )


def test_extraction_details():
    assert extract_action("<think>1</think>\n3", ALFWORLD_ACTIONS).action == "go to drawer 1"
    assert (
        extract_action("I should go to drawer 10 now because it is close", ALFWORLD_ACTIONS).action
        == "go to drawer 10"
    )
    assert extract_action("<think>only thinking, never answering", ALFWORLD_ACTIONS).format_error
    assert extract_action("", ALFWORLD_ACTIONS).format_error
    long_prose = "This is a very long answer that keeps talking about the room without ever choosing anything at all"
    assert extract_action(long_prose, ALFWORLD_ACTIONS).format_error
    # a template is never chosen by number; the model must write it out
    assert extract_action("1", ["search[<query>]"]).action == "1"
    assert (
        extract_action("<action>search[red shoes]</action>", ["search[<query>]"]).action
        == "search[red shoes]"
    )
    tag = "<knowledge_search_and_ask>where is the key?</knowledge_search_and_ask>"
    assert extract_action(f"hmm {tag}", ALFWORLD_ACTIONS).action == tag


# ---- prompts ---------------------------------------------------------------------------------
def test_prompt_has_grammar_task_history_window_and_numbered_actions():
    history = [(f"obs {i}", f"act {i}") for i in range(6)]
    messages = build_messages(
        "alfworld",
        "put a clean apple in the fridge",
        history,
        "You see a fridge.",
        ALFWORLD_ACTIONS,
        PromptConfig(history_window=2),
        format_error=True,
    )
    system, user = messages[0]["content"], messages[1]["content"]
    assert "take apple 1 from countertop 1" in system  # the family's action grammar
    assert "Task: put a clean apple in the fridge" in user
    assert "obs 5" in user and "obs 4" in user and "obs 3" not in user  # the window
    assert "3. go to drawer 1" in user
    assert "FORMAT ERROR" in user
    think = build_messages("minihack", "t", [], "o", None, PromptConfig(think=True))
    assert "<think>" in think[1]["content"]
    assert answer_prefill(ALFWORLD_ACTIONS, PromptConfig()) == ("Action number: ", ("\n",))
    assert answer_prefill(["search[<query>]"], PromptConfig())[0] == "<action>"
    assert answer_prefill(ALFWORLD_ACTIONS, PromptConfig(think=True))[0] == ""


def test_agent_specs():
    assert parse_agent_spec("openai:http://h:1/v1#m?temperature=0") == (
        "openai:http://h:1/v1#m",
        {"temperature": "0"},
    )
    with pytest.raises(ConfigurationError):
        parse_agent_spec("gpt:foo")
    env = gym.make("comprl/MiniHack-Room-5x5-v0", max_steps=2)
    with pytest.raises(ConfigurationError, match="unknown agent option"):
        make_agent("hf:tiny?tempreature=0", env)
    agent = make_agent("hf:tiny?temperature=0&history=1&think=1", env, seed=3)
    assert isinstance(agent, LLMAgent)
    assert (
        agent.config.temperature == 0
        and agent.config.prompt.history_window == 1
        and agent.config.prompt.think
    )
    assert agent.backend is make_agent("hf:tiny", env).backend  # one model per process
    env.close()


# ---- acting ----------------------------------------------------------------------------------
def test_many_episodes_share_one_generation_call_and_garbage_gives_format_errors(monkeypatch):
    backend = shared_backend("hf:tiny")
    calls = []
    original = backend.generate
    monkeypatch.setattr(
        backend, "generate", lambda p, params: calls.append(len(p)) or original(p, params)
    )
    # the tiny random model writes garbage: every reply exercises the format-error path
    agent = LLMAgent(
        backend, LLMAgentConfig(max_tokens=6, seed=0, prompt=PromptConfig(answer_style="tag"))
    )
    envs = [gym.make("comprl/MiniHack-Room-5x5-v0", max_steps=2) for _ in range(3)]
    trajs = collect_rollouts(envs, agent, seeds=[0, 1, 2])
    assert calls == [3, 3]  # two rounds, one call each for all three episodes
    for traj in trajs:
        assert traj.steps == 2 and len(traj.turns) == 2
        for turn in traj.turns:
            assert turn.completion_token_ids and len(turn.completion_logprobs) == len(
                turn.completion_token_ids
            )
            assert turn.loss_mask().count(1) == len(turn.completion_token_ids)
    errors = [t for traj in trajs for t in traj.turns if t.format_error]
    if errors:  # the next prompt tells the model what went wrong
        state = agent.start_episode("t", {"env_family": "minihack"})
        state.last_format_error = True
        assert "FORMAT ERROR" in agent.messages_for(state, "o", {})[1]["content"]


@pytest.mark.parametrize("conversation", ["windowed", "multi_turn"])
def test_choose_listed_replies_with_one_listed_number_and_says_which_it_chose_among(conversation):
    """choose_listed: each reply is one token, the number of a listed action, drawn among the
    listed numbers only (at temperature 5 the tiny random model draws both), and the turn
    records those tokens so that a trainer scores over exactly them."""
    backend = shared_backend("hf:tiny")
    numbers = [backend.tokenizer(n, add_special_tokens=False)["input_ids"][0] for n in "12"]
    agent = LLMAgent(
        backend,
        LLMAgentConfig(
            temperature=5.0, max_tokens=8, seed=0, choose_listed=True,
            prompt=PromptConfig(conversation=conversation),
        ),
    )  # fmt: skip
    envs = [gym.make("comprl/Ladder-v0", rung="two_step") for _ in range(8)]
    trajs = collect_rollouts(envs, agent, seeds=list(range(8)))
    turns = [turn for traj in trajs for turn in traj.turns]
    assert all(len(t.completion_token_ids) == 1 for t in turns)
    assert {t.completion_token_ids[0] for t in turns} == set(numbers)
    assert all(t.allowed_token_ids == numbers and not t.format_error for t in turns)
    assert {t.action for t in turns} == {"east", "west"}
    for traj in trajs:
        for sequence in traj.training_sequences():
            assert sequence.allowed_token_ids == tuple(sorted(numbers))
    for env in envs:
        env.close()


def test_choose_listed_refuses_what_it_cannot_choose_among():
    backend = shared_backend("hf:tiny")
    tag = LLMAgent(
        backend, LLMAgentConfig(choose_listed=True, prompt=PromptConfig(answer_style="tag"))
    )
    info = {"task": "t", "env_family": "ladder", "admissible_actions": ["east", "west"]}
    with pytest.raises(ConfigurationError, match="choose_listed needs a numbered list"):
        tag.act_batch([tag.start_episode("t", info)], ["o"], [info])
    many = LLMAgent(backend, LLMAgentConfig(choose_listed=True))
    info = {**info, "admissible_actions": [f"go to drawer {i}" for i in range(12)]}
    with pytest.raises(ConfigurationError, match="at most 9 listed actions, the env listed 12"):
        many.act_batch([many.start_episode("t", info)], ["o"], [info])
    assert make_agent("hf:tiny?choose=1", None).config.choose_listed


FAMILY_IDS = [
    "comprl/MiniHack-Room-5x5-v0",
    "comprl/ALFWorld-v0",
    "comprl/WebShop-v0",
    "comprl/SWEBench-v0",
]


@pytest.mark.slow
@pytest.mark.parametrize("env_id", FAMILY_IDS)
def test_smollm2_plays_an_episode_of_every_family(env_id):
    """SmolLM2-135M, end to end on CPU: the real model, the real env, a full (short) episode."""
    env = gym.make(env_id, max_steps=2)
    agent = make_agent("hf:smollm2?max_tokens=16&seed=0&history=1", env, seed=0)
    [traj] = collect_rollouts([env], agent, seeds=[0])
    env.close()
    assert traj.env_family == env_id.split("/")[1].split("-")[0].lower()
    assert traj.steps == 2 and traj.truncated or traj.terminated
    assert traj.prompt_tokens > 50 and traj.completion_tokens >= 2
    for turn in traj.turns:
        assert turn.action and turn.next_observation
        assert len(turn.completion_logprobs) == len(turn.completion_token_ids)
    if env_id.startswith("comprl/MiniHack") or env_id.startswith("comprl/ALFWorld"):
        # with the numbered list and the prefill, SmolLM2 picks listed actions
        assert sum(t.invalid_action for t in traj.turns) <= 1
