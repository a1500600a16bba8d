"""The actor's ladder env (comprl/Ladder-v0): each rung's right branch worked from the words
of its observation, the perfect reward, the held-out split, and the supervised labels."""

from __future__ import annotations

import re

import gymnasium as gym
import pytest

import comprl_gym  # noqa: F401  (registers the ids)
from comprl_gym.core import ConfigurationError
from comprl_gym.envs.ladder import reading_examples
from comprl_gym.envs.ladder.env import RUNGS, SPLITS

#: The rule as a player reads it: a red lamp for east, a blue one for west; a note names it.
LAMP = {"red": "east", "blue": "west"}


def read_answer(rung: str, observation: str) -> str:
    if rung == "constant":
        return "west"
    if rung == "lesson":
        return re.search(r"at the end of the (east|west) branch", observation).group(1)
    return LAMP[re.search(r"A (red|blue) lamp", observation).group(1)]


@pytest.mark.parametrize("rung", RUNGS)
def test_the_right_branch_wins_and_the_other_loses_at_once(rung):
    env = gym.make("comprl/Ladder-v0", rung=rung, split="test")
    wins = 0
    for seed in range(len(SPLITS["test"])):
        obs, info = env.reset(seed=seed)
        answer = read_answer(rung, obs)
        assert info["admissible_actions"] == ["east", "west"]
        wrong = {"east": "west", "west": "east"}[answer]
        # The wrong branch ends the episode, lost, reward 0.
        _, reward, terminated, _, info = env.step(wrong)
        assert (reward, terminated, info["won"]) == (0.0, True, False)
        obs, info = env.reset(seed=seed)
        total = 0.0
        for _fork in range(2 if rung == "two_step" else 1):
            obs, reward, terminated, truncated, info = env.step(read_answer(rung, obs))
            total += reward
        assert (total, terminated, info["won"]) == (1.0, True, True)
        wins += 1
    assert wins == 32
    env.close()


def test_sides_are_balanced_and_splits_share_no_hall():
    assert not set(SPLITS["train"]) & set(SPLITS["test"])
    assert (len(SPLITS["train"]), len(SPLITS["test"])) == (160, 32)
    env = gym.make("comprl/Ladder-v0", rung="observation", split="train")
    answers = [read_answer("observation", env.reset(seed=s)[0]) for s in range(160)]
    assert answers.count("east") == answers.count("west") == 80


def test_two_step_rewards_only_the_end():
    env = gym.make("comprl/Ladder-v0", rung="two_step")
    obs, _ = env.reset(seed=3)
    obs, reward, terminated, _, _ = env.step(read_answer("two_step", obs))
    assert (reward, terminated) == (0.0, False) and "second fork" in obs
    obs, reward, terminated, _, info = env.step(read_answer("two_step", obs))
    assert (reward, terminated, info["won"]) == (1.0, True, True)
    # A wrong second choice loses, after a right first one.
    obs, _ = env.reset(seed=3)
    obs, *_ = env.step(read_answer("two_step", obs))
    wrong = {"east": "west", "west": "east"}[read_answer("two_step", obs)]
    _, reward, terminated, _, info = env.step(wrong)
    assert (reward, terminated, info["won"]) == (0.0, True, False)


def test_bad_actions_and_tasks_are_refused_clearly():
    env = gym.make("comprl/Ladder-v0", rung="lesson")
    env.reset(seed=0)
    obs, reward, terminated, _, info = env.step("north")
    assert info["invalid_action"] and not terminated and "east, west" in obs
    with pytest.raises(ConfigurationError, match="outside the train split"):
        env.reset(options={"task_id": 160})
    with pytest.raises(ConfigurationError, match="rung must be one of"):
        gym.make("comprl/Ladder-v0", rung="three_step")


@pytest.mark.parametrize("rung", RUNGS)
def test_reading_examples_label_each_task_with_what_its_observation_says(rung):
    env = gym.make("comprl/Ladder-v0", rung=rung, split="train")
    examples = reading_examples("train", ["answer"], "true", {"rung": rung})
    assert len(examples) == 160
    for example in examples[:40]:
        obs, _ = env.reset(options=example.reset_options)
        assert example.answer == read_answer(rung, obs)
    with pytest.raises(ConfigurationError, match="formats must be"):
        reading_examples("train", ["oracle"], "true", {"rung": rung})
