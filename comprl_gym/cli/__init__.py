"""The ``comprl-gym`` command: every sub-command, one module per group of them.

Each module below holds its commands' functions, each with its parser beside it
(``add_<command>(sub)``), and the examples its help ends with; :data:`COMMANDS` puts them
together in the order ``comprl-gym --help`` lists them. What a command does beyond reading
its arguments lives in the library (:mod:`comprl_gym.evaluation`, :mod:`comprl_gym.trainers`,
...); the heavy engines (torch, transformers, vLLM, FastAPI) load only when a command that
needs them runs.

- :mod:`.envs`: ``envs``, ``play``, ``run``, ``validate``
- :mod:`.stream`: ``stream``
- :mod:`.lessons`: ``lessons``, ``lesson``
- :mod:`.evaluate`: ``eval``, ``suites``
- :mod:`.leaderboard`: ``leaderboard``, ``table``
- :mod:`.train`: ``train``, ``doctor``
- :mod:`.probe`: ``probe``
- :mod:`.serve`: ``serve``
"""

from __future__ import annotations

import argparse
import os
import sys

import comprl_gym
from comprl_gym.cli import envs, evaluate, leaderboard, lessons, probe, serve, stream, train

#: Every command's parser, in the order ``comprl-gym --help`` lists them.
COMMANDS = (
    envs.add_envs,
    envs.add_play,
    envs.add_run,
    stream.add_stream,
    lessons.add_lessons,
    lessons.add_lesson,
    evaluate.add_eval,
    leaderboard.add_leaderboard,
    envs.add_validate,
    evaluate.add_suites,
    leaderboard.add_table,
    train.add_train,
    train.add_doctor,
    probe.add_probe,
    serve.add_serve,
)

#: Each command's examples, shown at the end of its --help.
EXAMPLES = {
    "comprl-gym": """examples:
  comprl-gym envs
  comprl-gym run 'comprl/MiniHack-Room-*' --agent expert --episodes 5
  comprl-gym eval comprl/Memory-Fork-v0 --agent hf:smollm2 --episodes 20 --out results/mine
  comprl-gym train --config configs/demo.yaml""",
    **envs.EXAMPLES,
    **stream.EXAMPLES,
    **lessons.EXAMPLES,
    **evaluate.EXAMPLES,
    **leaderboard.EXAMPLES,
    **train.EXAMPLES,
    **probe.EXAMPLES,
    **serve.EXAMPLES,
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="comprl-gym",
        description="Train and evaluate LLM agents that learn from experience. "
        "`comprl-gym COMMAND --help` shows each command's options and examples.",
        epilog=EXAMPLES["comprl-gym"],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=comprl_gym.__version__)
    sub = parser.add_subparsers(dest="command", required=True)
    for add in COMMANDS:
        add(sub)
    for name, command in sub.choices.items():
        # Every command's help ends with examples a user can copy (tests/test_cli_help.py).
        command.epilog = EXAMPLES[name]
        command.formatter_class = argparse.RawDescriptionHelpFormatter
    return parser


#: The exit status of a command whose reader closed the pipe early (``| head``): a shell's
#: 128 + SIGPIPE, the status other tools end with there.
CLOSED_PIPE = 141


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        status = int(args.func(args) or 0)
        sys.stdout.flush()  # here, not at exit, so that a closed pipe is caught below
        return status
    except comprl_gym.ComprlGymError as exc:
        print(f"comprl-gym: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader left (`comprl-gym envs | head -1`): end quietly. Standard output is
        # pointed at /dev/null so that Python's flush at exit raises no second error.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return CLOSED_PIPE
