"""The tutorials under docs/tutorials/ run as written, every code block of every page.

A page's blocks run in order, in one fresh folder (a user's working folder: ``configs/`` is a
link to the checkout's, so the pages' ``--config configs/...`` read the committed files), by
one Python process: a ``python`` block runs in that process, the blocks sharing their names as
one session does; a ``bash`` block runs in ``bash -e -o pipefail`` with ``comprl-gym`` on the
``PATH`` (a stand-in for the installed console script: ``comprl_gym.cli:main`` from this
checkout, the current folder not on its import path, as with the real one); a
``python title="FILE"`` block is a file the page asks the reader to save: it is written, not
run. ``text`` blocks show output and are not run; any other language fails here, so a new kind
of block cannot go unrun.

Nothing is shrunk: the pages are written at a size that runs here (the tiny model, scripted
agents, few episodes). Each page has the output its reader is told to expect (``EXPECTED``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import REPO_ROOT

TUTORIALS = REPO_ROOT / "docs" / "tutorials"
BLOCK = re.compile(r"^```(\S*)([^\n]*)\n(.*?)^```", flags=re.S | re.M)
#: The languages a tutorial's blocks may have: the first two run, a titled python block is
#: saved, text is output.
LANGUAGES = {"python", "bash", "text"}
MARKER = "@@@ block"


def blocks(page: Path) -> list[tuple[str, str, str]]:
    """``(language, title, code)`` of each fenced block of ``page``, in order."""
    found = []
    for language, header, code in BLOCK.findall(page.read_text(encoding="utf-8")):
        title = re.search(r'title="([^"]+)"', header)
        found.append((language, title.group(1) if title else "", code))
    return found


def pages() -> list[Path]:
    return sorted(p for p in TUTORIALS.glob("*.md") if p.name != "index.md")


DRIVER = """
import os, subprocess, sys
from pathlib import Path

sys.path.insert(0, os.getcwd())  # a script run from the folder imports that folder's modules
BLOCKS = {blocks!r}
namespace = {{"__name__": "__main__"}}
for i, (language, title, code) in enumerate(BLOCKS):
    print("\\n{marker}", i, flush=True)
    if title:
        Path(title).write_text(code)
    elif language == "python":
        exec(compile(code, f"<block {{i}}>", "exec"), namespace)
    elif language == "bash":
        sys.stdout.flush()
        subprocess.run(["bash", "-e", "-o", "pipefail", "-c", code], check=True)
    sys.stdout.flush()
