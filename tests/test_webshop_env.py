"""comprl/WebShop-v0: pages, actions, modes, bad input, the gym contract, expert vs random."""

from __future__ import annotations

import random
import statistics

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import comprl_gym  # noqa: F401  (registers the ids)
from comprl_gym.envs.webshop import WebShopEnv
from comprl_gym.envs.webshop.expert import WebShopExpert
from comprl_gym.rollouts import run_episode


@pytest.fixture(scope="module")
def env() -> WebShopEnv:
    return WebShopEnv(split="test")


def goal_query(info) -> str:
    """A broad query: the instruction without its price clause."""
    return info["task"].split(", and price")[0]


def test_search_page_and_info(env):
    obs, info = env.reset(seed=5)
    assert obs == f"WebShop [SEP] Instruction: [SEP] {info['task']} [SEP] Search"
    assert info["task"] == env.goal["instruction_text"]
    # The goal (target product) is grader-side: never in what an agent is given.
    assert "goal" not in info and env.goal["asin"] not in str(info)
    assert "price lower than" in info["task"]
    assert info["admissible_actions"] == ["search[<query>]"]
    assert int(info["task_id"]) in range(0, 500)
    assert info["env_family"] == "webshop" and info["won"] is False


def test_results_pagination_and_back(env):
    obs, info = env.reset(seed=1)
    obs, _, _, _, info = env.step(f"search[{goal_query(info)}]")
    assert "Page 1 (Total results: 50)" in obs and "< Prev" not in obs
    first_page = [a for a in info["admissible_actions"] if a.startswith("click[b0")]
    assert len(first_page) == 10
    assert info["admissible_actions"][:2] == ["click[back to search]", "click[next >]"]
    obs, _, _, _, info = env.step("click[next >]")
    assert (
        obs.count("[SEP] $") == 10 and "Page 2 (Total results: 50) [SEP] < Prev [SEP] Next >" in obs
    )
    second_page = [a for a in info["admissible_actions"] if a.startswith("click[b0")]
    assert not set(first_page) & set(second_page)
    for _ in range(4):
        obs, _, _, _, info = env.step("click[next >]")
    assert "Page 6 (Total results: 50)" in obs  # like the original: past the end, no products
    assert not [a for a in info["admissible_actions"] if a.startswith("click[b0")]
    obs, _, _, _, info = env.step("click[< prev]")
    assert "Page 5 " in obs
    obs, _, _, _, info = env.step("click[back to search]")
    assert obs.startswith("WebShop [SEP] Instruction:")


def test_item_page_options_and_sub_pages(env):
    obs, info = env.reset(options={"goal_index": 3})
    goal = env.goal
    product = env.catalog.by_asin[goal["asin"]]
    env.step(f"search[{product['Title']}]")
    obs, _, _, _, info = env.step(f"click[{goal['asin'].lower()}]")
    assert f"[SEP] {product['Title']} [SEP] Price: {product['Price']} [SEP] Rating:" in obs
    actions = info["admissible_actions"]
    expected = ["click[back to search]", "click[< prev]", "click[description]",
                "click[features]", "click[reviews]", "click[buy now]"]  # fmt: skip
    assert actions[:6] == expected
    values = [v for vs in product["options"].values() for v in vs]
    assert actions[6:] == [f"click[{v}]" for v in dict.fromkeys(values)]
    obs, _, _, _, info = env.step("click[Description]")  # case-insensitive
    assert obs.endswith(product["Description"])
    assert info["admissible_actions"] == ["click[back to search]", "click[< prev]"]
    obs, _, _, _, _ = env.step("click[< prev]")
    obs, _, _, _, _ = env.step("click[features]")
    assert obs.endswith(" [SEP] ".join(b.strip() for b in product["BulletPoints"]))
    env.step("click[< prev]")
    obs, _, _, _, _ = env.step("click[reviews]")
    for review in product["Reviews"]:
        assert f'"{review["title"]}" [SEP] {review["score"]} [SEP] {review["body"]}' in obs
    obs, _, _, _, info = env.step("click[< prev]")
    assert info["page"] == "item"
    obs, _, _, _, info = env.step("click[< prev]")
    assert info["page"] == "results" and "Page 1 " in obs


def test_attributes_sub_page_with_show_attrs():
    env = WebShopEnv(split="test", show_attrs=True)
    _, info = env.reset(options={"goal_index": 0})
    product = env.catalog.by_asin[env.goal["asin"]]
    env.step(f"search[{product['Title']}]")
    _, _, _, _, info = env.step(f"click[{product['asin']}]")
    assert "click[attributes]" in info["admissible_actions"]
    obs, _, _, _, _ = env.step("click[attributes]")
    tail = [
        *product["Attributes"],
        product["category"],
        product["query"],
        product["product_category"],
    ]
    assert obs.endswith(" [SEP] ".join(tail))


