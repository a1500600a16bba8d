"""``comprl-gym validate``: a broken toy family fails with one line per fault, a sound twin of it
passes, and every registered id passes on a fast subset of seeds (the CI run)."""

from __future__ import annotations

import json
import os
import time
from typing import Any, ClassVar

import gymnasium as gym
import pytest

from comprl_gym.cli import main
from comprl_gym.core import TextEnv, Transition
from comprl_gym.evaluation import validate as validate_module
from comprl_gym.evaluation.validate import ValidationProfile, validate_env
from comprl_gym.registration import ENV_TABLE

WORDS = ("pineapple", "harmonica", "lighthouse", "sandstone", "marmalade")


class GuessWordEnv(TextEnv):
    """Guess the hidden word: one guess ends the episode. ``broken=True`` adds three faults:
    the word is printed in the observation, it is drawn without the seed, and a non-ASCII
    action raises."""

    env_family: ClassVar[str] = "toy-guess"

    def __init__(self, broken: bool = False, max_steps: int = 5):
        super().__init__(max_steps=max_steps)
        self.broken = broken
        self.answer = ""

    def _reset_task(self, seed: int, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        if self.broken:
            # Not the episode seed: the same seed gives another word.
            self.answer = WORDS[int.from_bytes(os.urandom(2)) % len(WORDS)] + str(time.time_ns())
        else:
            self.answer = WORDS[seed % len(WORDS)]
        self.task = "Guess the hidden word."
        self.task_id = f"toy/{seed}"
        hint = f" (debug: the word is {self.answer})" if self.broken else ""
        return "Guess the hidden word with one action." + hint, {}

    def _step_task(self, action: str) -> Transition:
        if self.broken and not action.isascii():
            raise UnicodeError("only ASCII guesses")
        won = action.strip() == self.answer
        return Transition(
            observation="Right!" if won else "Wrong.",
            reward=float(won),
            terminated=True,
            won=won,
            score=float(won),
        )

    def admissible_actions(self) -> list[str] | None:
        return None


class GuessWordExpert:
    def __init__(self, env: Any):
        self.env = env

    def reset(self, task: str, info: dict[str, Any]) -> None:
        pass

    def act(self, observation: str, info: dict[str, Any]) -> str:
        return self.env.unwrapped.answer


#: Its first observation is the same for every seed (the word is hidden): seeds_vary=False.
TOY_PROFILE = ValidationProfile(
    seeds_vary=False,
    solution_texts=lambda env, info: [env.unwrapped.answer],
    expert=GuessWordExpert,
)


@pytest.fixture
def toy_ids(monkeypatch):
    ids = {"broken": "comprl-test/GuessWord-Broken-v0", "sound": "comprl-test/GuessWord-v0"}
    for kind, env_id in ids.items():
        if env_id not in gym.registry:
            gym.register(env_id, entry_point=GuessWordEnv, kwargs={"broken": kind == "broken"})
    monkeypatch.setitem(validate_module.FAMILY_PROFILES, "toy-guess", TOY_PROFILE)
    return ids


def test_broken_toy_family_fails_with_one_line_per_fault(toy_ids):
    report = validate_env(toy_ids["broken"], seeds=[0, 1])
    assert not report.passed
    assert sorted(report.faults) == ["bad_actions", "determinism", "leak"]
    lines = report.lines()
    assert len(lines) == 3 and all(line.startswith(toy_ids["broken"] + ": ") for line in lines)
    assert "raised UnicodeError" in report.faults["bad_actions"]
    assert "seed 0, step 0: the observation contains the solution text" in report.faults["leak"]
    assert "check_env" in report.faults["determinism"]  # gymnasium saw it first: one line


def test_sound_twin_passes(toy_ids):
    report = validate_env(toy_ids["sound"], seeds=[0, 1, 2])
    assert report.passed, report.lines()
    assert set(report.seconds) == set(validate_module.CHECKS)


def test_cli_exit_code_and_json(toy_ids, tmp_path, capsys):
    out = tmp_path / "report.json"
    code = main(["validate", toy_ids["broken"], "--seeds", "0", "1", "--json", str(out)])
    printed = capsys.readouterr().out
    assert code == 1
    assert sum(line.startswith(toy_ids["broken"] + ": ") for line in printed.splitlines()) == 3
    data = json.loads(out.read_text())
    assert data["passed"] is False and data["reports"][0]["faults"].keys() == {
        "bad_actions",
        "determinism",
        "leak",
    }
    assert main(["validate", toy_ids["sound"], "--seeds", "0", "1"]) == 0


def test_a_verifier_that_pays_for_doing_nothing_fails(toy_ids, monkeypatch):
    """OpenEnv's motivating case: an empty answer was paid 1.0."""

    def pays_for_nothing(self, action):
        return Transition(observation="Thanks.", reward=1.0, terminated=True, won=True, score=1.0)

    monkeypatch.setattr(GuessWordEnv, "_step_task", pays_for_nothing)
    profile = ValidationProfile(seeds_vary=False, expert=GuessWordExpert, noop_actions=("submit",))
    report = validate_env(toy_ids["sound"], seeds=[0, 1], profile=profile)
    assert set(report.faults) == {"noop", "random"}


#: A fast subset of seeds per family for CI: ALFWorld resets and SWE-bench sandboxes cost
#: seconds each.
CI_SEEDS = {"alfworld": [0, 1], "swebench": [0, 1], "webshop": [0, 1, 2], "minihack": [0, 1, 2]}


@pytest.mark.slow
@pytest.mark.parametrize("env_id", list(ENV_TABLE))
def test_every_registered_id_validates(env_id):
    family = ENV_TABLE[env_id].family
    report = validate_env(env_id, seeds=CI_SEEDS.get(family, [0, 1]))
    assert report.passed, "\n".join(report.lines())
