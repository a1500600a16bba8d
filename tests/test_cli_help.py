"""Every ``comprl-gym`` command's help is written for users: it ends with examples that the
command accepts, every option says what it does, and no help mentions an issue number or
shows markup meant for the API reference."""

from __future__ import annotations

import argparse
import re
import shlex

import pytest

from comprl_gym.cli import EXAMPLES, build_parser

PARSER = build_parser()
COMMANDS = next(a for a in PARSER._actions if isinstance(a, argparse._SubParsersAction)).choices
#: Markup of docstrings (reST roles, literals, doctests) and internal references.
NOT_FOR_USERS = re.compile(r"``|:(?:func|mod|class|data|attr|meth):|>>>|\bissues? \d+", re.I)


def example_commands(text: str) -> list[list[str]]:
    """The ``comprl-gym`` lines of an examples block, continuations joined, a pipe's reader
    dropped."""
    joined = text.replace("\\\n", " ")
    lines = [line.strip().split(" | ")[0] for line in joined.splitlines()]
    return [shlex.split(line)[1:] for line in lines if line.startswith("comprl-gym ")]


def test_every_command_has_examples():
    assert set(EXAMPLES) == {"comprl-gym", *COMMANDS}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_commands_help_has_examples_it_accepts_and_help_for_every_option(name):
    command = COMMANDS[name]
    text = command.format_help()
    assert "examples:" in text and f"comprl-gym {name}" in text.split("examples:")[1]
    assert not NOT_FOR_USERS.search(text), NOT_FOR_USERS.search(text).group()
    undocumented = [
        action.option_strings or action.dest
        for action in command._actions
        if not isinstance(action, argparse._HelpAction) and not (action.help or "").strip()
    ]
    assert not undocumented, f"{name}: options without help: {undocumented}"
    examples = example_commands(EXAMPLES[name])
    assert examples
    for argv in examples:
        args = PARSER.parse_args(argv)  # an unknown option or a missing argument exits here
        assert args.command == argv[0]


def test_the_main_help_lists_every_command_with_examples_and_no_markup():
    text = PARSER.format_help()
    assert not NOT_FOR_USERS.search(text)
    assert all(name in text for name in COMMANDS)
    for argv in example_commands(EXAMPLES["comprl-gym"]):
        PARSER.parse_args(argv)
