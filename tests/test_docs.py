"""The docs site and the README (issue 45): a strict offline build, generated tables that are
current, figures that their result files hold, reproduce commands that exist, a short README.

The strict build runs ``mkdocs build --strict`` (broken links, missing pages, unknown anchors
and docstring references fail it) with every proxy pointed at a closed port, so a plugin that
reaches for the network fails here instead of passing on a connected machine.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "scripts"))

import mkdocs_hooks  # noqa: E402
import update_docs  # noqa: E402

from benchmarks.tables import result  # noqa: E402

README = REPO_ROOT / "README.md"
DOCS = REPO_ROOT / "docs"


def _offline_env() -> dict[str, str]:
    closed = "http://127.0.0.1:9"  # the discard port: nothing answers
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"):
        env[name] = closed
    env.pop("NO_PROXY", None)
    env.pop("no_proxy", None)
    return env


def mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        cwd=config.parent,
        env=_offline_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_site_builds_strictly_offline(tmp_path):
    proc = mkdocs_build(REPO_ROOT / "mkdocs.yml", tmp_path / "site")
    assert proc.returncode == 0, proc.stderr[-4000:]
    site = tmp_path / "site"
    # the pages the issue names, the generated API reference, the plots the results pages show
    for page in ("index.html", "results/memory-paper-table/index.html", "gpu/index.html"):
        assert (site / page).is_file(), page
    reference = (site / "reference" / "core" / "index.html").read_text(encoding="utf-8")
    assert "TextEnv" in reference and "doc-heading" in reference
    demo = (site / "results" / "demo" / "index.html").read_text(encoding="utf-8")
    image = re.search(r'<img alt="[^"]*" src="([^"]+demo\.png)"', demo)
    assert image, "the demo page shows no plot"
    served = (site / "results" / "demo" / image.group(1)).resolve()
    assert served.read_bytes() == (REPO_ROOT / "benchmarks/results/demo.png").read_bytes()


def test_a_broken_link_fails_the_strict_build(tmp_path):
    """A copy of the site's sources with one page linking to a file that does not exist."""
    for part in ("mkdocs.yml", "scripts/mkdocs_hooks.py"):
        (tmp_path / part).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO_ROOT / part, tmp_path / part)
    shutil.copytree(DOCS, tmp_path / "docs")
    for linked in ("comprl_gym", "benchmarks"):  # read-only sources the pages and API use
        (tmp_path / linked).symlink_to(REPO_ROOT / linked)
    index = tmp_path / "docs" / "index.md"
    index.write_text(index.read_text() + "\n[gone](../benchmarks/results/no_such_run.json)\n")
    proc = mkdocs_build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert proc.returncode != 0
    assert "no_such_run.json" in proc.stderr


def test_the_hook_serves_only_repository_files_that_exist(tmp_path):
    docs, repo = tmp_path / "docs", tmp_path
    (docs / "results").mkdir(parents=True)
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "plot.png").write_bytes(b"png")
    target = mkdocs_hooks._repo_target
    assert target("results/a.md", "../../benchmarks/plot.png", docs, repo) == "benchmarks/plot.png"
    assert target("results/a.md", "../../benchmarks/gone.png", docs, repo) is None
    assert target("results/a.md", "b.md", docs, repo) is None  # inside docs: mkdocs checks it


def test_doctests_in_docstrings_become_code_for_markdown():
    text = 'Example:\n    >>> x = {"a": [1]}\n    >>> x["a"][0]\n    1\n\nSee :func:`~m.f`.'
    assert mkdocs_hooks.markdown_docstring(text).splitlines() == [
        "Example:",
        "",
        "```python",
        '>>> x = {"a": [1]}',
        '>>> x["a"][0]',
        "1",
        "```",
        "",
        "See `m.f`.",
    ]


def test_the_nav_lists_every_page_the_issue_names():
    nav = yaml.safe_load((REPO_ROOT / "mkdocs.yml").read_text())["nav"]
    listed = set(re.findall(r"'([\w/.-]+\.md)'", str(nav)))
    families = {f"environments/{f}.md" for f in ("minihack", "alfworld", "webshop", "swebench")}
    needed = {"training.md", "experience.md", "evaluation.md", "serving.md", "gpu.md"}
    needed |= {"distributed.md", "architecture.md", "environments/memory.md", "reference/core.md"}
    assert needed | families <= listed
    results = {p for p in listed if p.startswith("results/") and p != "results/index.md"}
    assert len(results) >= 4
    for page in results:  # each study page: its question, its plot or table, how to rerun it
        text = (DOCS / page).read_text(encoding="utf-8")
        assert "**What was asked.**" in text and "Reproduce" in text, page
        assert "not shown" in text or "does not show" in text, page


