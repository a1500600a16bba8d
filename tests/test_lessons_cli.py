"""``comprl-gym lessons FOLDER`` lists a store's or an exported bank's lessons with their
tallies and filters; ``comprl-gym lesson FOLDER ID`` shows one lesson's full text. Against a
real store (SQLite + usearch, MiniLM embeddings) written through ExperienceManager."""

from __future__ import annotations

import contextlib
import io
import json
import re

import pytest

from comprl_gym.cli import main
from comprl_gym.cli.lessons import LESSON_STATUSES
from comprl_gym.experience import ExperienceManager
from comprl_gym.experience.records import STATUSES

STAIRS = "## Title: Stairs\n## Description: MiniHack rooms\n## Content: walk to the '>' first"
FORK = "In the Barrow of Frost the staircase down is at the end of the west branch."
KEYS = "## Title: Keys\n## Description: doors\n## Content: pick up the key before the door"
GONE = "## Title: Gone\n## Description: soon deleted\n## Content: nothing useful"


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """A store with four lessons (tallied, one expired, one deleted) and its exported bank."""
    root = tmp_path_factory.mktemp("lessons")
    store, bank = root / "store", root / "bank"
    with ExperienceManager(str(store)) as manager:
        [stairs, keys] = manager.add([STAIRS, KEYS], env_family="minihack")
        [fork] = manager.add([FORK], env_family="memory")
        [gone] = manager.add([GONE])
        manager.report_outcome([stairs], won=True)
        manager.report_outcome([stairs], won=False)
        manager.report_outcome([fork], won=True)
        manager.expire([keys])
        manager.delete([gone])
        manager.export(bank)
    return {"store": store, "bank": bank, "ids": (stairs, keys, fork, gone)}


def cli(*argv) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([str(a) for a in argv]) == 0
    return out.getvalue()


def table(text: str) -> list[list[str]]:
    """The table's rows as cells (id, uses, wins, status, family, title...)."""
    lines = text.strip().splitlines()
    assert lines[0].split() == ["id", "uses", "wins", "status", "family", "title"]
    return [line.split() for line in lines[1:-1]]


def test_the_statuses_the_command_offers_are_the_stores():
    assert LESSON_STATUSES == STATUSES


@pytest.mark.parametrize("kind", ["store", "bank"])
def test_lessons_lists_every_lesson_with_its_tallies(folders, kind):
    stairs, keys, fork, gone = folders["ids"]
    out = cli("lessons", folders[kind])
    rows = table(out)
    # the deleted lesson's row is gone from the store, and so from the bank
    assert [r[:5] for r in rows] == [
        [str(stairs), "2", "1", "active", "minihack"],
        [str(keys), "0", "0", "expired", "minihack"],
        [str(fork), "1", "1", "active", "memory"],
    ]
    assert rows[0][5] == "Stairs" and rows[2][5:7] == ["In", "the"]  # no title: the content
    assert out.strip().splitlines()[-1] == "3 of 3 lessons shown (2 active, 1 expired)"


@pytest.mark.parametrize("kind", ["store", "bank"])
def test_the_filters(folders, kind):
    stairs, keys, fork, _ = folders["ids"]
    folder = folders[kind]
    ids = lambda *argv: [int(r[0]) for r in table(cli("lessons", folder, *argv))]  # noqa: E731
    assert ids("--family", "minihack") == [stairs, keys]
    assert ids("--family", "memory") == [fork]
    assert ids("--status", "expired") == [keys]
    assert ids("--status", "active", "--min-uses", "2") == [stairs]
    assert ids("--min-uses", "1") == [stairs, fork]
    assert ids("--limit", "1") == [stairs]
    assert ids("--family", "webshop") == []
    last = cli("lessons", folder, "--limit", "2").strip().splitlines()[-1]
    assert last.startswith("2 of 3 lessons shown")


def test_lessons_json_is_every_field(folders):
    stairs = folders["ids"][0]
    lines = cli("lessons", folders["store"], "--status", "active", "--json").splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["id"] for r in records][0] == stairs
    assert records[0]["content"] == "walk to the '>' first" and records[0]["uses"] == 2


@pytest.mark.parametrize("kind", ["store", "bank"])
def test_lesson_shows_the_full_text(folders, kind):
    stairs = folders["ids"][0]
    out = cli("lesson", folders[kind], stairs)
    assert out.splitlines()[0] == f"lesson {stairs}: 'Stairs' (active)"
    assert "  text:\n    ## Title: Stairs\n    ## Description: MiniHack rooms\n" in out
    assert "    ## Content: walk to the '>' first\n" in out
    assert "used 2 times, won 1" in out
    history = json.loads(cli("lesson", folders[kind], stairs, "--json"))
    assert history["text"] == STAIRS and history["wins"] == 1


def test_a_deleted_lesson_keeps_its_history_not_its_text(folders):
    gone = folders["ids"][3]
    out = cli("lesson", folders["store"], gone)
    assert "text: not kept" in out and "'Gone'" in out
    assert json.loads(cli("lesson", folders["store"], gone, "--json"))["text"] is None


def test_a_folder_that_is_neither_or_a_changed_bank_is_refused(folders, tmp_path, capsys):
    assert main(["lessons", str(tmp_path)]) == 2
    assert "neither an experience store" in capsys.readouterr().err
    bank = tmp_path / "bank"
    bank.mkdir()
    for f in folders["bank"].iterdir():
        (bank / f.name).write_bytes(f.read_bytes())
    with open(bank / "experiences.jsonl", "a") as handle:
        handle.write("\n")
    assert main(["lessons", str(bank)]) == 2
    assert re.search(r"checksum differs", capsys.readouterr().err)
    assert main(["lesson", str(folders["store"]), "999"]) == 2
    assert main(["lessons", str(folders["store"]), "--limit", "0"]) == 2
