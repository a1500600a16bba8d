"""Finding and loading ALFWorld games in the official layout.

A game is a folder holding ``game.tw-pddl`` (JSON: ``pddl_domain``, ``grammar``,
``pddl_problem``, ``solvable``) and ``traj_data.json`` (ALFRED's trajectory record:
``task_type``, ``pddl_params``, ``scene``...). The official release is laid out as
``json_2.1.1/<split>/<task_type>-<obj>-<mrecep>-<recep>-<scene>/trial_.../``.

:func:`collect_games` applies alfworld's own filter (``AlfredTWEnv.collect_game_files``):
folders with ``traj_data.json``, not "movable" nor "Sliced", of a requested task type, with a
``game.tw-pddl`` whose ``solvable`` flag is true.

:func:`load_game` reads a game in memory and makes the json_2.1.1 files playable on textworld
1.7: their embedded domain and grammar predate alfworld 0.4, so both are replaced by the
package's ``alfred.pddl`` and ``alfred.twl2``, and the task sentence goes back into the
grammar as ``alfworld.agents.utils.misc.add_task_to_grammar`` does. The sentence is the one
the file already carries (its old grammar's ``task`` rule), so the wording is the dataset's;
only a file without one gets a goal-library template, chosen deterministically. User files are
never modified.

Example:
    >>> from comprl_gym.envs.alfworld.data import collect_games, find_split_dir
    >>> split_dir = find_split_dir("/path/to/alfworld", "valid_unseen")  # doctest: +SKIP
    >>> games = collect_games(split_dir, ["pick_and_place_simple"])     # doctest: +SKIP
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from comprl_gym.core import DataError

logger = logging.getLogger(__name__)

#: The six ALFWorld task types, in alfworld's order (``TASK_TYPES`` 1..6).
TASK_TYPES: tuple[str, ...] = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)
SPLITS: tuple[str, ...] = ("train", "valid_seen", "valid_unseen")
GAME_FILE = "game.tw-pddl"
TRAJ_FILE = "traj_data.json"
DATA_HINT = (
    "get the official games with `pip install alfworld && alfworld-download` and pass "
    "data_dir=$ALFWORLD_DATA (the folder holding json_2.1.1/), or omit data_dir to play "
    "generated games"
)
_TASK_SENTENCE = re.compile(r"Your task is to: (.*?)\.?\"")


@dataclass(frozen=True)
class GameRecord:
    """One playable game: where it is and what it asks."""

    task_id: str
    game_file: Path
    traj_file: Path
    task_type: str


@functools.lru_cache(maxsize=1)
def alfred_domain_and_grammar() -> tuple[str, str]:
    """The PDDL domain and TextWorld grammar shipped in the alfworld package."""
    data = resources.files("alfworld") / "data"
    return (data / "alfred.pddl").read_text(encoding="utf-8"), (data / "alfred.twl2").read_text(
        encoding="utf-8"
    )


def find_split_dir(data_dir: str | os.PathLike[str] | None, split: str) -> Path | None:
    """The folder of ``split`` games under ``data_dir`` (or ``$ALFWORLD_DATA``), if any.

    Accepts the download root (holding ``json_2.1.1/``), ``json_2.1.1`` itself, or the split
    folder. Returns ``None`` when no such folder exists.
    """
    if data_dir is None:
        data_dir = os.environ.get("ALFWORLD_DATA")
    if not data_dir:
        return None
    root = Path(os.path.expandvars(os.path.expanduser(str(data_dir))))
    for candidate in (root / "json_2.1.1" / split, root / split, root):
        if candidate.is_dir() and (candidate.name == split or candidate == root / split):
            return candidate
    return None


def collect_games(split_dir: Path, task_types: list[str] | tuple[str, ...]) -> list[GameRecord]:
    """Every game under ``split_dir`` that alfworld itself would play, in sorted order."""
    wanted = set(task_types)
    records = []
    for root, _dirs, files in os.walk(split_dir):
        if TRAJ_FILE not in files:
            continue
        if "movable" in root or "Sliced" in root:  # alfworld skips these trajectories
            continue
        folder = Path(root)
        traj_file, game_file = folder / TRAJ_FILE, folder / GAME_FILE
        task_type = _task_type(folder, traj_file)
        if task_type not in wanted:
            continue
        if not game_file.exists():
            logger.debug("skipping %s: no %s", folder, GAME_FILE)
            continue
        if not _is_solvable(game_file):
            continue
        task_id = f"{split_dir.name}/{folder.relative_to(split_dir).as_posix()}"
        records.append(GameRecord(task_id, game_file, traj_file, task_type))
    records.sort(key=lambda record: record.task_id)
    return records


def _task_type(folder: Path, traj_file: Path) -> str | None:
    # The parent folder is named <task_type>-<obj>-...; reading it avoids parsing ~80 KB of
    # JSON per game while collecting. Fall back to the file when the name is not standard.
    name = folder.parent.name.split("-", 1)[0]
    if name in TASK_TYPES:
        return name
    try:
        return json.loads(traj_file.read_text(encoding="utf-8")).get("task_type")
    except (OSError, ValueError):
        return None


_SOLVABLE = re.compile(r'"solvable"\s*:\s*(true|false)')


def _is_solvable(game_file: Path) -> bool:
    """alfworld's ``solvable`` check; an unreadable file is kept so that loading it explains."""
    try:
        with open(game_file, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 4096))  # json.dump writes "solvable" after the problem
            tail = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return True
    match = _SOLVABLE.search(tail)
    if match is None:
        try:
            data = json.loads(game_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return True
        if "solvable" not in data:
            logger.info("skipping %s: no 'solvable' key (as alfworld does)", game_file)
            return False
        return bool(data["solvable"])
    return match.group(1) == "true"


def read_json(path: Path, required: tuple[str, ...]) -> dict[str, Any]:
    """A JSON object from ``path`` with ``required`` keys, or :class:`DataError` saying why."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError(path, "file not found", DATA_HINT) from None
    except OSError as exc:
        raise DataError(path, f"cannot be read ({exc.strerror})") from exc
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise DataError(path, f"is not valid JSON ({exc})", "re-download or regenerate it") from exc
    if not isinstance(data, dict):
        raise DataError(path, f"holds a JSON {type(data).__name__}, expected an object")
    missing = [key for key in required if key not in data]
    if missing:
        raise DataError(path, f"lacks the key(s) {', '.join(map(repr, missing))}")
    return data


def task_sentence_from_grammar(grammar: str) -> str | None:
    """The "Your task is to: ..." sentence a game's grammar carries, if any."""
    match = _TASK_SENTENCE.search(grammar)
    if match is None or "UNKNOWN GOAL" in match.group(1):
        return None
    return match.group(1)


def templated_task_sentence(traj_data: dict[str, Any], choice: int) -> str:
    """alfworld's ``get_templated_task_desc`` with the template picked by ``choice``."""
    from alfworld.gen import goal_library

    params = traj_data["pddl_params"]
    goal = traj_data["task_type"] + ("_slice" if params.get("object_sliced") else "")
    templates = goal_library.gdict[goal]["templates"]
    template = templates[choice % len(templates)]
    return template.format(
        obj=params["object_target"].lower(),
        recep=params["parent_target"].lower(),
        toggle=params["toggle_target"].lower(),
        mrecep=params["mrecep_target"].lower(),
    )


def load_game(record: GameRecord) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(game_data, traj_data)`` ready for the engine; raises :class:`DataError` if broken."""
    game = read_json(record.game_file, ("pddl_problem", "grammar"))
    traj = read_json(record.traj_file, ("task_type", "pddl_params"))
    if not isinstance(game["pddl_problem"], str) or "(:goal" not in game["pddl_problem"]:
        raise DataError(record.game_file, "'pddl_problem' is not a PDDL problem with a goal")
    domain, grammar = alfred_domain_and_grammar()
    sentence = task_sentence_from_grammar(str(game["grammar"]))
    if sentence is None:
        try:
            choice = int(hashlib.sha256(record.task_id.encode()).hexdigest(), 16)
            sentence = templated_task_sentence(traj, choice)
        except (KeyError, AttributeError) as exc:
            raise DataError(record.traj_file, f"'pddl_params' is incomplete ({exc})") from exc
    game = dict(game)
    game["pddl_domain"] = domain
    # What alfworld.agents.utils.misc.add_task_to_grammar does, with a fixed sentence.
    game["grammar"] = grammar.replace("UNKNOWN GOAL", sentence)
    return game, traj