# --------------------------------------------------------------------------------------------
# Numbers in prose come from result files (that every page's generated tables are current is
# tests/test_registration_cli.py::test_readme_table_is_current: `update_readme.py --check`)
# --------------------------------------------------------------------------------------------
def test_a_stale_or_unknown_generated_table_is_caught():
    stale = "<!-- generated: corridor -->\n| old |\n<!-- end generated: corridor -->\n"
    fresh = update_docs.render(stale)
    assert fresh != stale and "MiniHack-Corridor-North-4-v0 | 0.17 [0.10, 0.28]" in fresh
    assert update_docs.render(fresh) == fresh
    with pytest.raises(SystemExit, match="unknown"):
        update_docs.render("<!-- generated: nope -->\n<!-- end generated: nope -->")
    with pytest.raises(SystemExit, match="unclosed"):
        update_docs.render("<!-- generated: corridor -->\n| old |\n")


def test_each_study_registers_its_own_tables_once():
    """A study's renderers live in its folder (``benchmarks/<study>/render.py``'s ``TABLES``);
    the page machinery finds them, and a name two places register is refused."""
    from benchmarks.corridor import render

    assert update_docs.TABLES["corridor"] is render.TABLES["corridor"]
    assert {"envs", "demo", "sealed-table", "landmark-rule"} <= set(update_docs.TABLES)
    with pytest.raises(SystemExit, match="'corridor' registered twice"):
        update_docs.study_tables({"corridor": str})


def test_the_corridor_row_is_the_files_numbers():
    """Hand-checked against corridor.json: 11, 46 and 55 wins of 64 (Wilson 95%)."""
    row = update_docs.TABLES["corridor"]().splitlines()[2]
    assert row.startswith("| comprl/MiniHack-Corridor-North-4-v0 | 0.17 [0.10, 0.28] ")
    assert "| 0.72 [0.60, 0.81] | 0.86 [0.75, 0.92] |" in row and row.endswith("| 64 |")


def test_the_side_counts_are_the_store_texts():
    """Issue 44: the trained stem extractor's held-out lessons name west 54/64, 62/64 and east
    64/64 in seeds 0, 1, 2 (counted by hand from ``store_texts.own``)."""
    rows = update_docs.TABLES["stem-sides"]().splitlines()[2:]
    complementary = [r for r in rows if r.startswith("| Complementary RL |")]
    assert complementary == [
        "| Complementary RL | 0 | 64 | 10 | 54 |",
        "| Complementary RL | 1 | 64 | 2 | 62 |",
        "| Complementary RL | 2 | 64 | 64 | 0 |",
    ]


def test_the_exemplar_gain_splits_by_earlier_wins():
    """Issue 44: at visit 3 of ``reader_coin_large`` the 139 dungeons won before carry the gain
    (exemplar 110 vs none 75), the 117 never won do not (18 vs 21); oracle 115 of the 139."""
    row = update_docs.TABLES["exemplar-history"]().splitlines()
    assert "| 139 | 110 (0.79) | 75 (0.54) | 84 (0.60) | 115 (0.83) |" in row[2]
    assert "| 117 | 18 (0.15) | 21 (0.18) | 19 (0.16) | 109 (0.93) |" in row[3]


def test_the_demos_quoted_counts_are_its_files_and_dungeons():
    """The demo page's reading quotes three counts no interval check covers: the training
    lessons' wrong side (``store/memory/wrong`` of the last iteration in ``demo.json``), the
    east-walking lesson-free forks (``first_moves_without_lessons``), and how many of the 32
    streamed dungeons lie east (the env's reset seeds 0..31 of ``test``, sides by the family)."""
    import gymnasium as gym

    from comprl_gym.envs.memory import dungeon

    demo = result("demo.json")
    text = " ".join((DOCS / "results" / "demo.md").read_text(encoding="utf-8").split())
    last = demo["training"][-1]
    wrong, lessons = (int(n) for n in re.search(r"(\d+) of (\d+) by iteration 3", text).groups())
    assert (wrong, lessons) == (
        last["store/memory/wrong"],
        sum(last[f"store/memory/{k}"] for k in ("right", "wrong", "both", "neither", "no_task")),
    )
    east, forks = (
        int(n) for n in re.search(r"walks east at the fork in (\d+) of (\d+)", text).groups()
    )
    moves = demo["first_moves_without_lessons"]["after"]
    assert (east, forks) == (moves["east"], moves["east"] + moves["west"])
    lie_east, streamed = (
        int(n) for n in re.search(r"(\d+) of the (\d+) held-out dungeons lie", text).groups()
    )
    stream = demo["after"]["stream"]
    assert streamed == stream["tasks"]
    env = gym.make(stream["env_id"], **stream["env_kwargs"])
    ids = [env.reset(seed=seed)[1]["task_id"] for seed in range(stream["tasks"])]
    env.close()
    assert lie_east == sum(dungeon(task).side == "east" for task in ids)


