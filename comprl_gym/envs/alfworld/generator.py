"""Generated ALFWorld games, written in the official json_2.1.1 layout.

Everything comes from what the ``alfworld`` package ships:

* the ALFRED floor plans (``alfworld/gen/layouts/FloorPlan<n>-objects.json``: the object and
  receptacle types of the room; ``-openable.json``: receptacle ids with the pose from which
  the agent uses them; ``-layout.npy``: navigable floor points);
* ``alfworld/gen/constants.py``: which receptacle type can hold which object type
  (``VAL_RECEPTACLE_OBJECTS``), which objects can be cleaned, heated, cooled, toggled, sliced
  (``VAL_ACTION_OBJECTS``), which receptacles open (``OPENABLE_CLASS_LIST``), which room types
  each task is set in (``GOALS_VALID``);
* ``alfworld/gen/goal_library.py``: each task type's PDDL goal and sentence templates;
* ``alfworld/data/alfred.pddl`` and ``alfred.twl2``: the domain and grammar.

A game is a room of one floor plan: its receptacles (15-30, the ones ALFRED lists for the
plan, completed with the plan's other receptacle types), its object types with 1-3 instances
each, every object placed in a receptacle that can contain it, and a goal of one of the six
task types whose parameters fit the room. Fast Downward must find a plan and the plan must win
when replayed through the engine, or the game is drawn again. Everything is a function of
``(GENERATOR_VERSION, split, index)``, so a set regenerates identically anywhere.

Splits follow ALFRED's scene split: ``valid_unseen`` uses ALFRED's unseen validation floor
plans (10, 219, 308 and 424: the scenes of the official valid_unseen games), which ``train``
and ``valid_seen`` never use; ``valid_seen`` draws other games from the training floor plans.

Games are written under ``cache_dir("alfworld", "generated-v<GENERATOR_VERSION>", split)`` as
``<task_type>-<obj>-<mrecep>-<recep>-<scene>/trial_G<index>/`` with ``game.tw-pddl``,
``traj_data.json`` and ``initial_state.pddl``: the official layout, so
:func:`comprl_gym.envs.alfworld.data.collect_games` (and alfworld itself) can read them.

Example:
    >>> from comprl_gym.envs.alfworld.generator import GeneratedGames
    >>> games = GeneratedGames("train")
    >>> record = games.record(0)            # generates game 0 on first use  # doctest: +SKIP
    >>> record.task_type                                                     # doctest: +SKIP
    'pick_and_place_simple'
"""

from __future__ import annotations

import functools
import json
import logging
import random
import re
import threading
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from comprl_gym.core import EnvBackendError, require
from comprl_gym.envs.alfworld.data import (
    GAME_FILE,
    TASK_TYPES,
    TRAJ_FILE,
    GameRecord,
    alfred_domain_and_grammar,
)
from comprl_gym.utils import atomic_write_json, atomic_write_text, cache_dir

logger = logging.getLogger(__name__)

