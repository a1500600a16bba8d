"""TRL's GRPOTrainer on a comprl env through comprl_gym.integrations.trl."""

from __future__ import annotations

import gymnasium as gym
import pytest

pytest.importorskip("trl", reason="needs TRL (pip install comprl-gym[bench])")

from comprl_gym.agents import make_agent  # noqa: E402
from comprl_gym.integrations.trl import (  # noqa: E402
    ComprlToolEnv,
    environment_factory,
    prompt_dataset,
    use_tool_chat_template,
)

MINIHACK = "comprl/MiniHack-Room-Random-5x5-v0"


def test_the_act_tool_plays_the_env_as_gym_does():
    """The expert's winning episode, replayed through the tool, earns the same return."""
    tool_env = ComprlToolEnv(MINIHACK)
    local = gym.make(MINIHACK)
    expert = make_agent("expert", local)
    observation, info = local.reset(seed=4)
    assert observation in tool_env.reset(seed=4, prompt="a row column, ignored")
    expert.reset(info["task"], info)
    total, done = 0.0, False
    while not done:
        action = expert.act(observation, info)
        observation, reward, terminated, truncated, info = local.step(action)
        total += reward
        done = terminated or truncated
        assert tool_env.act(action).startswith(observation)
    assert info["won"] and total > 0 and tool_env.get_reward() == pytest.approx(total)
    assert tool_env.act("north") == "The game is over."


class CountingEnv(ComprlToolEnv):
    """Records every episode's return the trainer read."""

    returns: list[float] = []

    def get_reward(self) -> float:
        reward = super().get_reward()
        CountingEnv.returns.append(reward)
        return reward


@pytest.mark.slow
@pytest.mark.parametrize("model_name", ["tiny", "smollm2"])
def test_two_grpo_steps_with_env_rewards(tmp_path, model_name):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from comprl_gym.llm.models import resolve_model

    path = resolve_model(model_name)
    tokenizer = use_tool_chat_template(AutoTokenizer.from_pretrained(path))
    model = AutoModelForCausalLM.from_pretrained(path)
    CountingEnv.returns = []
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        args=GRPOConfig(
            output_dir=str(tmp_path),
            max_steps=2,
            per_device_train_batch_size=2,
            num_generations=2,
            max_completion_length=24,
            max_tool_calling_iterations=2,
            learning_rate=1e-3,
            beta=0.0,
            use_cpu=True,
            bf16=False,
            report_to=[],
            logging_steps=1,
            save_strategy="no",
        ),
        train_dataset=prompt_dataset(MINIHACK, episodes=8),
        environment_factory=lambda: CountingEnv(MINIHACK),
    )
    trainer.train()
    logged = [entry for entry in trainer.state.log_history if "rewards/CountingEnv/mean" in entry]
    assert len(logged) == 2
    # Each step scored its rollouts with the envs' own returns.
    assert len(CountingEnv.returns) >= 4
    mean_first = sum(CountingEnv.returns[:2]) / 2
    assert logged[0]["rewards/CountingEnv/mean"] == pytest.approx(mean_first, abs=1e-6)
    assert environment_factory(MINIHACK)().reset(seed=0).startswith("\n\n")
    assert trainer.state.global_step == 2
