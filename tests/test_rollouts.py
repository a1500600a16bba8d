"""The rollout layer: one episode loop and one episode record for run, eval and the trainers."""

from __future__ import annotations

import gymnasium as gym
import pytest

import comprl_gym  # noqa: F401 - registers comprl/* ids
from comprl_gym.agents import RandomAgent, make_agent
from comprl_gym.cli import main
from comprl_gym.lessons.formats import plain_extractor_messages
from comprl_gym.rollouts import (
    RolloutConfig,
    RolloutWorker,
    Trajectory,
    Turn,
    read_jsonl,
    run_episode,
    write_jsonl,
)

ROOM = "comprl/MiniHack-Room-5x5-v0"


def test_run_episode_records_what_the_env_answered_to_each_action():
    env = gym.make(ROOM)
    traj = run_episode(env, make_agent("expert", env), seed=4)
    env.close()
    assert isinstance(traj, Trajectory) and traj.won and traj.score == 1.0
    assert traj.env_id == ROOM and traj.env_family == "minihack" and traj.seed == 4
    assert traj.steps == len(traj.turns) and traj.turns[-1].terminated

    # Independent truth: replay the recorded actions on a fresh env with the same seed.
    replay = gym.make(ROOM)
    observation, info = replay.reset(seed=4)
    assert traj.task == info["task"]
    total = 0.0
    for turn in traj.turns:
        assert turn.observation == observation  # what the agent saw before acting
        observation, reward, terminated, _, info = replay.step(turn.action)
        assert turn.next_observation == observation  # what that action produced
        assert turn.reward == reward
        total += reward
    replay.close()
    assert terminated and info["won"] and traj.total_reward == total


def test_transcript_pairs_each_action_with_the_observation_it_produced():
    env = gym.make(ROOM)
    traj = run_episode(env, make_agent("expert", env), seed=1)
    env.close()
    text = traj.transcript(max_chars=100_000)
    lines = text.split("\n")
    # The winning step's answer (the last observation) is in the transcript, right after the
    # action that produced it, and the outcome closes it.
    last = traj.turns[-1]
    assert f"> {last.action}\n{last.next_observation}\nOutcome: success" in text
    assert lines[-1] == f"Outcome: success (score 1.00) after {traj.steps} steps."
    assert lines[0] == f"> {traj.turns[0].action}"
    # The first observation (before any action) is not presented as an answer to an action.
    assert traj.turns[0].observation not in text
    # The extractor reads that transcript.
    prompt = plain_extractor_messages(traj)[1]["content"]
    assert traj.transcript(600) in prompt


def test_transcript_keeps_the_end_when_too_long():
    turns = [Turn(i, f"o{i}", f"a{i}", f"o{i + 1}") for i in range(100)]
    traj = Trajectory("e", ROOM, "minihack", "0", "t", 0, turns=turns, steps=100)
    text = traj.transcript(max_chars=60)
    assert text.startswith("...\n") and len(text) == 60 + 4
    assert text.endswith("> a99\no100\nOutcome: failure (score 0.00) after 100 steps.")
    assert "a98" not in text


def test_meta_carries_a_trainers_group_and_half_through_jsonl(tmp_path):
    envs = [gym.make(ROOM, max_steps=3) for _ in range(2)]
    worker = RolloutWorker(envs, agent_factory=lambda env, seed: RandomAgent(seed=seed))
    trajs = worker.run(
        seeds=[5, 6, 7],
        meta=[{"group": 0, "with_experience": True}, {"group": 0}, {"group": 1}],
    )
    for env in envs:
        env.close()
    assert [t.seed for t in trajs] == [5, 6, 7]
    assert [(t.group, t.with_experience) for t in trajs] == [(0, True), (0, False), (1, False)]
    write_jsonl(tmp_path / "t.jsonl", trajs)
    back = read_jsonl(tmp_path / "t.jsonl")
    assert back == trajs and back[2].group == 1


def test_max_turns_none_plays_to_the_end_and_a_cap_truncates():
    env = gym.make(ROOM, max_steps=5)
    [capped] = RolloutWorker(
        [env], agent=RandomAgent(seed=0), config=RolloutConfig(max_turns=2)
    ).run([0])
    [full] = RolloutWorker(
        [env], agent=RandomAgent(seed=0), config=RolloutConfig(max_turns=None)
    ).run([0])
    env.close()
    assert len(capped.turns) == 2 and capped.truncated and "max_turns=2" in capped.error
    assert full.error is None and (full.terminated or full.truncated)
    assert len(full.turns) == full.steps <= 5


