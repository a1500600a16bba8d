"""The text-env contract, checked on a small env defined here (no game engine needed)."""

from __future__ import annotations

import importlib
import re
import unicodedata
from typing import Any

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import comprl_gym
from comprl_gym.core import (
    INFO_KEYS,
    MAX_ACTION_CHARS,
    TextEnv,
    Transition,
    UnicodeText,
    invalid_action_message,
    normalize_action_text,
    printable_text,
)


class GuessEnv(TextEnv):
    """Guess a hidden colour; the seed decides which. Unicode in observations on purpose."""

    env_family = "minihack"
    COLOURS = ["red", "green", "blue", "café-au-lait"]

    def __init__(self, max_steps: int = 5, render_mode: str | None = None):
        super().__init__(max_steps=max_steps, render_mode=render_mode)
        self._secret = ""

    def _reset_task(self, seed: int, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self._secret = self.COLOURS[seed % len(self.COLOURS)]
        self.task = "guess the colour → one word"
        self.task_id = f"guess-{seed % len(self.COLOURS)}"
        return f"Pick a colour: {', '.join(self.admissible_actions())}", {}

    def _step_task(self, action: str) -> Transition:
        guess = normalize_action_text(action)
        allowed = [normalize_action_text(c) for c in self.COLOURS]
        if guess not in allowed:
            return self._refuse(action, "unknown colour")
        won = guess == normalize_action_text(self._secret)
        return Transition(
            observation="Right!" if won else "Wrong, try again ✗",
            reward=float(won),
            terminated=won,
            won=won,
            score=float(won),
        )

    def admissible_actions(self) -> list[str]:
        return list(self.COLOURS)


def test_check_env_passes():
    check_env(GuessEnv())


def test_info_carries_every_contract_key_on_reset_and_step():
    env = GuessEnv()
    _, info = env.reset(seed=3)
    assert set(INFO_KEYS) <= set(info)
    _, _, _, _, info = env.step("red")
    assert set(INFO_KEYS) <= set(info)
    assert info["step"] == 1


@pytest.mark.parametrize(
    "action",
    ["", "   ", "x" * 10_000, "ünïcødé ✓", "nort", "click[buy now]", b"\xff\xfe", None, 42],
)
def test_bad_actions_never_raise_and_count_as_invalid_steps(action):
    env = GuessEnv()
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(action)
    assert info["invalid_action"] is True
    assert reward == 0.0 and not terminated
    assert "Allowed actions: red, green, blue" in obs
    assert info["step"] == 1
    # the next valid action works
    obs, reward, terminated, _, info = env.step("red")
    assert info["invalid_action"] is False and terminated and reward == 1.0


def test_near_miss_gets_a_suggestion():
    assert "Did you mean 'north'?" in invalid_action_message("nort", "unknown", ["north", "east"])


def test_truncation_at_max_steps_and_not_before():
    env = GuessEnv(max_steps=3)
    env.reset(seed=0)  # secret: red
    flags = [env.step("blue")[2:4] for _ in range(3)]
    assert flags == [(False, False), (False, False), (False, True)]


def test_seed_sequence_is_reproducible():
    def task_ids(seed):
        env = GuessEnv()
        ids = [env.reset(seed=seed)[1]["task_id"]]
        ids += [env.reset()[1]["task_id"] for _ in range(6)]
        return ids

    assert task_ids(11) == task_ids(11)


def test_render_ansi_returns_current_view():
    env = GuessEnv(render_mode="ansi")
    obs, _ = env.reset(seed=1)
    assert env.render() == obs
    obs, *_ = env.step("red")
    assert env.render() == obs


def test_bad_constructor_arguments_raise_configuration_errors():
    with pytest.raises(comprl_gym.ConfigurationError, match="max_steps"):
        GuessEnv(max_steps=0)
    with pytest.raises(comprl_gym.ConfigurationError, match="render_mode"):
        GuessEnv(render_mode="human")


def test_unicode_text_space_holds_any_string_up_to_its_length():
    space = UnicodeText(5)
    assert space.contains("✓✓✓✓✓") and not space.contains("toolong") and not space.contains(3)
    assert space.contains(space.sample())
    assert GuessEnv().action_space.max_length == MAX_ACTION_CHARS


@pytest.mark.parametrize("vector_cls", [gym.vector.SyncVectorEnv, gym.vector.AsyncVectorEnv])
def test_vector_envs_carry_unicode_observations(vector_cls):
    envs = vector_cls([GuessEnv for _ in range(3)])
    try:
        obs, infos = envs.reset(seed=[0, 1, 3])
        assert list(obs) == [obs[0]] * 3 and "Pick a colour" in obs[0]
        obs, *_, infos = envs.step(["nope", "blue", "red"])
        assert "Allowed actions" in obs[0] and "✗" in obs[1]
        assert list(infos["invalid_action"]) == [True, False, False]
        obs, rewards, terminated, _, infos = envs.step(["red", "green", "café-au-lait"])
        assert list(rewards) == [1.0, 1.0, 1.0]
        assert all(terminated)
    finally:
        envs.close()


# ---- printable observations (issue 18) -------------------------------------------------------
@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        (b"\x00\xff\xfe garbage \x1b[2J", "\\x00\ufffd\ufffd garbage \\x1b[2J"),
        ("tab\there\nline\r\nnext\rover", "tab\there\nline\nnext\\x0dover"),
        ("\x07\x08\x7f\x85\x9b31m", "\\x07\\x08\\x7f\\x85\\x9b31m"),
        ("lone \udcff surrogate", "lone \ufffd surrogate"),
        ("héllo → wörld ✓ 你好", "héllo → wörld ✓ 你好"),
        (b"caf\xc3\xa9", "café"),
    ],
)
def test_printable_text_shows_control_characters_and_keeps_the_rest(raw, shown):
    assert printable_text(raw) == shown