#: Bump whenever generated games would differ; it names the cache folder.
GENERATOR_VERSION = 1
#: ALFRED's unseen validation scenes (the scenes of the official valid_unseen games).
UNSEEN_FLOOR_PLANS: tuple[int, ...] = (10, 219, 308, 424)
#: Games per split when the env is not told otherwise (the official sets' sizes, rounded).
DEFAULT_SPLIT_SIZES: dict[str, int] = {"train": 3600, "valid_seen": 140, "valid_unseen": 134}
MIN_RECEPTACLES, MAX_RECEPTACLES = 15, 30
#: Receptacle types a room may hold several of (used to reach MIN_RECEPTACLES).
_REPEATABLE = ("Cabinet", "Drawer", "Shelf", "StoveBurner", "SideTable", "CounterTop")
#: How many of a receptacle type a room gets when ALFRED's pose file does not list it.
_DEFAULT_COUNTS = {"StoveBurner": 4, "Cabinet": 4, "Drawer": 3, "Shelf": 3}
#: Object types that are never picked up in ALFWorld's games (measured on json_2.1.1).
_FIXED_OBJECTS = frozenset(
    [
        "Bathtub",
        "Blinds",
        "Chair",
        "Curtains",
        "DeskLamp",
        "FloorLamp",
        "HousePlant",
        "LaundryHamperLid",
        "LightSwitch",
        "Mirror",
        "Painting",
        "Poster",
        "ShowerDoor",
        "ShowerGlass",
        "Sink",
        "StoveKnob",
        "Television",
        "Window",
    ]
)
#: Pickable types that no receptacle table lists but that ALFWorld's games do pick up.
_EXTRA_PICKUPABLE = frozenset({"Boots", "PaperTowelRoll", "ScrubBrush", "TeddyBear"})
#: Where a desk lamp stands (it must be in a receptacle to be switched on).
_LAMP_STANDS = ("Desk", "SideTable", "Dresser", "Shelf", "CoffeeTable", "DiningTable")
#: The appliance a state-change task needs, and the receptacle type it is.
_APPLIANCE = {
    "pick_clean_then_place_in_recep": "SinkBasin",
    "pick_heat_then_place_in_recep": "Microwave",
    "pick_cool_then_place_in_recep": "Fridge",
}
_STATE_CHANGE = {
    "pick_clean_then_place_in_recep": "Cleanable",
    "pick_heat_then_place_in_recep": "Heatable",
    "pick_cool_then_place_in_recep": "Coolable",
}
_ATTEMPTS = 64


def mangle(alfred_id: str) -> str:
    """ALFRED's object id as a PDDL name (``Apple|+00.16|...`` -> ``Apple_bar__plus_00_dot_16...``)."""
    for old, new in (
        ("|", "_bar_"),
        ("+", "_plus_"),
        ("-", "_minus_"),
        (".", "_dot_"),
        (",", "_comma_"),
    ):
        alfred_id = alfred_id.replace(old, new)
    return alfred_id


def _alfred_id(kind: str, x: float, y: float, z: float) -> str:
    return f"{kind}|{x:+06.2f}|{y:+06.2f}|{z:+06.2f}"


def _location(x_cells: int, z_cells: int, rotation: int, horizon: int) -> str:
    return mangle(f"loc|{x_cells}|{z_cells}|{rotation}|{horizon}")


# --------------------------------------------------------------------------------------------
# What the alfworld package ships
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FloorPlan:
    """One ALFRED floor plan as the alfworld package describes it."""

    number: int
    types: tuple[str, ...]
    receptacle_poses: dict[str, tuple[float, float, int, int]]
    floor_points: np.ndarray = field(repr=False)

    @property
    def room(self) -> str:
        constants = _constants()
        return next(name for name, scenes in constants.SCENE_TYPE.items() if self.number in scenes)


@functools.lru_cache(maxsize=1)
def _constants() -> Any:
    return require("alfworld.gen.constants", "ALFWorld game generation", extra="alfworld")


@functools.lru_cache(maxsize=1)
def _goal_library() -> dict[str, Any]:
    return require("alfworld.gen.goal_library", "ALFWorld game generation", extra="alfworld").gdict


@functools.cache
def load_floor_plan(number: int) -> FloorPlan:
    """Read ``FloorPlan<number>`` from ``alfworld/gen/layouts``."""
    layouts = resources.files("alfworld") / "gen" / "layouts"
    types = tuple(json.loads((layouts / f"FloorPlan{number}-objects.json").read_text()))
    poses = json.loads((layouts / f"FloorPlan{number}-openable.json").read_text())
    with (layouts / f"FloorPlan{number}-layout.npy").open("rb") as handle:
        points = np.load(handle)
    return FloorPlan(number, types, {k: tuple(v) for k, v in sorted(poses.items())}, points)


@functools.lru_cache(maxsize=1)
def all_floor_plans() -> tuple[int, ...]:
    layouts = resources.files("alfworld") / "gen" / "layouts"
    numbers = {
        int(m.group(1))
        for entry in layouts.iterdir()
        if (m := re.fullmatch(r"FloorPlan(\d+)-objects\.json", entry.name))
    }
    return tuple(sorted(numbers))