def test_cli_run_plays_through_the_rollout_layer(capsys):
    assert main(["run", ROOM, "--episodes", "2", "--agent", "expert"]) == 0
    out = capsys.readouterr().out
    assert f"| {ROOM} | 2 | 1.00 | 1.00 |" in out


@pytest.mark.slow
def test_trainer_play_returns_trajectories_with_group_and_half(tmp_path):
    from comprl_gym.trainers import GRPOTrainer, TrainConfig
    from comprl_gym.trainers.tasks import TaskRef

    cfg = TrainConfig.from_dict(
        {
            "algorithm": "grpo",
            "group_size": 2,
            "max_episode_steps": 2,
            "actor": {"model": "tiny", "max_new_tokens": 4},
            "output_dir": str(tmp_path),
            "progress": False,
            "tensorboard": False,
            "eval_tasks": 0,
        }
    )
    trainer = GRPOTrainer(cfg)
    try:
        trajs = trainer.rollouts([TaskRef(ROOM, 3), TaskRef("comprl/WebShop-v0", 4)])
    finally:
        trainer.close()
    assert [(t.env_id, t.seed, t.group, t.with_experience) for t in trajs] == [
        (ROOM, 3, 0, False),
        (ROOM, 3, 0, False),
        ("comprl/WebShop-v0", 4, 1, False),
        ("comprl/WebShop-v0", 4, 1, False),
    ]
    samples = trainer.actor_samples(trajs, [0.0] * len(trajs))
    # One sample per episode (multi-turn, no fold at this size): the last turn's prompt and
    # completion, with every turn's sampled tokens, and only those, trained.
    assert len(samples) == len(trajs) and all(t.num_segments == 1 for t in trajs)
    for sample, traj in zip(samples, trajs):
        last = traj.turns[-1]
        assert sample.input_ids == last.prompt_token_ids + last.completion_token_ids
        trained = [i for i, m in zip(sample.input_ids, sample.action_mask) if m]
        assert trained == [i for turn in traj.turns for i in turn.completion_token_ids]
    # The per-turn option: one sample per model call.
    trainer.config.sample_mode = "turn"
    turns = [turn for t in trajs for turn in t.turns if turn.completion_token_ids]
    per_turn = trainer.actor_samples(trajs, [0.0] * len(trajs))
    assert len(per_turn) == len(turns) > len(trajs)
    for sample, turn in zip(per_turn, turns):
        assert sample.input_ids == turn.prompt_token_ids + turn.completion_token_ids


# ---- multi-turn, token-in/token-out --------------------------------------------------------------
LESSON = "Walk toward the staircase symbol and never stop next to a wall."


def _spy_backend(monkeypatch):
    """A real tiny backend whose generate_ids calls are recorded (prompt ids in, completion out)."""
    from comprl_gym.llm.transformers_backend import TransformersBackend

    backend = TransformersBackend("tiny")
    calls: list[tuple[list[int], list[int], list[float]]] = []
    original = backend.generate_ids

    def recording(prompts, params):
        out = original(prompts, params)
        calls.extend(
            (list(p), list(g.completion_token_ids), list(g.completion_logprobs))
            for p, g in zip(prompts, out)
        )
        return out

    monkeypatch.setattr(backend, "generate_ids", recording)
    return backend, calls


def _multi_turn_agent(backend, context: int = 2048):
    from comprl_gym.agents.llm_agent import LLMAgent, LLMAgentConfig
    from comprl_gym.agents.prompts import PromptConfig

    prompt = PromptConfig(conversation="multi_turn", max_context_tokens=context)
    return LLMAgent(backend, LLMAgentConfig(max_tokens=6, seed=0, prompt=prompt))


