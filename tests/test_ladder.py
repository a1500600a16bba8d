"""The known-answer ladder: its rungs' targets worked by hand, and its cheapest rung climbed by
both learners on the tiny model within a budget (the library's own extractor path for RL)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from comprl_gym.lessons.probe import load_probe_episodes
from comprl_gym.trainers.config import ExperienceSettings, ModelSettings
from comprl_gym.trainers.ladder import EXTRACTOR_RUNGS, climb


@pytest.fixture(scope="module")
def episodes():
    return load_probe_episodes("memory")


def test_each_rungs_target_by_hand(episodes):
    # probe episode 0 walked east and won (stairs east); episode 1 walked west and lost.
    won_east, lost_west = episodes[0], episodes[1]
    assert (won_east.turns[0].action, won_east.won) == ("east", True)
    assert (lost_west.turns[0].action, lost_west.won) == ("west", False)
    targets = {
        name: [r.target(won_east), r.target(lost_west)] for name, r in EXTRACTOR_RUNGS.items()
    }
    assert targets == {
        "constant": ["east", "east"],
        "outcome": ["east", "west"],
        "rule": ["east", "east"],  # the stairs of both are east
    }


@pytest.mark.slow
@pytest.mark.parametrize("learner", ["supervised", "rl"])
def test_the_constant_rung_is_climbed_by_both_learners(episodes, learner):
    """The tiny random model, near a coin between the sides at first, learns to name east for
    every held-out probe episode with probability above 0.9, by cross entropy and by CISPO from
    a perfect reward (scored as sampled), in 10 updates of 8 lessons."""
    model = ModelSettings(model="tiny", lr=1e-2, temperature=1.0, score="sampled", max_new_tokens=4)
    result = climb(
        "constant",
        learner,
        model,
        ExperienceSettings(extractor_format="stem", extractor_baseline="batch"),
        max_updates=10,
        eval_every=5,
        batch_size=8,
        stop_when_solved=False,
        train_episodes=episodes,  # the constant rung ignores the context
        eval_episodes=episodes,
    )
    first, last = result.curve[0], result.curve[-1]
    assert first.mean_p_target < 0.6 and first.mean_choice_entropy > 0.6
    assert last.updates == 10 and last.mean_p_target > 0.7
    assert last.greedy_right == 32


@pytest.mark.slow
def test_the_actors_constant_rung_is_climbed_under_supervision_on_the_tiny_model():
    """The actor's ladder runs the library's trainer and the warm-up's supervised step: the
    tiny random model, at a coin between the two actions' numbers at first, wins every
    held-out task of the constant rung (always west) greedily after 20 cross-entropy steps (P(west) above 0.7)."""
    from comprl_gym.trainers.config import TrainConfig
    from comprl_gym.trainers.ladder import climb_actor

    config = TrainConfig.from_yaml(
        Path(__file__).parents[1] / "configs" / "actor-ladder.yaml",
        ["actor.model=tiny", "actor.lora.top_layers=1", "torch_threads=1"],
    )
    result = climb_actor(
        "constant", "supervised", config, max_updates=20, eval_every=20, eval_tasks=8,
        supervised_lr=3e-2, batch_size=8, stop_when_solved=False,
    )  # fmt: skip
    first, last = result.curve[0], result.curve[-1]
    assert first.greedy_right == 0 and abs(first.mean_p_target - 0.5) < 0.1
    assert last.updates == 20 and last.greedy_right == 8 and last.mean_p_target > 0.7
    assert last.greedy_right_by_kind == {"west": 8}


@pytest.mark.slow
def test_the_actors_constant_rung_is_climbed_by_rl_choosing_among_the_listed_numbers():
    """The library's GRPO trainer with the actor's choice (choose_listed_action, the loss
    over the two numbers, a hot sampler, positive advantages only): the tiny random model, at
    a coin between the numbers at first, wins every held-out constant task greedily."""
    from comprl_gym.trainers.config import TrainConfig
    from comprl_gym.trainers.ladder import climb_actor

    config = TrainConfig.from_yaml(
        Path(__file__).parents[1] / "configs" / "actor-ladder.yaml",
        [
            "actor.model=tiny", "actor.lora.top_layers=1", "torch_threads=1",
            "choose_listed_action=true", "actor.score=choices", "actor.temperature=10",
            "positive_advantages_only=true", "actor.lr=3e-2", "groups_per_iteration=4",
            "group_size=4",
        ],
    )  # fmt: skip
    result = climb_actor(
        "constant", "rl", config, max_updates=20, eval_every=20, eval_tasks=8,
        stop_when_solved=False,
    )  # fmt: skip
    first, last = result.curve[0], result.curve[-1]
    assert first.greedy_right == 0 and abs(first.mean_p_target - 0.5) < 0.1
    assert last.updates == 20 and last.greedy_right == 8 and last.mean_p_target > 0.7
    # The loss scored the two numbers only: its entropy is within ln 2 (over the tiny model's
    # whole vocabulary it is several nats).
    assert 0 < last.update_entropy <= math.log(2) + 1e-6


def test_the_every_fork_control_labels_each_fork_in_the_actors_own_conversation():
    """two_step's supervised control: each training hall played through the actor's
    multi-turn conversation with every reply forced to the right branch; the sample trains
    exactly the two replies, each the number of that fork's right branch (east is listed
    first) and the end of the reply, and the second prompt holds the env's answer to the
    first."""
    import dataclasses
    import tempfile

    from comprl_gym.envs.ladder.env import right_branches
    from comprl_gym.trainers import make_trainer
    from comprl_gym.trainers.config import TrainConfig
    from comprl_gym.trainers.ladder import every_fork_samples

    config = TrainConfig.from_yaml(
        Path(__file__).parents[1] / "configs" / "actor-ladder.yaml",
        ["actor.model=tiny", "actor.lora.top_layers=1", "torch_threads=1",
         "env_kwargs.comprl/Ladder-v0.rung=two_step"],
    )  # fmt: skip
    with tempfile.TemporaryDirectory() as folder:
        trainer = make_trainer(dataclasses.replace(config, output_dir=folder, progress=False))
        try:
            samples = every_fork_samples(trainer)
            tokenizer = trainer.actor.tokenizer
        finally:
            trainer.close()
    assert len(samples) == 160
    for position in (0, 1, 77, 159):
        sample = samples[position]
        assert sample.meta["task"] == f"ladder/two_step/train/{position}"
        trained = [t for t, m in zip(sample.input_ids, sample.action_mask) if m]
        numbers = {"east": "1", "west": "2"}
        end = tokenizer.eos_token
        assert tokenizer.decode(trained) == "".join(
            numbers[side] + end for side in right_branches("two_step", "train", position)
        )
        assert "to a second fork" in tokenizer.decode(sample.input_ids)
