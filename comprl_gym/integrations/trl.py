"""Train on comprl envs with TRL's ``GRPOTrainer`` (its ``environment_factory``).

TRL (1.16) gives each rollout its own environment object: ``reset(**row)`` returns text
appended to the prompt, every public method is a tool the model may call, and
``get_reward()`` scores the finished rollout. :class:`ComprlToolEnv` is that object for any
comprl id, in process or served (``url=``, see ``comprl-gym serve``): one tool, ``act``, takes
an action string; the rollout's reward is the sum of the env's rewards.

Example (the README has the full recipe)::

    from trl import GRPOConfig, GRPOTrainer
    from comprl_gym.integrations.trl import environment_factory, prompt_dataset

    env_id = "comprl/MiniHack-Room-Random-5x5-v0"
    trainer = GRPOTrainer(
        model="HuggingFaceTB/SmolLM2-135M-Instruct",
        args=GRPOConfig(output_dir="out", max_steps=100, num_generations=4),
        train_dataset=prompt_dataset(env_id, episodes=400),
        environment_factory=environment_factory(env_id),  # or url="http://HOST:PORT"
    )
    trainer.train()

A model whose chat template cannot render tool calls is refused by TRL;
:func:`use_tool_chat_template` gives its tokenizer TRL's Qwen2.5 template, which can.

>>> env = ComprlToolEnv("comprl/WebShop-v0", split="test")
>>> "search" in env.reset(seed=0)
True
>>> env.act("search[blue shoes]")[:40] != "", env.get_reward()
(True, 0.0)
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import gymnasium as gym

import comprl_gym  # noqa: F401  (registers the ids)

#: What the model reads above the env's first observation.
INSTRUCTION = (
    "You are playing a text game. Call the `act` tool with one action at a time until the "
    "game ends; each call returns what you see next."
)


class ComprlToolEnv:
    """One comprl episode per rollout, played through the ``act`` tool.

    Args:
        env_id: a comprl id.
        url: an env server (``comprl-gym serve``); in process when ``None``.
        token: the server's bearer token.
        **env_kwargs: passed to ``gym.make`` (in process only; a server has its own).
    """

    def __init__(
        self, env_id: str, url: str | None = None, token: str | None = None, **env_kwargs: Any
    ):
        if url is None:
            self._env = gym.make(env_id, **env_kwargs)
        else:
            self._env = gym.make("comprl/Remote-v0", url=url, env_id=env_id, token=token)
        self._return = 0.0
        self._over = False

    def reset(self, seed: int | None = None, **row: Any) -> str:
        """Start an episode (``seed`` from the dataset row) and return its first observation."""
        observation, info = self._env.reset(seed=seed)
        self._return, self._over = 0.0, False
        return f"\n\n{observation}{_allowed(info)}"

    def act(self, action: str) -> str:
        """Take one action in the game.

        Args:
            action: The action to take, for example "north" or "search[red shoes]".

        Returns:
            What the game shows after the action.
        """
        if self._over:
            return "The game is over."
        observation, reward, terminated, truncated, info = self._env.step(action)
        self._return += float(reward)
        self._over = terminated or truncated
        end = "\nThe game is over." if self._over else _allowed(info)
        return f"{observation}{end}"

    def get_reward(self) -> float:
        """The sum of the env's rewards in this rollout's episode."""
        return self._return


def _allowed(info: dict[str, Any]) -> str:
    allowed = info.get("admissible_actions")
    return f"\nAllowed actions: {', '.join(allowed)}" if allowed else ""


def environment_factory(
    env_id: str, url: str | None = None, token: str | None = None, **env_kwargs: Any
) -> Callable[[], ComprlToolEnv]:
    """The zero-argument callable TRL's ``environment_factory=`` takes."""
    return functools.partial(ComprlToolEnv, env_id, url, token, **env_kwargs)


def prompt_dataset(env_id: str, episodes: int, seed: int = 0) -> Any:
    """A ``datasets.Dataset`` of ``episodes`` rows: the instruction and one env seed each."""
    from datasets import Dataset

    return Dataset.from_dict(
        {
            "prompt": [[{"role": "user", "content": f"{INSTRUCTION} ({env_id})"}]] * episodes,
            "seed": list(range(seed, seed + episodes)),
        }
    )


def use_tool_chat_template(tokenizer: Any) -> Any:
    """Give ``tokenizer`` TRL's Qwen2.5 chat template when its own cannot render tool calls.

    TRL parses the model's tool calls with a schema it knows for a handful of templates;
    Qwen2.5's (``<tool_call>{json}</tool_call>``) is one and needs no special tokens.
    """
    from trl.chat_template_utils import qwen2_5_chat_template, supports_tool_calling

    if not supports_tool_calling(tokenizer):
        tokenizer.chat_template = qwen2_5_chat_template
    return tokenizer