def test_a_three_turn_minihack_trajectory_trains_exactly_the_sampled_tokens(tmp_path, monkeypatch):
    from comprl_gym.experience import ExperienceManager
    from comprl_gym.wrappers import ExperienceAugmentedEnv

    manager = ExperienceManager(str(tmp_path / "store"))
    manager.add(
        [f"## Title: Stairs\n## Description: rooms\n## Content: {LESSON}"], env_family="minihack"
    )
    env = ExperienceAugmentedEnv(
        gym.make(ROOM, max_steps=3),
        manager,
        inject_top_k=1,
        search_budget=0,
        report_outcomes=False,
        experiences_in_observation=False,
    )
    backend, calls = _spy_backend(monkeypatch)
    [traj] = RolloutWorker([env], agent=_multi_turn_agent(backend)).run([0])
    env.close()
    manager.close()
    assert len(traj.turns) == 3 == len(calls) and traj.num_segments == 1
    assert [t.segment for t in traj.turns] == [0, 0, 0]

    # The prompt of turn t+1 starts with the FULL ids of turn t: prompt, then the completion.
    for (prompt, completion, _), (next_prompt, _, _) in zip(calls, calls[1:]):
        assert next_prompt[: len(prompt) + len(completion)] == prompt + completion
        closing = next_prompt[len(prompt) + len(completion) :][:2]
        im_end = backend.tokenizer.convert_tokens_to_ids("<|im_end|>")
        # The template's end of turn follows the reply as prompt tokens when it lacks it.
        assert closing[0] == im_end or completion[-1] == im_end

    # One sequence; the ids trained are the ids sampled, in order, and nothing else.
    [sequence] = traj.training_sequences()
    trained = [i for i, m in zip(sequence.input_ids, sequence.loss_mask) if m]
    assert trained == [i for _, completion, _ in calls for i in completion]
    assert sequence.input_ids == calls[-1][0] + calls[-1][1]
    sampled_lps = [lp for _, _, lps in calls for lp in lps]
    assert [lp for lp, m in zip(sequence.logprobs, sequence.loss_mask) if m] == sampled_lps
    # Every masked-out token is prompt text: system, user messages, template tokens.
    masked = backend.tokenizer.decode(
        [i for i, m in zip(sequence.input_ids, sequence.loss_mask) if not m]
    )
    assert masked.count("<|im_start|>user") == 3 and masked.count("<|im_start|>system") == 1
    # The experience sits in the system prompt, once, for the whole episode.
    text = backend.tokenizer.decode(sequence.input_ids)
    assert text.count(LESSON) == 1
    assert LESSON in text.split("<|im_start|>user")[0]
    assert LESSON not in traj.turns[0].observation


def test_a_tiny_context_budget_folds_into_segments_and_drops_no_sampled_token(monkeypatch):
    backend, calls = _spy_backend(monkeypatch)
    env = gym.make(ROOM, max_steps=4)
    [free] = RolloutWorker([env], agent=_multi_turn_agent(backend)).run([2])
    first_prompt = len(calls[0][0])
    calls.clear()
    # Turn 0 fits; turn 1 (the first prompt + its reply + a new message) cannot.
    budget = first_prompt + 6 + 4
    [traj] = RolloutWorker([env], agent=_multi_turn_agent(backend, context=budget)).run([2])
    env.close()
    assert len(traj.turns) == 4 and traj.num_segments >= 2
    assert traj.turns[0].segment == 0 and traj.turns[1].segment == 1
    sequences = traj.training_sequences()
    assert len(sequences) == traj.num_segments
    # Every sampled token is in exactly one segment's masked-in ids, in order.
    trained = [i for s in sequences for i, m in zip(s.input_ids, s.loss_mask) if m]
    assert trained == [i for _, completion, _ in calls for i in completion]
    # The new segment opens with the system prompt and the one-line summary of the folded turn.
    second = backend.tokenizer.decode(traj.turns[1].prompt_token_ids)
    assert second.startswith("<|im_start|>system\n")
    assert f"Earlier: 1 steps, actions: {traj.turns[0].action}." in second
    assert second.count("<|im_start|>system") == 1
    assert free.num_segments == 1


def test_one_env_object_listed_twice_is_refused_before_any_episode():
    """Two slots on one env would play two episodes on one game: the second reset replaces
    the first episode's task without a word (a trainer variant that reused slot numbers
    across task groups played every group on the last group's task)."""
    from comprl_gym.core import ConfigurationError
    from comprl_gym.rollouts import collect_rollouts

    env = gym.make(ROOM)
    with pytest.raises(ConfigurationError, match="twice"):
        collect_rollouts([env, env], RandomAgent(seed=0), [0, 1])
    [traj] = collect_rollouts([env], RandomAgent(seed=0), [0])  # one env, one slot: fine
    assert traj.seed == 0
    env.close()