def split_floor_plans(split: str) -> tuple[int, ...]:
    """The floor plans a split draws from (ALFRED's seen/unseen scene split)."""
    if split == "valid_unseen":
        return UNSEEN_FLOOR_PLANS
    return tuple(n for n in all_floor_plans() if n not in UNSEEN_FLOOR_PLANS)


@functools.lru_cache(maxsize=1)
def _type_tables() -> tuple[tuple[str, ...], tuple[str, ...], frozenset[str]]:
    """(receptacle types, object types, pickupable object types) as ALFWorld declares them."""
    constants = _constants()
    rtypes = tuple(sorted(constants.RECEPTACLES - constants.MOVABLE_RECEPTACLES_SET))
    otypes = tuple(o for o in constants.OBJECTS if o not in rtypes)
    contents = set().union(*constants.VAL_RECEPTACLE_OBJECTS.values())
    pickupable = frozenset((contents | _EXTRA_PICKUPABLE) - _FIXED_OBJECTS)
    return rtypes, otypes, pickupable


# --------------------------------------------------------------------------------------------
# One room, one goal
# --------------------------------------------------------------------------------------------
@dataclass
class Thing:
    """A receptacle or object instance of the room being built."""

    pddl: str
    kind: str
    location: str
    receptacle: str | None = None


@dataclass
class Room:
    floor_plan: FloorPlan
    receptacles: list[Thing]
    objects: list[Thing]
    agent_location: str

    @staticmethod
    def kinds(things: list[Thing]) -> dict[str, list[Thing]]:
        out: dict[str, list[Thing]] = {}
        for thing in things:
            out.setdefault(thing.kind, []).append(thing)
        return out


