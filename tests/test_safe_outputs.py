"""Output paths a user names: ``-`` is standard output, a symbolic link stays a link, a device
or a pipe is written where it is, a folder is refused, and a reader closing the pipe early ends
the command quietly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest
from conftest import REPO_ROOT

from comprl_gym.core import ConfigurationError
from comprl_gym.utils import atomic_write_bytes, atomic_write_json, writes_to_stdout

#: A fast id and one seed: what validate checks is not the point here.
VALIDATE = ["validate", "comprl/MiniHack-Room-East-4x3-v0", "--seeds", "0", "--no-progress"]


def cli(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), HF_HUB_OFFLINE="1")
    return subprocess.run(
        [sys.executable, "-m", "comprl_gym.cli", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        **kwargs,
    )


def test_dash_is_standard_output(capsys):
    atomic_write_json("-", {"a": 1})
    assert json.loads(capsys.readouterr().out) == {"a": 1}
    assert writes_to_stdout("-") and not writes_to_stdout("out.json")


def test_a_link_to_a_file_stays_a_link_and_its_file_is_replaced(tmp_path):
    target = tmp_path / "real.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    atomic_write_bytes(link, b"new")
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "real.json"]  # no temp


def test_a_pipe_is_written_in_place_not_replaced(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    atomic_write_bytes(fifo, b"through the pipe")
    reader.join(timeout=10)
    assert got == [b"through the pipe"]
    assert fifo.is_fifo()


def test_a_folder_is_refused_with_a_clear_error(tmp_path):
    with pytest.raises(ConfigurationError, match="is a folder"):
        atomic_write_bytes(tmp_path, b"x")


@pytest.mark.parametrize("target", ["-", "/dev/stdout", "LINK"])
def test_validate_json_on_standard_output_is_the_json_alone(target, tmp_path):
    """``--json -``, ``--json /dev/stdout`` and a link of the user's to /dev/stdout: standard
    output is the JSON report (the people's lines go to standard error), and the link is
    still a link afterwards (the writer once renamed a file over it)."""
    if target == "LINK":
        target = str(tmp_path / "to-stdout")
        os.symlink("/dev/stdout", target)
    proc = cli([*VALIDATE, "--json", target])
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["passed"] is True and report["seeds"] == [0]
    assert [r["env_id"] for r in report["reports"]] == ["comprl/MiniHack-Room-East-4x3-v0"]
    assert "1 of 1 id(s) passed" in proc.stderr
    assert os.path.islink("/dev/stdout")
    if target.endswith("to-stdout"):
        assert os.path.islink(target) and os.readlink(target) == "/dev/stdout"


def test_validate_json_to_a_file_keeps_the_report_on_standard_output(tmp_path):
    proc = cli([*VALIDATE, "--json", str(tmp_path / "v.json")])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "1 of 1 id(s) passed" in proc.stdout
    assert json.loads((tmp_path / "v.json").read_text())["passed"] is True


def test_a_reader_closing_the_pipe_early_ends_the_command_quietly():
    """``comprl-gym envs | head -1`` where head has gone before the list is written: no
    traceback, the shell's closed-pipe status. The pipe's reading end is closed before the
    command starts, so every write meets a closed pipe (no race with a real reader)."""
    read, write = os.pipe()
    os.close(read)
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "comprl_gym.cli", "envs"],
            env=env,
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write)
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr
    assert proc.returncode == 141


@pytest.mark.parametrize(
    "argv, message",
    [
        (["table", "--method", "A", "a.json", "--out", "-"], "names a stem"),
        (["leaderboard", "results", "--out", "-"], "names a folder"),
    ],
)
def test_outputs_of_several_files_refuse_dash(argv, message):
    proc = cli(argv)
    assert proc.returncode == 2 and message in proc.stderr