def test_text_rich_mode_marks_buttons_and_clicks():
    env = WebShopEnv(split="test", observation_mode="text_rich")
    obs, info = env.reset(options={"goal_index": 7})
    assert obs == f"WebShop\nInstruction: \n{info['task']}\n[button] Search [button_]\n"
    goal = env.goal
    product = env.catalog.by_asin[goal["asin"]]
    obs, *_ = env.step(f"search[{product['Title']}]")
    assert "[button] Back to Search [button_]\nPage 1 (Total results:" in obs
    assert f"\n[button] {product['asin']} [button_]\n" in obs
    obs, _, _, _, info = env.step(f"click[{product['asin']}]")
    name, values = next(iter(product["options"].items()))
    assert f"{name}\n  [button] {values[0]} [button_]\n" in obs
    obs, *_ = env.step(f"click[{values[-1]}]")
    assert obs.startswith(f"You have clicked {values[-1]}.\n")
    assert f"  [clicked button] {values[-1]} [clicked button_]\n" in obs
    assert "[button] Buy Now [button_]" in obs
    obs, *_ = env.step("click[< prev]")  # back to the results: the visited ASIN is marked
    assert f"\n[clicked button] {product['asin']} [clicked button_]\n" in obs


@pytest.mark.parametrize(
    "action",
    ["click[]", "search[", "click[not on this page]", "search[" + "shoes " * 200 + "]",
     "search[<b>red</b> shirt]", "search[<query>]", "buy", "jump[now]", "Click[buy now]"],
)  # fmt: skip
def test_bad_input_leaves_page_unchanged(env, action):
    obs, info = env.reset(seed=2)
    obs, _, _, _, info = env.step(f"search[{goal_query(info)}]")
    before = env.render_text()
    obs, reward, terminated, truncated, info = env.step(action)
    assert info["invalid_action"] is True and reward == 0.0 and not terminated
    assert "Allowed actions: click[back to search], click[next >]" in obs
    assert env.render_text() == before  # the page did not change
    obs, _, _, _, info = env.step("click[next >]")
    assert "Page 2 " in obs and not info["invalid_action"]


def test_buy_scores_and_ends(env):
    _, info = env.reset(options={"goal_index": 11})
    goal = env.goal
    other = next(p for p in env.catalog.products if p["query"] != goal["query"])
    env.step(f"search[{other['Title']}]")
    env.step(f"click[{other['asin']}]")
    obs, reward, terminated, truncated, info = env.step("click[buy now]")
    assert terminated and not truncated and reward < 1.0 and info["won"] is False
    assert info["score"] == reward and "r_type" in info["reward_parts"]
    assert obs.startswith("Thank you for shopping with us! [SEP] Your code: [SEP] None")
    assert obs.endswith(f"[SEP] {reward} [SEP] Reward Details [SEP] None")
    assert info["admissible_actions"] == []


def test_truncation_at_max_steps():
    env = WebShopEnv(split="test", max_steps=3)
    _, info = env.reset(seed=0)
    for _step in range(3):
        _, _, terminated, truncated, _ = env.step("search[shirt]")
    assert truncated and not terminated


def test_expert_wins_100_test_goals_random_far_below(env):
    scores = [run_episode(env, WebShopExpert(env), seed=i, options={"goal_index": i}).score
              for i in range(100)]  # fmt: skip
    assert statistics.mean(scores) >= 0.95

    class RandomShopper:
        """Searches random words of the instruction, clicks uniformly at random."""

        def __init__(self, seed):
            self.rng = random.Random(seed)

        def reset(self, task, info):
            self.words = task.split(", and price")[0].split()

        def act(self, obs, info):
            actions = info["admissible_actions"]
            if actions == ["search[<query>]"]:
                return f"search[{' '.join(self.rng.sample(self.words, 2))}]"
            return self.rng.choice(actions)

    random_scores = [run_episode(env, RandomShopper(i), seed=i, options={"goal_index": i}).score
                     for i in range(100)]  # fmt: skip
    assert statistics.mean(random_scores) < 0.5 * statistics.mean(scores)


def test_check_env_and_determinism():
    env = gym.make("comprl/WebShop-v0", split="valid")
    check_env(env.unwrapped, skip_render_check=True)

    def rollout(seed):
        obs, info = env.reset(seed=seed)
        trace = [obs]
        rng = random.Random(seed)
        for _ in range(6):
            actions = [a for a in info["admissible_actions"] if a != "search[<query>]"]
            action = rng.choice(actions) if actions else f"search[{info['task'][:30]}]"
            obs, _, terminated, truncated, info = env.step(action)
            trace.append(obs)
            if terminated or truncated:
                break
        return trace

    assert rollout(13) == rollout(13)
    assert rollout(13) != rollout(14)
    _, info = env.reset(seed=13)
    assert 500 <= int(info["task_id"]) < 1500


@pytest.mark.parametrize("vector_cls", [gym.vector.SyncVectorEnv, gym.vector.AsyncVectorEnv])
def test_vector_envs(vector_cls):
    envs = vector_cls([lambda: gym.make("comprl/WebShop-v0", split="test") for _ in range(2)])
    try:
        obs, infos = envs.reset(seed=[0, 1])
        assert all(o.startswith("WebShop [SEP] Instruction:") for o in obs)
        obs, rewards, terminated, truncated, infos = envs.step(["search[shirt]", "click[nothing]"])
        assert "Total results" in obs[0] and "Invalid action" in obs[1]
        assert list(infos["invalid_action"]) == [False, True]
    finally:
        envs.close()


def test_bad_configuration():
    from comprl_gym.core import ConfigurationError

    with pytest.raises(ConfigurationError):
        WebShopEnv(observation_mode="html")
    with pytest.raises(ConfigurationError):
        WebShopEnv(split="dev")
    with pytest.raises(ConfigurationError):
        WebShopEnv(colour="red")
    env = WebShopEnv(split="test")
    with pytest.raises(ConfigurationError):
        env.reset(options={"goal_index": 10**6})