def test_printable_text_leaves_no_control_character_in_all_of_unicode():
    every = "".join(chr(c) for c in range(0x110000))
    shown = printable_text(every)
    shown.encode("utf-8")  # no lone surrogate left
    kinds = {unicodedata.category(c) for c in shown if c not in "\n\t"}
    assert "Cc" not in kinds and "Cs" not in kinds
    # Everything printable is kept as it was, in order.
    assert shown.startswith("\\x00\\x01") and "\t\n" in shown and ' !"#' in shown


class NoisyEnv(GuessEnv):
    """A family whose engine prints raw terminal bytes (a shell, a game log)."""

    def _reset_task(self, seed: int, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        super()._reset_task(seed, options)
        return "start\x00 \x1b[2J\udcff\r\n", {}

    def _step_task(self, action: str) -> Transition:
        transition = super()._step_task(action)
        transition.observation = "bell\x07 \x9b31m " + transition.observation
        return transition


def test_text_env_shows_every_observation_as_printable_text():
    env = NoisyEnv(render_mode="ansi")
    obs, _ = env.reset(seed=0)
    assert obs == "start\\x00 \\x1b[2J\ufffd\n" and env.render() == obs
    obs, *_ = env.step("purple")  # refused by the base class: sanitised as well
    assert obs.startswith("bell\\x07 \\x9b31m Invalid action 'purple'") and env.render() == obs
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", obs)


def test_every_family_shows_observations_through_text_env():
    """The base class sanitises centrally, so no family may bypass its reset and step."""
    for env_id, spec in list(gym.registry.items()):
        if not env_id.startswith("comprl/"):
            continue
        module, _, name = spec.entry_point.partition(":")
        cls = getattr(importlib.import_module(module), name)
        assert issubclass(cls, TextEnv), env_id
        assert cls.reset is TextEnv.reset and cls.step is TextEnv.step, env_id
