"""The scripted MiniHack expert: it must win the navigation tasks and beat a random agent."""

from __future__ import annotations

import gymnasium as gym
import pytest

import comprl_gym  # noqa: F401 - registers comprl/* ids
from comprl_gym.agents import RandomAgent
from comprl_gym.agents.base import make_agent
from comprl_gym.envs.minihack.expert import MiniHackExpert
from comprl_gym.rollouts import run_episode

SEEDS = range(20)


def win_rate(env_id: str, agent_spec: str, seeds=SEEDS) -> float:
    env = gym.make(env_id)
    agent = make_agent(agent_spec, env, seed=0)
    wins = sum(run_episode(env, agent, seed=seed).won for seed in seeds)
    env.close()
    return wins / len(seeds)


@pytest.mark.slow
@pytest.mark.parametrize(
    "env_id",
    [
        "comprl/MiniHack-Room-5x5-v0",
        "comprl/MiniHack-Room-15x15-v0",
        "comprl/MiniHack-Room-Dark-15x15-v0",
        "comprl/MiniHack-MazeWalk-9x9-v0",
    ],
)
def test_expert_wins_navigation_tasks(env_id):
    assert win_rate(env_id, "expert") >= 19 / 20


@pytest.mark.slow
@pytest.mark.parametrize(
    "env_id", ["comprl/MiniHack-Room-Monster-15x15-v0", "comprl/MiniHack-KeyRoom-S5-v0"]
)
def test_expert_beats_random_agent(env_id, capsys):
    expert, random_agent = win_rate(env_id, "expert"), win_rate(env_id, "random")
    with capsys.disabled():
        print(f"\n{env_id}: expert {expert:.2f}, random {random_agent:.2f} over {len(SEEDS)} seeds")
    assert expert >= 0.8
    assert expert >= random_agent + 0.3


def test_expert_is_the_registered_expert_and_uses_named_actions():
    env = gym.make("comprl/MiniHack-KeyRoom-S5-v0")
    agent = make_agent("expert", env)
    assert isinstance(agent, MiniHackExpert)
    obs, info = env.reset(seed=0)
    agent.reset(info["task"], info)
    actions = []
    for _ in range(40):
        action = agent.act(obs, info)
        assert action in info["admissible_actions"]
        actions.append(action)
        obs, _, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            break
    assert info["won"] and "pick up" in actions and "apply" in actions
    assert actions.index("pick up") < actions.index("apply")
    env.close()


def test_random_agent_uses_admissible_actions():
    env = gym.make("comprl/MiniHack-Room-5x5-v0")
    result = run_episode(env, RandomAgent(seed=0), seed=0)
    assert result.invalid_actions == 0
    env.close()
