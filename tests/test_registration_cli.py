"""Registration, the README's id table, and the ``comprl-gym`` command."""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest

import comprl_gym
from comprl_gym.cli import build_parser, main
from comprl_gym.envs.alfworld import ID_TASK_TYPES
from comprl_gym.registration import ENV_TABLE

ROOT = Path(__file__).resolve().parents[1]


def test_every_id_is_registered_with_gymnasium():
    for env_id in ENV_TABLE:
        assert env_id in gym.registry, env_id


def test_the_issue_ids_exist():
    sizes = ("5x5", "15x15")
    rooms = ("Room", "Room-Random", "Room-Dark", "Room-Monster", "Room-Trap", "Room-Ultimate")
    expected = {f"comprl/MiniHack-{r}-{s}-v0" for r in rooms for s in sizes}
    expected |= {f"comprl/MiniHack-Corridor-R{n}-v0" for n in (2, 3, 5)}
    expected |= {
        "comprl/MiniHack-KeyRoom-S5-v0",
        "comprl/MiniHack-MazeWalk-9x9-v0",
        "comprl/MiniHack-MazeWalk-15x15-v0",
        "comprl/MiniHack-MultiRoom-N2-v0",
        "comprl/MiniHack-MultiRoom-N4-v0",
        "comprl/MiniHack-Room-East-4x3-v0",  # generated (envs/minihack/layouts.py)
        "comprl/MiniHack-Corridor-North-4-v0",  # generated, the demo task
        "comprl/MiniHack-v0",
        "comprl/ALFWorld-v0",
        "comprl/WebShop-v0",
        "comprl/SWEBench-v0",
        "comprl/Memory-Fork-v0",  # the memory family (issue 29)
        "comprl/Memory-Landmark-v0",
        "comprl/Ladder-v0",  # the actor's known-answer ladder (issue 54)
    }
    expected |= {f"comprl/ALFWorld-{name}-v0" for name in ID_TASK_TYPES}
    assert expected == set(ENV_TABLE)


def test_entry_points_name_real_classes():
    for entry in ENV_TABLE.values():
        module, _, cls = entry.entry_point.partition(":")
        assert importlib.util.find_spec(module) is not None, entry.entry_point
        assert hasattr(importlib.import_module(module), cls), entry.entry_point


def test_register_envs_is_idempotent():
    before = len(gym.registry)
    comprl_gym.register_envs()
    assert len(gym.registry) == before


def test_readme_table_is_current():
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "update_readme.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr


def test_cli_envs_lists_every_id(capsys):
    assert main(["envs"]) == 0
    out = capsys.readouterr().out
    assert all(env_id in out for env_id in ENV_TABLE)


def test_cli_run_rejects_unknown_patterns(capsys):
    assert main(["run", "comprl/NoSuch-*", "--episodes", "1"]) == 2
    assert "no comprl id matches" in capsys.readouterr().err


def test_cli_is_installed_as_a_console_script():
    result = subprocess.run(
        [str(Path(sys.executable).parent / "comprl-gym"), "envs", "--family", "webshop"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0 and "comprl/WebShop-v0" in result.stdout


@pytest.mark.slow
def test_cli_play_runs_a_scripted_session():
    result = subprocess.run(
        [str(Path(sys.executable).parent / "comprl-gym"), "play", "comprl/MiniHack-Room-5x5-v0"],
        input="help\nnort\nwait\nquit\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "Task:" in result.stdout and "Invalid action 'nort'" in result.stdout


def _subcommands(parser: argparse.ArgumentParser) -> list[str]:
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return [name for action in actions for name in action.choices]


def test_help_works_for_the_top_level_and_every_subcommand():
    """Run as a user would; argparse formats help lazily, so a stray ``%`` only shows here."""
    commands = _subcommands(build_parser())
    assert {"envs", "play", "run", "eval", "leaderboard", "train"} <= set(commands)
    runs = {
        name: subprocess.Popen(
            [sys.executable, "-m", "comprl_gym.cli", *([name] if name else []), "--help"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ["", *commands]
    }
    outputs = {}
    for name, process in runs.items():
        outputs[name], err = process.communicate(timeout=180)
        assert process.returncode == 0, f"comprl-gym {name} --help failed:\n{err[-2000:]}"
        assert outputs[name].startswith(f"usage: comprl-gym {name}".rstrip()), outputs[name][:200]
    assert "95% intervals" in outputs[""]  # the escaped % reads as one
    assert all(name in outputs[""] for name in commands)
