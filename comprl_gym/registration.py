"""Every ``comprl/*`` gymnasium id, in one table.

``import comprl_gym`` registers them; gymnasium 1.2 no longer loads plugin entry points, so the
import is required before ``gym.make("comprl/...")``. Entry points are strings, so an id whose
family needs an optional package costs nothing until it is made.

Example:
    >>> import gymnasium as gym
    >>> import comprl_gym
    >>> "comprl/ALFWorld-v0" in gym.registry
    True
    >>> comprl_gym.registration.ENV_TABLE["comprl/WebShop-v0"].family
    'webshop'
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym


@dataclass(frozen=True)
class EnvEntry:
    """One registered id: where it lives, how it is configured, what it is."""

    env_id: str
    entry_point: str
    family: str
    description: str
    kwargs: dict[str, Any] = field(default_factory=dict)


_MINIHACK = "comprl_gym.envs.minihack:MiniHackTextEnv"
_ALFWORLD = "comprl_gym.envs.alfworld:ALFWorldEnv"
_WEBSHOP = "comprl_gym.envs.webshop:WebShopEnv"
_SWEBENCH = "comprl_gym.envs.swebench:SWEBenchEnv"


def _minihack_entries() -> list[EnvEntry]:
    rooms = {
        "Room": "an empty lit room; reach the staircase down",
        "Room-Random": "a lit room with random start and goal",
        "Room-Dark": "a dark room: only adjacent cells are seen",
        "Room-Monster": "a room with monsters between you and the stairs",
        "Room-Trap": "a room with hidden traps",
        "Room-Ultimate": "a dark room with monsters and traps",
    }
    entries = []
    for name, what in rooms.items():
        for size in ("5x5", "15x15"):
            entries.append((f"{name}-{size}", f"{size} {what}"))
    entries += [
        ("Corridor-R2", "two rooms joined by corridors; find the stairs"),
        ("Corridor-R3", "three rooms joined by corridors; find the stairs"),
        ("Corridor-R5", "five rooms joined by corridors; find the stairs"),
        ("KeyRoom-S5", "pick up a key, open a locked door, reach the stairs"),
        ("MazeWalk-9x9", "a 9x9 maze to the stairs"),
        ("MazeWalk-15x15", "a 15x15 maze to the stairs"),
        ("MultiRoom-N2", "two rooms joined by doors"),
        ("MultiRoom-N4", "four rooms joined by doors"),
    ]
    table = [
        EnvEntry(
            f"comprl/MiniHack-{name}-v0",
            _MINIHACK,
            "minihack",
            what,
            {"task": f"MiniHack-{name}-v0"},
        )
        for name, what in entries
    ]
    table.append(
        EnvEntry(
            "comprl/MiniHack-v0",
            _MINIHACK,
            "minihack",
            "any minihack task: gym.make('comprl/MiniHack-v0', task='MiniHack-River-v0')",
            {"task": "MiniHack-Room-5x5-v0"},
        )
    )
    return table


#: ALFWorld task types: id suffix -> ALFRED task_type.
ALFWORLD_TASK_TYPES: dict[str, str] = {
    "PickAndPlace": "pick_and_place_simple",
    "LookAtObjInLight": "look_at_obj_in_light",
    "PickCleanThenPlace": "pick_clean_then_place_in_recep",
    "PickHeatThenPlace": "pick_heat_then_place_in_recep",
    "PickCoolThenPlace": "pick_cool_then_place_in_recep",
    "PickTwoObjAndPlace": "pick_two_obj_and_place",
}


def _alfworld_entries() -> list[EnvEntry]:
    table = [
        EnvEntry(
            "comprl/ALFWorld-v0",
            _ALFWORLD,
            "alfworld",
            "ALFWorld household tasks, all six types (official json_2.1.1 or generated games)",
            {},
        )
    ]
    for suffix, task_type in ALFWORLD_TASK_TYPES.items():
        table.append(
            EnvEntry(
                f"comprl/ALFWorld-{suffix}-v0",
                _ALFWORLD,
                "alfworld",
                f"ALFWorld, {task_type.replace('_', ' ')} tasks only",
                {"task_types": (task_type,)},
            )
        )
    return table


ENV_TABLE: dict[str, EnvEntry] = {
    entry.env_id: entry
    for entry in [
        *_minihack_entries(),
        *_alfworld_entries(),
        EnvEntry(
            "comprl/WebShop-v0",
            _WEBSHOP,
            "webshop",
            "WebShop text shopping: search, pick a product and options, buy",
            {},
        ),
        EnvEntry(
            "comprl/SWEBench-v0",
            _SWEBENCH,
            "swebench",
            "SWE-bench style repository repair in a Docker or bubblewrap sandbox",
            {},
        ),
    ]
}


def register_envs() -> None:
    """Register every id of :data:`ENV_TABLE` with gymnasium (idempotent)."""
    for entry in ENV_TABLE.values():
        if entry.env_id in gym.registry:
            continue
        gym.register(
            id=entry.env_id,
            entry_point=entry.entry_point,
            kwargs=dict(entry.kwargs),
            disable_env_checker=False,
        )


def markdown_table() -> str:
    """The README's environment table."""
    lines = ["| id | family | what it is |", "| --- | --- | --- |"]
    for entry in ENV_TABLE.values():
        lines.append(f"| `{entry.env_id}` | {entry.family} | {entry.description} |")
    return "\n".join(lines)
