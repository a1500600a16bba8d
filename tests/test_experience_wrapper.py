"""ExperienceAugmentedEnv over a small TextEnv, MiniHack and WebShop: injection, search budget,
no inner step on a search, experience ids, outcome reporting."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import comprl_gym  # noqa: F401 - registers the ids
from comprl_gym.agents.base import make_agent
from comprl_gym.agents.prompts import PromptConfig, build_messages
from comprl_gym.core import ConfigurationError, TextEnv, Transition
from comprl_gym.experience import (
    ExperienceManager,
    Provenance,
    SentenceTransformerEmbedder,
    default_embedder,
)
from comprl_gym.experience.search_and_ask import SearchAndAskSyntax, find_tag
from comprl_gym.wrappers import ExperienceAugmentedEnv


class CounterEnv(TextEnv):
    """Say "inc" three times to win; counts every inner step it is given."""

    env_family = "minihack"

    def __init__(self, max_steps: int = 6):
        super().__init__(max_steps=max_steps)
        self.inner_steps = 0
        self.value = 0

    def _reset_task(self, seed, options):
        self.task, self.task_id, self.value = (
            "reach the staircase by counting to three",
            f"counter-{seed}",
            0,
        )
        return "value 0", {}

    def _step_task(self, action):
        self.inner_steps += 1
        if action.strip() != "inc":
            return Transition(observation=f"bad action {action!r}", invalid_action=True)
        self.value += 1
        won = self.value >= 3
        return Transition(
            observation=f"value {self.value}",
            reward=float(won),
            terminated=won,
            won=won,
            score=float(won),
        )

    def admissible_actions(self):
        return ["inc", "wait"]


@pytest.fixture(scope="module")
def embedder() -> SentenceTransformerEmbedder:
    return default_embedder()  # one model load per test process


@pytest.fixture
def manager(tmp_path, embedder):
    m = ExperienceManager(tmp_path / "bank", embedder=embedder)
    m.add(
        [
            "## Title: Find the stairs\n## Description: MiniHack rooms\n## Content: walk to the '>' staircase",
            "## Title: Count up\n## Description: counting tasks\n## Content: say inc until you reach three",
        ],
        Provenance(task_ids=("seed",)),
        env_family="minihack",
    )
    m.add(
        [
            "## Title: Buy carefully\n## Description: WebShop\n## Content: select options then buy now"
        ],
        env_family="webshop",
    )
    yield m
    m.close()


def test_budget_no_inner_step_ids_and_outcome_on_a_small_env(manager):
    inner = CounterEnv()
    env = ExperienceAugmentedEnv(inner, manager, inject_top_k=2, search_budget=2, search_top_k=1)
    obs, info = env.reset(seed=1)
    assert (
        "Lessons from past experience" in obs
        and "search_and_ask" in obs
        and obs.endswith("value 0")
    )
    assert len(info["experience_ids"]) == 2 and info["search_and_ask_calls"] == 0
    assert "search_and_ask[<question>]" in info["admissible_actions"]
    injected = list(info["experience_ids"])

    obs, reward, term, trunc, info = env.step("search_and_ask[how do I win a counting task?]")
    assert inner.inner_steps == 0 and info["step"] == 0 and reward == 0.0 and not (term or trunc)
    assert "Knowledge base answer" in obs and obs.endswith("value 0") and not info["invalid_action"]
    assert (
        info["search_and_ask_calls"] == 1
        and info["search_and_ask"]["question"] == "how do I win a counting task?"
    )
    assert set(info["experience_ids"]) >= set(injected)

    obs, *_, info = env.step(
        "I think... <knowledge_search_and_ask>stairs?</knowledge_search_and_ask>"
    )
    assert info["search_and_ask_calls"] == 2 and inner.inner_steps == 0
    assert "search_and_ask[<question>]" not in info["admissible_actions"]

    obs, reward, term, trunc, info = env.step("search_and_ask[again?]")
    assert (
        info["invalid_action"]
        and "budget" in obs
        and inner.inner_steps == 0
        and info["search_and_ask_calls"] == 2
    )
    obs, *_, info = env.step("search_and_ask[]")
    assert info["invalid_action"] and "empty" in obs

    for _ in range(3):
        obs, reward, term, trunc, info = env.step("inc")
    assert term and info["won"] and inner.inner_steps == 3
    shown = info["experience_ids"]
    assert all((e.uses, e.wins) == (1, 1) for e in manager.get(shown))
    env.reset(seed=2)
    assert all(e.uses == 1 for e in manager.get(shown))


def test_over_budget_calls_count_toward_truncation(manager):
    env = ExperienceAugmentedEnv(CounterEnv(max_steps=4), manager, inject_top_k=1, search_budget=0)
    _, info = env.reset(seed=0)
    assert "search_and_ask[<question>]" not in info["admissible_actions"]
    truncated = False
    for _ in range(4):
        _, _, _, truncated, info = env.step("search_and_ask[help]")
    assert truncated and env.unwrapped.inner_steps == 0
    [eid] = info["experience_ids"]
    assert (manager.get_one(eid).uses, manager.get_one(eid).wins) == (1, 0)


def test_text_the_wrapper_adds_is_printable(tmp_path, embedder):
    """Stored lessons (written by a model) reach the agent with their control bytes shown."""
    manager = ExperienceManager(tmp_path / "bank", embedder=embedder)
    manager.add(
        ["## Title: Count\x1b[2J\n## Description: counting\n## Content: say inc\x00 thrice"],
        Provenance(task_ids=("seed",)),
        env_family="minihack",
    )
    env = ExperienceAugmentedEnv(CounterEnv(), manager, inject_top_k=1, search_top_k=1)
    obs, _ = env.reset(seed=0)
    assert "say inc\\x00 thrice" in obs and "\x00" not in obs and "\x1b" not in obs
    obs, *_, info = env.step("search_and_ask[how do I count?]")
    assert "\x00" in info["search_and_ask"]["answer"]  # the raw lesson...
    assert "say inc\\x00 thrice" in obs and "\x00" not in obs and "\x1b" not in obs  # ...shown


@pytest.mark.filterwarnings("ignore:.*different from the unwrapped version")
def test_wrapper_passes_the_gymnasium_env_checker(manager):
    check_env(ExperienceAugmentedEnv(CounterEnv(), manager), skip_render_check=True)


@pytest.mark.slow
def test_wrapper_over_minihack(manager):
    env = ExperienceAugmentedEnv(gym.make("comprl/MiniHack-Room-5x5-v0"), manager, inject_top_k=2)
    obs, info = env.reset(seed=0)
    assert "Find the stairs" in obs and all(
        e.env_family == "minihack" for e in manager.get(info["experience_ids"])
    )
    inner_before = env.unwrapped.render_text()
    obs, reward, term, trunc, info = env.step("search_and_ask[where are the stairs?]")
    assert (
        info["step"] == 0
        and env.unwrapped.render_text() == inner_before
        and "Knowledge base answer" in obs
    )
    expert = make_agent("expert", env)
    expert.reset(info["task"], info)
    while not (term or trunc):
        obs, reward, term, trunc, info = env.step(expert.act(obs, info))
    assert info["won"]
    assert all(e.wins == 1 and e.uses == 1 for e in manager.get(info["experience_ids"]))
    env.close()


@pytest.mark.slow
@pytest.mark.parametrize(
    "env_id, kwargs",
    [
        ("comprl/WebShop-v0", {}),
        ("comprl/ALFWorld-v0", {"split": "train"}),
        ("comprl/SWEBench-v0", {"sandbox": "bubblewrap"}),
    ],
)
def test_wrapper_over_every_other_family(manager, env_id, kwargs):
    env = ExperienceAugmentedEnv(gym.make(env_id, **kwargs), manager, inject_top_k=3)
    try:
        obs, info = env.reset(seed=0)
        family = info["env_family"]
        assert {e.env_family for e in manager.get(info["experience_ids"])} <= {family}
        inner_view = env.unwrapped.render_text()
        obs, reward, term, trunc, info = env.step("search_and_ask[what should I do first?]")
        assert info["step"] == 0 and reward == 0.0 and not (term or trunc)
        assert env.unwrapped.render_text() == inner_view
        assert info["search_and_ask_calls"] == 1 and "Knowledge base answer" in obs
        inner_actions = env.unwrapped.admissible_actions()
        if inner_actions is None:
            assert info["admissible_actions"] is None
        else:
            assert "search_and_ask[<question>]" in info["admissible_actions"]
        expert = make_agent("expert", env)
        expert.reset(info["task"], info)
        obs, reward, term, trunc, info = env.step(expert.act(obs, info))
        assert info["step"] == 1 and not info["invalid_action"]
    finally:
        env.close()


@pytest.mark.slow
def test_alfworld_engine_still_works_when_the_store_loaded_usearch_first():
    """usearch's statically linked libstdc++ breaks a Fast Downward library loaded after it."""
    code = (
        "from comprl_gym.experience.store import import_usearch; import_usearch()\n"
        "import gymnasium as gym, comprl_gym\n"
        "env = gym.make('comprl/ALFWorld-v0', split='train')\n"
        "obs, info = env.reset(seed=0)\n"
        "print('TASK', info['task'])\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0 and "TASK " in result.stdout, result.stdout + result.stderr


# ------------------------------------------------------------------ the search_and_ask protocol
def test_protocol_parses_both_syntaxes_and_rejects_malformed_calls():
    syntax = SearchAndAskSyntax()
    assert syntax.parse("search_and_ask[where is the key?]") == "where is the key?"
    assert syntax.parse("Action: SEARCH_AND_ASK [ stairs ]") == "stairs"  # case, spaces
    assert syntax.parse("<knowledge_search_and_ask>\n how? \n</knowledge_search_and_ask>") == "how?"
    # The tag wins over a bracket call in the same reply.
    both = "search_and_ask[a] then <knowledge_search_and_ask>b</knowledge_search_and_ask>"
    assert syntax.parse(both) == "b"
    # Empty questions are calls (the wrapper refuses them); malformed ones are not calls.
    assert syntax.parse("search_and_ask[]") == ""
    assert syntax.parse("<knowledge_search_and_ask></knowledge_search_and_ask>") == ""
    for malformed in (
        "search_and_ask[unclosed",
        "<knowledge_search_and_ask>unclosed",
        "my_search_and_ask[x]",  # another identifier that ends with the name
        "search and ask[x]",
        "go north",
        None,
        42,
    ):
        assert syntax.parse(malformed) is None, malformed
    custom = SearchAndAskSyntax("ask")
    assert custom.parse("ask[why?]") == "why?" and custom.parse("search_and_ask[x]") is None
    assert custom.template == "ask[<question>]"
    with pytest.raises(ConfigurationError, match="identifier"):
        SearchAndAskSyntax("not valid")
    # The agent hands a tag call on whole, so the wrapper sees the same question.
    reply = "Let me ask. <knowledge_search_and_ask>where?</knowledge_search_and_ask> ok"
    assert find_tag(reply) == "<knowledge_search_and_ask>where?</knowledge_search_and_ask>"
    assert syntax.parse(find_tag(reply)) == "where?"
    assert find_tag("<knowledge_search_and_ask>where?") is None


def test_the_actor_is_told_about_the_tool_once_and_sees_injected_texts(manager):
    env = ExperienceAugmentedEnv(CounterEnv(), manager, inject_top_k=2, search_budget=1)
    obs, info = env.reset(seed=0)
    assert [e["id"] for e in info["experiences"]] == info["experience_ids"]
    stored = {e.id: e.text for e in manager.get(info["experience_ids"])}
    assert all(e["text"] == stored[e["id"]] for e in info["experiences"])
    messages = build_messages(
        "minihack", info["task"], [], obs, info["admissible_actions"], PromptConfig()
    )
    text = "\n".join(m["content"] for m in messages)
    assert text.count("You may consult a knowledge base") == 1
    assert "search_and_ask" not in messages[0]["content"]  # not again in the system prompt
    # the injected experiences stay in info through the episode
    *_, info = env.step("search_and_ask[what now?]")
    assert [e["id"] for e in info["experiences"]] == [e["id"] for e in env.injection.injected]


def test_experiences_shown_once_when_the_agent_puts_them_in_its_system_prompt(manager):
    plain = ExperienceAugmentedEnv(CounterEnv(), manager, inject_top_k=2, search_budget=0)
    shown, info = plain.reset(seed=0)
    texts = [e["text"] for e in info["experiences"]]
    assert texts and shown.startswith("Lessons from past experience")
    quiet = ExperienceAugmentedEnv(
        CounterEnv(), manager, inject_top_k=2, search_budget=0, experiences_in_observation=False
    )
    obs, info = quiet.reset(seed=0)
    assert [e["text"] for e in info["experiences"]] == texts  # still in info
    assert not obs.startswith("Lessons from past experience") and shown.endswith(obs)
    # The agent's prompt then carries each lesson once, in the system message.
    messages = build_messages(
        "minihack",
        info["task"],
        [],
        obs,
        info["admissible_actions"],
        PromptConfig(),
        experiences=texts,
    )
    first_line = " ".join(texts[0].split())
    assert messages[0]["content"].count(first_line) == 1
    assert first_line not in messages[1]["content"]