class _RoomBuilder:
    def __init__(self, plan: FloorPlan, rng: random.Random):
        self.plan = plan
        self.rng = rng
        self.used_locations: set[str] = set()
        self.used_ids: set[str] = set()

    def _free_location(self) -> tuple[str, tuple[float, float]]:
        points = self.plan.floor_points
        for _ in range(200):
            x, z = points[self.rng.randrange(len(points))]
            loc = _location(
                round(x / 0.25),
                round(z / 0.25),
                self.rng.randrange(4),
                self.rng.choice((0, 30, 45, 60)),
            )
            if loc not in self.used_locations:
                self.used_locations.add(loc)
                return loc, (float(x), float(z))
        raise RuntimeError("floor plan has too few free points")

    def _new_id(self, kind: str, near: tuple[float, float] | None = None) -> str:
        while True:
            x, z = near if near else (self.rng.uniform(-3, 3), self.rng.uniform(-3, 3))
            ident = _alfred_id(
                kind,
                x + self.rng.uniform(-0.9, 0.9),
                self.rng.uniform(0, 2),
                z + self.rng.uniform(-0.9, 0.9),
            )
            if ident not in self.used_ids:
                self.used_ids.add(ident)
                return ident

    def build(self) -> Room:
        constants = _constants()
        rtypes, otypes, pickupable = _type_tables()
        receptacles: list[Thing] = []
        # 1. receptacles ALFRED lists with a pose for this floor plan
        for alfred_id, (x, z, rotation, horizon) in self.plan.receptacle_poses.items():
            parts = alfred_id.split("|")
            kind = parts[-1] if len(parts) == 5 else parts[0]  # Sink|..|..|..|SinkBasin
            if kind not in rtypes:
                continue
            loc = _location(round(x / 0.25), round(z / 0.25), int(rotation) // 90 % 4, int(horizon))
            if loc in self.used_locations:
                loc, _ = self._free_location()
            self.used_locations.add(loc)
            self.used_ids.add(alfred_id)
            receptacles.append(Thing(mangle(alfred_id), kind, loc))
        # 2. the plan's other receptacle types, which ALFRED gives no pose for
        listed = {thing.kind for thing in receptacles}
        for kind in self.plan.types:
            if kind in rtypes and kind not in listed:
                for _ in range(_DEFAULT_COUNTS.get(kind, 1)):
                    loc, near = self._free_location()
                    receptacles.append(Thing(mangle(self._new_id(kind, near)), kind, loc))
        # 3. a real-size room: more of the repeatable kinds, or fewer of the plentiful ones
        repeatable = [k for k in _REPEATABLE if any(t.kind == k for t in receptacles)] or ["Shelf"]
        while len(receptacles) < MIN_RECEPTACLES:
            kind = self.rng.choice(repeatable)
            loc, near = self._free_location()
            receptacles.append(Thing(mangle(self._new_id(kind, near)), kind, loc))
        while len(receptacles) > MAX_RECEPTACLES:
            counts = Room.kinds(receptacles)
            kind = max(counts, key=lambda k: (len(counts[k]), k))
            receptacles.remove(self.rng.choice(counts[kind]))
        receptacles.sort(key=lambda thing: thing.pddl)

        by_kind = Room.kinds(receptacles)
        objects: list[Thing] = []
        for kind in self.plan.types:
            if kind not in otypes or kind.endswith("Sliced"):
                continue
            if kind in pickupable:
                hosts = [
                    r
                    for r in receptacles
                    if kind in constants.VAL_RECEPTACLE_OBJECTS.get(r.kind, ())
                ]
                if not hosts:
                    continue
                for _ in range(self.rng.choices((1, 2, 3), weights=(5, 3, 2))[0]):
                    host = self.rng.choice(hosts)
                    ident = self._new_id(kind, None)
                    objects.append(Thing(mangle(ident), kind, host.location, host.pddl))
            elif kind == "DeskLamp":
                stands = [r for k in _LAMP_STANDS for r in by_kind.get(k, [])]
                if stands:
                    host = self.rng.choice(stands)
                    objects.append(
                        Thing(mangle(self._new_id(kind)), kind, host.location, host.pddl)
                    )
            else:  # fixtures: windows, light switches, stove knobs...
                count = 4 if kind == "StoveKnob" else self.rng.choice((1, 1, 2))
                for _ in range(count):
                    loc, near = self._free_location()
                    objects.append(Thing(mangle(self._new_id(kind, near)), kind, loc))
        objects.sort(key=lambda thing: thing.pddl)
        agent_location, _ = self._free_location()
        return Room(self.plan, receptacles, objects, agent_location)


@dataclass(frozen=True)
class Goal:
    task_type: str
    object_target: str
    parent_target: str
    toggle_target: str = ""
    mrecep_target: str = ""

    def sentence(self, choice: int) -> str:
        templates = _goal_library()[self.task_type]["templates"]
        return templates[choice % len(templates)].format(
            obj=self.object_target.lower(),
            recep=self.parent_target.lower(),
            toggle=self.toggle_target.lower(),
            mrecep=self.mrecep_target.lower(),
        )

    def pddl(self) -> str:
        text = _goal_library()[self.task_type]["pddl"]
        text = text.format(
            obj=self.object_target,
            recep=self.parent_target,
            toggle=self.toggle_target,
            mrecep=self.mrecep_target,
        )
        return text.replace("#", "-")


def choose_goal(room: Room, task_type: str, rng: random.Random) -> Goal | None:
    """A goal of ``task_type`` that this room can host, or ``None``."""
    constants = _constants()
    _, _, pickupable = _type_tables()
    objects = room.kinds(room.objects)
    receptacle_kinds = sorted(room.kinds(room.receptacles))
    movable = [k for k in sorted(objects) if k in pickupable]
    if task_type == "look_at_obj_in_light":
        if "DeskLamp" not in objects:
            return None
        return (
            Goal(task_type, rng.choice(movable), "", toggle_target="DeskLamp") if movable else None
        )
    if task_type in _APPLIANCE:
        if _APPLIANCE[task_type] not in receptacle_kinds:
            return None
        allowed = constants.VAL_ACTION_OBJECTS[_STATE_CHANGE[task_type]]
        movable = [k for k in movable if k in allowed]
    if task_type == "pick_two_obj_and_place":
        movable = [k for k in movable if len(objects[k]) >= 2]
    rng.shuffle(movable)
    for kind in movable:
        targets = [
            r
            for r in receptacle_kinds
            if kind in constants.VAL_RECEPTACLE_OBJECTS.get(r, ())
            and r != _APPLIANCE.get(task_type)
        ]
        # not already done: some object of the kind must lie outside every target
        if task_type == "pick_two_obj_and_place":
            targets = [
                r for r in targets if sum(1 for o in objects[kind] if _kind_of(room, o) != r) >= 2
            ]
        if targets:
            return Goal(task_type, kind, rng.choice(targets))
    return None


def _kind_of(room: Room, thing: Thing) -> str | None:
    for receptacle in room.receptacles:
        if receptacle.pddl == thing.receptacle:
            return receptacle.kind
    return None


# --------------------------------------------------------------------------------------------
# Writing PDDL and the official files
# --------------------------------------------------------------------------------------------
def planning_room(room: Room, goal: Goal) -> Room:
    """The room without objects the goal does not mention: what the planner searches.

    In ALFWorld's domain an object never blocks another (receptacles have no capacity, the
    agent holds one thing and may put it back), so this room is solvable exactly when the
    full one is, and its plan plays unchanged in the full game (names are the same: every
    instance of the goal's types and every receptacle stays). Searching it takes a fraction
    of a second where the full room can take the planner a minute.
    """
    keep = {goal.object_target, goal.toggle_target} - {""}
    objects = [thing for thing in room.objects if thing.kind in keep]
    return Room(room.floor_plan, room.receptacles, objects, room.agent_location)


def pddl_problem(room: Room, goal: Goal, name: str) -> str:
    """The problem in the layout of ALFWorld's ``game.tw-pddl`` files."""
    constants = _constants()
    rtypes, otypes, pickupable = _type_tables()
    actions = constants.VAL_ACTION_OBJECTS
    sep = "\n        "
    locations = sorted({t.location for t in room.receptacles} | {t.location for t in room.objects})
    if room.agent_location not in locations:
        locations.append(room.agent_location)
    objects_block = sep.join(
        [f"{o} - object" for o in otypes]
        + [f"{o}Type - otype" for o in otypes]
        + [f"{r}Type - rtype" for r in rtypes]
        + [""]
        + [f"{t.pddl} - object" for t in room.objects]
        + [f"{t.pddl} - receptacle" for t in room.receptacles]
        + [f"{loc} - location" for loc in locations]
    )
    present_otypes = sorted({t.kind for t in room.objects})
    present_rtypes = sorted({t.kind for t in room.receptacles})
    fridges = {t.pddl for t in room.receptacles if t.kind == "Fridge"}
    facts = (
        [f"(receptacleType {t.pddl} {t.kind}Type)" for t in room.receptacles]
        + [f"(objectType {t.pddl} {t.kind}Type)" for t in room.objects]
        + [
            f"(canContain {r}Type {o}Type)"
            for r in present_rtypes
            for o in present_otypes
            if o in constants.VAL_RECEPTACLE_OBJECTS.get(r, ())
        ]
        + [f"(pickupable {t.pddl})" for t in room.objects if t.kind in pickupable]
        + [
            f"(isReceptacleObject {t.pddl})"
            for t in room.objects
            if t.kind in constants.MOVABLE_RECEPTACLES_SET
        ]
        + [
            f"(openable {t.pddl})"
            for t in room.receptacles
            if t.kind in constants.OPENABLE_CLASS_LIST
        ]
        + [f"(atLocation agent1 {room.agent_location})"]
        + [f"(cleanable {t.pddl})" for t in room.objects if t.kind in actions["Cleanable"]]
        + [f"(heatable {t.pddl})" for t in room.objects if t.kind in actions["Heatable"]]
        + [f"(coolable {t.pddl})" for t in room.objects if t.kind in actions["Coolable"]]
        + [
            f"(isCool {t.pddl})"  # ALFRED counts what starts in the fridge as cold
            for t in room.objects
            if t.receptacle in fridges and t.kind == goal.object_target
        ]
        + [f"(toggleable {t.pddl})" for t in room.objects if t.kind == goal.toggle_target]
        + [f"(sliceable {t.pddl})" for t in room.objects if t.kind in actions["Sliceable"]]
        + [f"(inReceptacle {t.pddl} {t.receptacle})" for t in room.objects if t.receptacle]
        + [f"(receptacleAtLocation {t.pddl} {t.location})" for t in room.receptacles]
        + [f"(objectAtLocation {t.pddl} {t.location})" for t in room.objects]
    )
    return (
        f"\n(define (problem plan_{name})\n(:domain alfred)\n(:objects\nagent1 - agent\n"
        f"{objects_block}\n        )\n    \n\n(:init\n\n{sep}{sep.join(facts)}\n        )\n"
        f"{goal.pddl()}"
    )


@dataclass(frozen=True)
class GeneratedGame:
    game: dict[str, Any]
    traj: dict[str, Any]
    folder: str


def generate_game(split: str, index: int, task_type: str | None = None) -> GeneratedGame:
    """Game ``index`` of ``split``: deterministic, solvable (checked with the planner)."""
    from comprl_gym.envs.alfworld.engine import make_alfred_engine

    task_type = task_type or TASK_TYPES[index % len(TASK_TYPES)]
    rng = random.Random(f"comprl-alfworld/v{GENERATOR_VERSION}/{split}/{index}")
    constants = _constants()
    domain, grammar = alfred_domain_and_grammar()
    rooms = constants.GOALS_VALID[task_type]
    plans = [n for n in split_floor_plans(split) if load_floor_plan(n).room in rooms]
    engine = make_alfred_engine()
    for attempt in range(_ATTEMPTS):
        plan = load_floor_plan(rng.choice(plans))
        room = _RoomBuilder(plan, rng).build()
        goal = choose_goal(room, task_type, rng)
        if goal is None:
            continue
        trial = f"trial_G{GENERATOR_VERSION}_{split}_{index:05d}"
        sentence = goal.sentence(rng.randrange(1 << 30))
        game = {
            "pddl_domain": domain,
            "grammar": grammar.replace("UNKNOWN GOAL", sentence),
            "pddl_problem": pddl_problem(room, goal, trial),
        }
        reduced = dict(game, pddl_problem=pddl_problem(planning_room(room, goal), goal, trial))
        walkthrough = _solve(engine, game, reduced)
        if walkthrough is None:
            logger.debug(
                "split %s game %d attempt %d: no plan, drawing again", split, index, attempt
            )
            continue
        game["solvable"] = True
        game["walkthrough"] = walkthrough
        folder = "-".join(
            [
                task_type,
                goal.object_target,
                goal.mrecep_target or "None",
                goal.parent_target or "None",
            ]
            + [str(plan.number)]
        )
        traj = {
            "images": [],
            "pddl_params": {
                "mrecep_target": goal.mrecep_target,
                "object_sliced": False,
                "object_target": goal.object_target,
                "parent_target": goal.parent_target,
                "toggle_target": goal.toggle_target,
            },
            "plan": {
                "high_pddl": [
                    {"high_idx": i, "discrete_action": {"action": step, "args": []}}
                    for i, step in enumerate(walkthrough)
                ],
                "low_actions": [],
            },
            "scene": {
                "floor_plan": f"FloorPlan{plan.number}",
                "scene_num": plan.number,
                "random_seed": rng.randrange(1 << 31),
                "dirty_and_empty": False,
                "init_action": {},
                "object_poses": [],
                "object_toggles": [],
            },
            "task_id": trial,
            "task_type": task_type,
            "turk_annotations": {
                "anns": [
                    {
                        "assignment_id": "generated",
                        "high_descs": [],
                        "task_desc": sentence,
                        "votes": [],
                    }
                ]
            },
            "comprl_generator": {"version": GENERATOR_VERSION, "split": split, "index": index},
        }
        return GeneratedGame(game, traj, f"{folder}/{trial}")
    raise EnvBackendError(
        f"could not generate a solvable {task_type} game for {split}/{index} in {_ATTEMPTS} draws"
    )


def _solve(engine: Any, game: dict[str, Any], reduced: dict[str, Any]) -> list[str] | None:
    """Fast Downward's plan for ``reduced`` if it wins the full ``game``, else ``None``."""
    engine.unwrapped.use_disk_cache = False  # planning-only problems are not worth keeping
    engine.load(reduced)
    engine.reset()
    plan = engine.unwrapped.plan()
    engine.unwrapped.use_disk_cache = True
    engine.load(game)
    state = engine.reset()
    if state["won"] or not plan:
        return None  # already solved (not a task) or no plan
    for command in plan:
        if command not in state["admissible_commands"]:
            return None
        state, _, _ = engine.step(command)
    return plan if state["won"] else None


# --------------------------------------------------------------------------------------------
# A lazily generated, cached set
# --------------------------------------------------------------------------------------------
class GeneratedGames:
    """Games ``0..size-1`` of a split, generated on first use and cached on disk.

    Game ``i`` has task type ``TASK_TYPES[i % 6]``; :meth:`indices` lists the games of some
    task types. Files are written atomically, so concurrent processes at worst generate the
    same game twice and write identical bytes.
    """

    def __init__(self, split: str, size: int | None = None, root: Path | None = None):
        self.split = split
        self.size = size if size is not None else DEFAULT_SPLIT_SIZES[split]
        self.root = root or cache_dir("alfworld", f"generated-v{GENERATOR_VERSION}", split)
        self._lock = threading.Lock()
        self._known: dict[int, Path] | None = None

    def indices(self, task_types: tuple[str, ...] | list[str]) -> list[int]:
        wanted = {TASK_TYPES.index(t) for t in task_types}
        return [i for i in range(self.size) if i % len(TASK_TYPES) in wanted]

    def _scan(self) -> dict[int, Path]:
        known = {}
        pattern = re.compile(rf"trial_G{GENERATOR_VERSION}_{self.split}_(\d+)")
        for trial in self.root.glob("*/trial_G*"):
            match = pattern.fullmatch(trial.name)
            if match and (trial / GAME_FILE).exists() and (trial / TRAJ_FILE).exists():
                known[int(match.group(1))] = trial
        return known

    def task_id(self, folder: Path) -> str:
        return f"generated-v{GENERATOR_VERSION}/{self.split}/{folder.parent.name}/{folder.name}"

    def record(self, index: int) -> GameRecord:
        """The game ``index``, generating and caching it if needed."""
        with self._lock:
            if self._known is None:
                self._known = self._scan()
            folder = self._known.get(index)
            if folder is None:
                logger.info("generating ALFWorld game %s/%d", self.split, index)
                folder = self._write(generate_game(self.split, index))
                self._known[index] = folder
        task_type = TASK_TYPES[index % len(TASK_TYPES)]
        return GameRecord(self.task_id(folder), folder / GAME_FILE, folder / TRAJ_FILE, task_type)

    def _write(self, generated: GeneratedGame) -> Path:
        folder = self.root / generated.folder
        atomic_write_text(folder / "initial_state.pddl", generated.game["pddl_problem"])
        atomic_write_json(folder / TRAJ_FILE, generated.traj)
        atomic_write_json(folder / GAME_FILE, generated.game)  # last: marks the game complete
        return folder

    def prepare(self, indices: list[int] | range, progress: bool = True) -> list[GameRecord]:
        """Generate (if needed) several games, with a progress bar."""
        from tqdm.auto import tqdm

        indices = list(indices)
        with self._lock:
            if self._known is None:
                self._known = self._scan()
            missing = [i for i in indices if i not in self._known]
        bar = tqdm(
            total=len(missing),
            desc=f"generating ALFWorld {self.split} games",
            disable=not progress or not missing,
        )
        with bar:
            for index in missing:
                self.record(index)
                bar.update(1)
        return [self.record(i) for i in indices]