"""

CONSOLE_SCRIPT = """#!{python}
import sys
sys.path.insert(0, {repo!r})
from comprl_gym.cli import main
raise SystemExit(main())
"""


def run_page(page: Path, folder: Path) -> list[str]:
    """Run every block of ``page`` in ``folder``; the output of each block, in order."""
    found = blocks(page)
    unknown = {language for language, _, _ in found} - LANGUAGES
    assert not unknown, f"{page.name}: blocks no test runs: {unknown}"
    runnable = [b for b in found if b[0] != "text"]
    bin_dir = folder.parent / f"{folder.name}-bin"
    bin_dir.mkdir()
    script = bin_dir / "comprl-gym"
    script.write_text(CONSOLE_SCRIPT.format(python=sys.executable, repo=str(REPO_ROOT)))
    script.chmod(0o755)
    (folder / "configs").symlink_to(REPO_ROOT / "configs")
    driver = bin_dir / "driver.py"
    driver.write_text(DRIVER.format(blocks=runnable, marker=MARKER))
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(REPO_ROOT),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    proc = subprocess.run(
        [sys.executable, str(driver)],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, (
        f"{page.name} failed\n--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}"
    )
    outputs = re.split(rf"^{MARKER} \d+$", proc.stdout, flags=re.M)[1:]
    assert len(outputs) == len(runnable), (len(outputs), len(runnable))
    return outputs


def test_the_harness_runs_python_bash_and_saves_files(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        textwrap.dedent(
            """\
            ```python title="helper.py"
            VALUE = 41
            ```
            ```python
            from helper import VALUE
            answer = VALUE + 1
            ```
            ```bash
            echo "from bash" > note.txt
            comprl-gym --version
            ```
            ```python
            print("answer", answer, open("note.txt").read().strip())
            ```
            ```text
            not run
            ```
            """
        )
    )
    folder = tmp_path / "work"
    folder.mkdir()
    outputs = run_page(page, folder)
    assert len(outputs) == 4
    assert re.search(r"^\d+\.\d+", outputs[2].strip())  # the version
    assert "answer 42 from bash" in outputs[3]


def test_a_block_of_another_language_fails(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```sh\necho hi\n```\n")
    with pytest.raises(AssertionError, match="blocks no test runs"):
        run_page(page, tmp_path)


def test_every_tutorial_is_in_the_index_and_the_nav_and_has_a_check():
    index = (TUTORIALS / "index.md").read_text(encoding="utf-8")
    nav = (REPO_ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    assert "docs/tutorials/index.md" in readme
    assert sorted(EXPECTED) == [p.name for p in pages()]
    for page in pages():
        assert f"({page.name})" in index, page.name
        assert f"tutorials/{page.name}" in nav, page.name
        assert f"docs/tutorials/{page.name}" in readme, page.name
        assert any(b[0] in ("python", "bash") for b in blocks(page)), page.name


def test_every_inline_command_of_a_tutorial_names_a_command():
    """Prose spans such as `comprl-gym stream --run DIR` are pointers, not run: each names a
    sub-command that exists and options that command has."""
    from comprl_gym.cli import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if hasattr(a, "choices") and a.choices).choices
    spans = [
        span
        for page in pages() + [TUTORIALS / "index.md"]
        for span in re.findall(r"`(comprl-gym [^`]+)`", page.read_text(encoding="utf-8"))
    ]
    assert spans
    for span in spans:
        words = span.split()
        assert words[1] in commands, span
        options = {o for a in commands[words[1]]._actions for o in a.option_strings}
        for word in words[2:]:
            if word.startswith("--"):
                assert word in options, span


def check_agent(outputs: list[str], folder: Path) -> None:
    text = "".join(outputs)
    assert re.search(r"won: (True|False) after \d+ steps on ", text)
    for run in ("side", "random"):
        summary = json.loads((folder / "results" / run / "summary.json").read_text())
        assert summary["episodes"] == 20
        assert re.search(rf"^{run}: success \d\.\d\d \[\d\.\d\d, \d\.\d\d\] over 20", text, re.M)
    side = json.loads((folder / "results/side/summary.json").read_text())
    assert side["overall"]["none"]["success"]["mean"] > 0.2  # the east dungeons
    assert "episodes: 5" in text


def check_experience(outputs: list[str], folder: Path) -> None:
    added, injected, answered, first, played, exported, listed = outputs
    assert (
        len(
            re.findall(
                r"^\d+ In the .* staircase down is at the end of the (east|west) branch\.$",
                added,
                re.M,
            )
        )
        == 3
    )
    assert "injected: [1] " in injected and "the staircase down is at the end of the" in injected
    assert "step: 0 questions asked: 1" in answered
    assert "won: True | lesson 1 uses: 1 wins: 1" in first
    assert "[True, True, False]" in played
    tallies = re.findall(r"^(\d+): uses (\d+), wins (\d+)", played, re.M)
    assert tallies == [("1", "2", "1"), ("2", "2", "2"), ("3", "2", "2")]
    assert "'manifest.json'" in exported and "'experiences.jsonl'" in exported
    assert len(re.findall(r"^\d -> \d: uses \d, wins \d: In the ", exported, re.M)) == 3
    assert "1 -> 1: uses 2, wins 1" in exported
    # the bank's three lessons, then the one used twice, then lesson 1's full text
    rows = re.findall(r"^ *(\d+) +(\d+) +(\d+) +active +memory +In the ", listed, re.M)
    assert rows == [
        ("1", "2", "1"),
        ("2", "2", "2"),
        ("3", "2", "2"),
        ("1", "2", "1"),
        ("2", "2", "2"),
        ("3", "2", "2"),
    ]
    assert "3 of 3 lessons shown (3 active)" in listed
    assert re.search(r"^lesson 1: .* \(active\)\n  text:\n    ## Title: ", listed, re.M)
    assert "the staircase down is at the end of the" in listed.split("lesson 1:")[1]


def check_train(outputs: list[str], folder: Path) -> None:
    grpo, grpo_metrics, complementary, complementary_metrics, store = outputs
    assert "grpo: 2 iterations, 16 rollouts" in grpo
    assert "complementary: 2 iterations, 16 rollouts" in complementary
    assert re.findall(r"^iteration (\d): success", grpo_metrics, re.M) == ["1", "2"]
    assert "grpo iterations: 2" in grpo_metrics
    for key in ("with_experience/success", "extractor/written", "store_size"):
        assert re.search(rf"^{key}: \d", complementary_metrics, re.M), key
    size = int(re.search(r"^store_size: (\d+)", complementary_metrics, re.M).group(1))
    assert size > 0 and re.search(rf"^{size} lessons; the first: ", store, re.M)
    for run in ("tiny-grpo", "tiny-complementary"):
        assert (folder / "runs" / run / "checkpoints" / "step-2").is_dir()
        assert (folder / "runs" / run / "learning_curve.png").is_file()


def check_evaluate(outputs: list[str], folder: Path) -> None:
    suites, evals, provenance, board, ranks = outputs
    assert re.search(r"^memory@1 +128 episodes", suites, re.M)
    assert "fork: comprl/Memory-Fork-v0, 64 seeds, pool test (held out)" in suites
    assert evals.count("results in results/") == 2
    for run in ("expert", "random"):
        assert re.search(
            rf"^{run}: memory@1 hash [0-9a-f]{{12}}, 128 episodes, success ", provenance, re.M
        )
    assert "written: leaderboard/leaderboard.md" in board
    assert re.findall(r"^(\d) (\w+) memory@1 \([0-9a-f]{12}\) test \(held out\)$", ranks, re.M) == [
        ("1", "expert"),
        ("2", "random"),
    ]


def check_stream(outputs: list[str], folder: Path) -> None:
    stream, reading = outputs
    assert "comprl/Memory-Fork-v0: playing pool test (held out)" in stream
    assert "| placebo |" in stream and "McNemar p" in stream
    rates = dict(re.findall(r"^(\w+): visit 1 (\d\.\d\d)", reading, re.M))
    assert sorted(rates) == ["exemplar", "none", "oracle", "placebo"]
    # what the page says to look for: the placebo is none; the exemplar's first visit is none's
    assert rates["placebo"] == rates["none"] == rates["exemplar"]
    assert re.search(r"^placebo: .* minus none \+0\.00", reading, re.M)
    assert re.search(r"^exemplar: .* minus none \+0\.[1-9]", reading, re.M)
    assert (folder / "streams" / "replay" / "stream.png").is_file()


#: page -> what its run must show (its outputs, one per runnable block, and its folder)
EXPECTED = {
    "agent.md": check_agent,
    "experience.md": check_experience,
    "train.md": check_train,
    "evaluate.md": check_evaluate,
    "stream.md": check_stream,
}


#: the pages that take more than about 20 s here (an embedding model, training, a suite)
SLOW = {"experience.md", "train.md", "evaluate.md", "stream.md"}


@pytest.mark.parametrize(
    "name",
    [pytest.param(name, marks=[pytest.mark.slow] if name in SLOW else []) for name in EXPECTED],
)
def test_tutorial_runs_as_written(name, tmp_path):
    folder = tmp_path / "work"
    folder.mkdir()
    outputs = run_page(TUTORIALS / name, folder)
    EXPECTED[name](outputs, folder)
