"""``comprl-gym leaderboard``: Markdown, JSON, and an HTML page checked in headless Chromium."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from comprl_gym.cli import main
from comprl_gym.core import DataError
from comprl_gym.evaluation.eval import EvalConfig, run_eval
from comprl_gym.evaluation.leaderboard import build_leaderboard, write_leaderboard

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--enable-logging=stderr",
    "--v=0",
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    common = dict(episodes=3, seeds=[0], max_steps=8, progress=False)
    run_eval(
        EvalConfig(
            env_ids=["comprl/MiniHack-Room-5x5-v0"],
            agent="expert",
            out_dir=root / "expert-minihack",
            **common,
        )
    )
    run_eval(
        EvalConfig(
            env_ids=["comprl/MiniHack-Room-5x5-v0", "comprl/WebShop-v0"],
            agent="random",
            out_dir=root / "random-mixed",
            **common,
        )
    )
    return [root / "expert-minihack", root / "random-mixed"]


def test_table_across_families(runs, tmp_path):
    board = build_leaderboard(runs)
    assert [r["run"] for r in board["rows"]] == ["expert-minihack", "random-mixed"]  # best first
    assert board["families"] == ["minihack", "webshop"]
    expert, random_ = board["rows"]
    assert expert["families"]["minihack"]["mean"] == 1.0 and "webshop" not in expert["families"]
    assert set(random_["families"]) == {"minihack", "webshop"} and random_["episodes"] == 6
    paths = write_leaderboard(board, tmp_path / "lb")
    md = paths["markdown"].read_text()
    # 3 wins of 3: Wilson's lower bound 3 / (3 + 1.96^2) = 0.44
    assert "| 1 | expert-minihack | `expert` | 1.00 [0.44, 1.00] | – |" in md
    assert len(board["warnings"]) == 2 and all("cannot exclude" in w for w in board["warnings"])
    assert board["warnings"][0] in md and expert["episodes_needed"] == 35
    data = json.loads(paths["json"].read_text())
    assert len(data["rows"]) == 2 and {e["env_id"] for e in data["per_env"]} == {
        "comprl/MiniHack-Room-5x5-v0",
        "comprl/WebShop-v0",
    }


def test_cli_and_bad_folder(runs, tmp_path, capsys):
    assert main(["leaderboard", *map(str, runs), "--out", str(tmp_path / "lb")]) == 0
    assert "expert-minihack" in capsys.readouterr().out
    with pytest.raises(DataError, match="no episodes.jsonl"):
        build_leaderboard([tmp_path])


def _chromium(url: str, tmp_path) -> tuple[str, str]:
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    assert binary, "Debian's chromium is needed for this test: apt-get install -y chromium"
    profile = tmp_path / f"profile-{len(list(tmp_path.iterdir()))}"
    done = subprocess.run(
        [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom", url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, done.stderr


@pytest.mark.slow
def test_html_page_loads_in_headless_chromium_and_shows_rows_and_trajectories(runs, tmp_path):
    board = build_leaderboard(runs)
    html_path = write_leaderboard(board, tmp_path / "lb")["html"]
    assert (
        "http://" not in html_path.read_text() and "https://" not in html_path.read_text()
    )  # self-contained
    dom, log = _chromium(html_path.as_uri(), tmp_path)
    assert 'data-ready="1"' in dom, "the page's script did not run to the end"
    assert not re.search(r"Uncaught|SyntaxError|TypeError|ReferenceError", log), log[-2000:]
    body = dom.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    assert body.count("<tr") == 2 and "expert-minihack" in body and "random-mixed" in body
    assert (
        len(re.findall(r"<th[ >]", dom)) == 2 + 2 + 4
    )  # run, agent, two families, overall, episodes, steps, tokens
    assert dom.count('<li class="won"') == 3  # the best run's episodes are listed
    assert "cannot exclude a difference of 0.1" in dom.split('id="warnings"', 1)[1]
    # a link to one episode opens the trajectory viewer
    key = board["episodes"]["random-mixed"][4]["key"]
    dom, _ = _chromium(html_path.as_uri() + "#ep=" + key.replace("|", "%7C"), tmp_path)
    viewer = dom.split('id="viewer"', 1)[1]
    assert key in viewer and "Trajectory" in viewer and "Experiences used (0)" in viewer
    assert viewer.count('class="turn') == board["episodes"]["random-mixed"][4]["steps"]