def _pages() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


@pytest.mark.parametrize("page", _pages(), ids=lambda p: p.relative_to(REPO_ROOT).as_posix())
def test_every_quoted_interval_and_p_is_in_a_result_file(page):
    wrong = update_docs.unsupported_figures(page.read_text(encoding="utf-8"))
    assert not wrong, f"figures no file under benchmarks/results holds: {wrong}"


def test_the_figure_check_catches_a_wrong_digit():
    # GRPO's deployed rate is 0.48 [0.41, 0.55] in extractor_memory_table.json
    assert update_docs.unsupported_figures("0.48 [0.41, 0.55], p 0.038") == []
    assert update_docs.unsupported_figures("0.99 [0.12, 0.13]") == ["0.99 [0.12, 0.13]"]
    assert update_docs.unsupported_figures("p 0.0123") == ["p 0.0123"]


# --------------------------------------------------------------------------------------------
# Reproduce commands exist; the README is a guide
# --------------------------------------------------------------------------------------------
#: ``python scripts/X.py ...`` or ``python -m benchmarks.STUDY.run ...``: a script or a module.
SCRIPT_COMMAND = re.compile(
    r"python (?:((?:benchmarks|scripts)/[\w/]+\.py)|-m (benchmarks(?:\.\w+)+))([^`\n]*)"
)


def test_every_reproduce_command_names_a_script_and_options_it_has():
    found = 0
    for page in _pages():
        for script, module, rest in SCRIPT_COMMAND.findall(page.read_text(encoding="utf-8")):
            script = script or module.replace(".", "/") + ".py"
            source = (REPO_ROOT / script).read_text(encoding="utf-8")
            # with the shared code it imports (a study's command line may be benchmarks.common's)
            for shared in re.findall(r"^from (benchmarks(?:\.\w+)+) import", source, flags=re.M):
                source += (REPO_ROOT / (shared.replace(".", "/") + ".py")).read_text("utf-8")
            for option in re.findall(r"(?<!\S)(--[\w-]+)", rest.split("#")[0]):
                if option == "--help":
                    assert "argparse" in source, script  # argparse gives every parser --help
                    continue
                assert f'"{option}"' in source, f"{page.name}: {script} has no {option}"
            found += 1
    assert found >= 8


def test_every_relative_link_of_the_readme_exists():
    """The README is read on the forge, not on the site: its links to docs and files hold."""
    text = README.read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [link for link in links if "://" not in link]
    assert len(local) >= 10
    for link in local:
        assert (REPO_ROOT / link).exists(), link


def test_the_readme_is_a_guide():
    """A guide, not a results page: short, no results table, one link for the results, the
    two set-up commands exactly."""
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 150
    assert not re.search(r"\(20\d\d-\d\d-\d\d\)", text), "a dated result narrative"
    assert "<!-- generated:" not in text and not re.search(r"^\|.*\|$", text, flags=re.M)
    for section in ("## Install", "## Quickstart", "## Experience", "## Train", "## Evaluate"):
        assert section in text, section
    assert "(docs/results/index.md)" in text
    [setup] = [b for b in re.findall(r"```bash\n(.*?)```", text, flags=re.S) if "make" in b]
    assert [line.split()[:2] for line in setup.splitlines()] == [["make", "demo"], ["make", "test"]]


def test_no_user_page_names_an_issue_number():
    """The docs speak of the library; the project's issue tracker is not the reader's."""
    for page in _pages():
        found = re.search(r"\bissues? \d+", page.read_text(encoding="utf-8"), flags=re.I)
        assert not found, f"{page.relative_to(REPO_ROOT)}: {found.group()}"
