"""The memory family's dungeons: names, task pools, hidden sides, des-files and lessons.

Everything here is plain Python (no NetHack): the generator the env plays, and the public
helpers a benchmark uses to write lessons about a task.

There are :data:`N_DUNGEONS` named dungeons ("the Vault of Marrow", ...). Each is a dark hall
one cell high; the agent starts in its middle, where it splits into a west and an east
branch, and the staircase down lies at the end of one branch, :data:`BRANCH_LENGTH` steps
away and out of sight (the hall is unlit: NetHack shows only the cells next to the agent).
The side is fixed per dungeon and drawn across dungeons from a hash of the name (half the
dungeons of each pool east, half west), so the same dungeon always hides its stairs on the
same side and nothing in the weights can say which side a dungeon it has not met uses.

The branch without the stairs is a dead end: the env ends the episode, lost, on the first step
into it, so only the first choice of side matters.

* ``variant="fork"`` (*recall*): nothing in the observation tells the sides apart; only a
  lesson from an earlier visit to the same dungeon can.
* ``variant="landmark"`` (*rule*): a landmark (a fountain, altar, sink or grave) stands in an
  alcove diagonally next to the start, always on the stairs' side, north or south of the hall.
  The observation describes it; the rule "the stairs are on the landmark's side" transfers to
  dungeons never visited.

Task pools (``split``): dungeon indices ``0..191`` are the ``train`` pool and ``192..255`` the
``test`` (held-out) pool. ``256..511`` are ``test_large``, a second held-out pool of 256
dungeons whose names share no word with any other pool's (added 2026-12-03 for evaluations
that need more held-out tasks than 64: the dungeons 0..255 are unchanged). ``512..767`` are
``sealed``, 256 dungeons whose names share no word with any other pool's, reserved for issue
44's one final, pre-registered table: nothing in development may use them, and the
pre-registration file must be committed before any run on them (added 2026-12-04: the
dungeons 0..511 are unchanged). The pools are
disjoint by construction: an env of one split maps every seed into its own index range and
refuses a ``task_id`` of another.

Example:
    >>> d = dungeon("the Vault of Marrow")
    >>> d.task_id("fork"), d.split
    ('fork/vault-of-marrow', 'train')
    >>> dungeon("fork/vault-of-marrow") == dungeon("landmark/vault-of-marrow") == d
    True
    >>> sum(dungeon(i).side == "east" for i in SPLITS["test"])  # balanced in each pool
    32
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass

from comprl_gym.core import ConfigurationError
from comprl_gym.lessons.core import LessonStem

#: Bump when the generated dungeons change (names, sides, landmarks, des-files). Adding the
#: ``test_large`` and ``sealed`` pools did not: the earlier dungeons are as they were.
GENERATOR_VERSION = 1
VARIANTS: tuple[str, ...] = ("fork", "landmark")
SIDES: tuple[str, ...] = ("east", "west")
#: Steps from the start to the stairs; the default step limit is two more (see
#: :func:`default_max_steps`).
BRANCH_LENGTH = 3
#: Landmarks of the ``landmark`` variant: des-file command -> nle's words for it.
LANDMARKS: dict[str, str] = {
    "FOUNTAIN": "fountain",
    "ALTAR": "neutral altar",
    "SINK": "sink",
    "GRAVE": "grave",
}

_PLACES = [
    "Vault",
    "Crypt",
    "Halls",
    "Pit",
    "Tower",
    "Keep",
    "Caves",
    "Barrow",
    "Sanctum",
    "Warren",
    "Depths",
    "Catacombs",
    "Forge",
    "Cellar",
    "Grotto",
    "Labyrinth",
]
_THINGS = [
    "Marrow",
    "Ash",
    "Thorns",
    "Embers",
    "Silence",
    "Bones",
    "Frost",
    "Rust",
    "Whispers",
    "Salt",
    "Ravens",
    "Moss",
    "Iron",
    "Tides",
    "Smoke",
    "Glass",
]


def _digest(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


#: The ``test_large`` pool's words: none is a word of the lists above.
_LARGE_PLACES = [
    "Mire",
    "Spire",
    "Hollow",
    "Bastion",
    "Abyss",
    "Chasm",
    "Ossuary",
    "Shrine",
    "Gallery",
    "Undercroft",
    "Tomb",
    "Sepulchre",
    "Citadel",
    "Quarry",
    "Cistern",
    "Reliquary",
]
_LARGE_THINGS = [
    "Lanterns",
    "Antlers",
    "Cinders",
    "Echoes",
    "Wolves",
    "Amber",
    "Pearls",
    "Sorrow",
    "Storms",
    "Copper",
    "Feathers",
    "Dust",
    "Roots",
    "Candles",
    "Chains",
    "Serpents",
]


#: The ``sealed`` pool's words: none is a word of the lists above (added for issue 44's final
#: table; see :func:`pool`).
_SEALED_PLACES = [
    "Lair",
    "Mausoleum",
    "Ruins",
    "Dome",
    "Fortress",
    "Burrow",
    "Chapel",
    "Hive",
    "Kiln",
    "Mines",
    "Oubliette",
    "Rookery",
    "Sump",
    "Terrace",
    "Den",
    "Gaol",
]
_SEALED_THINGS = [
    "Moths",
    "Lichen",
    "Brambles",
    "Tallow",
    "Hounds",
    "Jade",
    "Onyx",
    "Mist",
    "Owls",
    "Rain",
    "Bells",
    "Coal",
    "Spiders",
    "Sulphur",
    "Quills",
    "Ivy",
]


def _names(places: list[str], things: list[str]) -> tuple[str, ...]:
    names = [f"the {place} of {thing}" for place in places for thing in things]
    # A fixed order that mixes the words, the same in every Python version.
    return tuple(sorted(names, key=lambda name: _digest(f"order:{name}")))


#: Every dungeon's name; a dungeon's index is its position here. The ``test_large`` names come
#: after the first 256 and the ``sealed`` names after the first 512, so adding them left every
#: earlier dungeon's index, side and landmark as they were (sides are balanced within each
#: pool, see :func:`_balanced_sides`).
DUNGEON_NAMES: tuple[str, ...] = (
    _names(_PLACES, _THINGS)
    + _names(_LARGE_PLACES, _LARGE_THINGS)
    + _names(_SEALED_PLACES, _SEALED_THINGS)
)
N_DUNGEONS = len(DUNGEON_NAMES)
#: Dungeon indices of each pool: disjoint ranges. ``sealed`` is reserved for issue 44's one
#: final, pre-registered table: nothing in development may use it (see :func:`pool`).
SPLITS: dict[str, range] = {
    "train": range(0, 192),
    "test": range(192, 256),
    "test_large": range(256, 512),
    "sealed": range(512, N_DUNGEONS),
}


def slug(name: str) -> str:
    """A dungeon name as a task-id word.

    Example:
        >>> slug("the Vault of Marrow")
        'vault-of-marrow'
    """
    return re.sub(r"[^a-z]+", "-", name.lower().removeprefix("the ")).strip("-")


_BY_SLUG = {slug(name): index for index, name in enumerate(DUNGEON_NAMES)}


def _balanced_sides() -> tuple[str, ...]:
    """Each pool's dungeons ordered by a hash of their name: the first half east, then west."""
    sides = [""] * N_DUNGEONS
    for pool in SPLITS.values():
        ordered = sorted(pool, key=lambda i: _digest(f"side:{DUNGEON_NAMES[i]}"))
        for rank, index in enumerate(ordered):
            sides[index] = SIDES[0] if rank < len(ordered) // 2 else SIDES[1]
    return tuple(sides)


_SIDES = _balanced_sides()


@dataclass(frozen=True)
class Dungeon:
    """One named dungeon and the facts the generator fixed for it.

    Attributes:
        index: its position in :data:`DUNGEON_NAMES`.
        name: e.g. ``"the Vault of Marrow"`` (in the task text).
        side: ``"east"`` or ``"west"``: the branch holding the stairs (never shown).
        landmark: the ``landmark`` variant's des-file landmark (``"FOUNTAIN"``...).
        landmark_row: ``"north"`` or ``"south"``: the wall the landmark's alcove is cut in.
    """

    index: int
    name: str
    side: str
    landmark: str
    landmark_row: str

    @property
    def split(self) -> str:
        """The pool the dungeon belongs to: ``train``, ``test``, ``test_large`` or ``sealed``."""
        return next(name for name, pool in SPLITS.items() if self.index in pool)

    def task_id(self, variant: str) -> str:
        """``info["task_id"]`` of this dungeon in ``variant``: ``"fork/vault-of-marrow"``."""
        return f"{variant}/{slug(self.name)}"


def dungeon(task: int | str) -> Dungeon:
    """The dungeon of an index, a task id (``"fork/vault-of-marrow"``), a slug or a name.

    Raises:
        ConfigurationError: no dungeon has that id or name.
    """
    if isinstance(task, int) and not isinstance(task, bool):
        if not 0 <= task < N_DUNGEONS:
            raise ConfigurationError(f"dungeon index {task} outside 0..{N_DUNGEONS - 1}")
        index = task
    elif isinstance(task, str):
        key = task.split("/", 1)[1] if task.split("/", 1)[0] in VARIANTS else task
        index = _BY_SLUG.get(slug(key))
        if index is None:
            raise ConfigurationError(f"no memory dungeon is called {task!r}")
    else:
        raise ConfigurationError(f"a dungeon is named by an index or a string, got {task!r}")
    digest = _digest(f"landmark:{DUNGEON_NAMES[index]}")
    kinds = tuple(LANDMARKS)
    return Dungeon(
        index=index,
        name=DUNGEON_NAMES[index],
        side=_SIDES[index],
        landmark=kinds[digest % len(kinds)],
        landmark_row=("north", "south")[(digest >> 8) % 2],
    )


def pool(split: str) -> range:
    """Dungeon indices of ``split`` (``"train"``, ``"test"``, ``"test_large"`` or ``"sealed"``).

    ``"sealed"`` (dungeons 512..767, names sharing no word with any other pool's) is reserved
    for one final, pre-registered table (issue 44): nothing in development may use it (no
    committed result under ``benchmarks/results/`` names a sealed dungeon, but that table's own
    files, and no config in ``configs/`` selects it; ``tests/test_memory_family.py`` checks
    both), and the pre-registration file (the table's exact command, methods, seeds, pool and
    primary comparison: ``benchmarks/preregistered/sealed_table.yaml``) is committed before
    any run on it (``benchmarks/sealed_table/run.py`` refuses to run otherwise).

    Example:
        >>> pool("train"), pool("test"), pool("test_large"), pool("sealed")
        (range(0, 192), range(192, 256), range(256, 512), range(512, 768))
    """
    if split not in SPLITS:
        raise ConfigurationError(f"split must be one of {sorted(SPLITS)}, got {split!r}")
    return SPLITS[split]


def default_max_steps(branch_length: int = BRANCH_LENGTH) -> int:
    """The default step limit: the branch plus two spare steps (a bump into a wall, a word
    that is not an action). The wrong branch needs no limit to lose: its first cell ends the
    episode.

    Example:
        >>> default_max_steps()
        5
    """
    return branch_length + 2


def task_text(variant: str, d: Dungeon) -> str:
    """The task an episode shows: the dungeon's name, never its side.

    Example:
        >>> task_text("fork", dungeon("the Vault of Marrow"))
        'You are in the Vault of Marrow, a dark hall that splits into two branches at your feet. The staircase down (>) is at the end of one branch, out of sight: reach it.'
    """
    hall = "a dark hall that splits into two branches at your feet"
    if variant == "landmark":
        hall += ", beside a landmark"
    return (
        f"You are in {d.name}, {hall}. The staircase down (>) is at the end of one branch, "
        "out of sight: reach it."
    )


@functools.lru_cache(maxsize=64)
def des_file(
    variant: str,
    side: str,
    landmark: str = "",
    landmark_row: str = "north",
    branch_length: int = BRANCH_LENGTH,
) -> str:
    """The des-file of a hall with the stairs on ``side`` (and, for ``landmark``, its alcove).

    The hall is unlit and not premapped; the start (the arrival point of NetHack's branch) is
    its middle cell. A west and an east hall are mirror images, so their first observations
    match word for word.

    Example:
        >>> print(des_file("fork", "west", branch_length=2).split("MAP")[1])
        <BLANKLINE>
        -------
        |.....|
        -------
        END
    """
    if variant not in VARIANTS or side not in SIDES:
        raise ConfigurationError(f"unknown variant/side {variant!r}/{side!r}")
    if not 2 <= branch_length <= 30:
        raise ConfigurationError(f"branch_length must be in 2..30, got {branch_length}")
    width = 2 * branch_length + 3
    wall, hall = "-" * width, "|" + "." * (2 * branch_length + 1) + "|"
    rows = [wall, hall, wall]
    start_x, hall_y = branch_length + 1, 1
    step = 1 if side == "east" else -1
    extra = ""
    if variant == "landmark":
        if landmark not in LANDMARKS or landmark_row not in ("north", "south"):
            raise ConfigurationError(f"unknown landmark {landmark!r}/{landmark_row!r}")
        # An alcove in the wall diagonally next to the start, on the stairs' side.
        alcove_x = start_x + step
        rows = [wall, wall, hall, wall] if landmark_row == "north" else [wall, hall, wall, wall]
        hall_y = rows.index(hall)
        alcove_y = 1 if landmark_row == "north" else 2
        rows[alcove_y] = rows[alcove_y][:alcove_x] + "." + rows[alcove_y][alcove_x + 1 :]
        args = ",neutral,altar" if landmark == "ALTAR" else ""
        extra = f"{landmark}:({alcove_x},{alcove_y}){args}\n"
    height = len(rows) - 1
    stairs_x = start_x + step * branch_length
    return (
        "\nMAZE: \"mylevel\", ' '\nGEOMETRY:center,center\nMAP\n"
        + "\n".join(rows)
        + f'\nENDMAP\nREGION:(0,0,{width - 1},{height}),unlit,"ordinary"\n'
        + f"BRANCH:({start_x},{hall_y},{start_x},{hall_y}),(0,0,0,0)\n"
        + f"STAIR:({stairs_x},{hall_y}),down\n"
        + extra
    )


def dungeon_des_file(variant: str, d: Dungeon, branch_length: int = BRANCH_LENGTH) -> str:
    """The des-file of dungeon ``d`` in ``variant``."""
    return des_file(variant, d.side, d.landmark, d.landmark_row, branch_length)


# ---- lessons --------------------------------------------------------------------------------
#: What :func:`oracle_lesson` says after the dungeon's name, up to the side.
_STAIRS_AT = "the staircase down is at the end of the"


def _lesson(d: Dungeon, fact: str) -> str:
    return f"In {d.name} {fact}"


def other_side(side: str) -> str:
    """The branch that is not ``side``.

    Example:
        >>> other_side("east"), other_side("west")
        ('west', 'east')
    """
    if side not in SIDES:
        raise ConfigurationError(f"side must be one of {SIDES}, got {side!r}")
    return SIDES[1 - SIDES.index(side)]


def oracle_lesson(task: int | str) -> str:
    """A correct lesson about one dungeon: which branch holds the stairs.

    ``task`` is a task id, name, slug or index (:func:`dungeon`).

    Example:
        >>> oracle_lesson("fork/vault-of-marrow")
        'In the Vault of Marrow the staircase down is at the end of the west branch.'
    """
    d = dungeon(task)
    return _lesson(d, f"{_STAIRS_AT} {d.side} branch.")


def lesson_stem(task: int | str) -> LessonStem | None:
    """The oracle lesson with its one fact, the side, left blank: what the ``stem`` extractor
    fills (the family's :attr:`~comprl_gym.lessons.core.FamilyLessons.stem`). ``None`` for a
    task that names no dungeon.

    Example:
        >>> stem = lesson_stem("fork/vault-of-marrow")
        >>> stem.opening, stem.choices
        ('In the Vault of Marrow the staircase down is at the end of the', (' east branch.', ' west branch.'))
        >>> stem.opening + stem.choices[1] == oracle_lesson("fork/vault-of-marrow")
        True
    """
    try:
        d = dungeon(task)
    except ConfigurationError:
        return None
    return LessonStem(_lesson(d, _STAIRS_AT), tuple(f" {side} branch." for side in SIDES))


def inverted_lesson(task: int | str) -> str:
    """The oracle lesson with the opposite side: as long, as confident, and wrong.

    Example:
        >>> inverted_lesson("fork/vault-of-marrow")
        'In the Vault of Marrow the staircase down is at the end of the east branch.'
    """
    d = dungeon(task)
    return _lesson(d, f"{_STAIRS_AT} {other_side(d.side)} branch.")


#: The placebo's words after the dungeon's name: as many words as the oracle's (11), one
#: character fewer and, for every dungeon, exactly as many SmolLM2 tokens (18.25 on average,
#: as the oracle and the inverted lesson); it names no side, no branch and no stairs.
_PLACEBO_FACT = "the air is cold and the old stone walls drip water."


def placebo_lesson(task: int | str) -> str:
    """A lesson of about the oracle's length that names the dungeon and says nothing useful.

    Example:
        >>> placebo_lesson("fork/vault-of-marrow")
        'In the Vault of Marrow the air is cold and the old stone walls drip water.'
    """
    return _lesson(dungeon(task), _PLACEBO_FACT)


_LANDMARK_WORDS = "the fountain, altar, sink or grave beside the start"


def rule_lesson() -> str:
    """The ``landmark`` variant's rule, true in every dungeon (for lessons that generalise).

    It and :func:`inverted_rule_lesson` are 32 SmolLM2 tokens each.

    Example:
        >>> rule_lesson()
        'In every dungeon the staircase down is at the end of the branch on the same side as the fountain, altar, sink or grave beside the start.'
    """
    return (
        "In every dungeon the staircase down is at the end of the branch on the same side as "
        f"{_LANDMARK_WORDS}."
    )


def inverted_rule_lesson() -> str:
    """The rule turned around: wrong in every dungeon of the ``landmark`` variant.

    Example:
        >>> inverted_rule_lesson()
        'In every dungeon the staircase down is at the end of the branch on the other side from the fountain, altar, sink or grave beside the start.'
    """
    return (
        "In every dungeon the staircase down is at the end of the branch on the other side "
        f"from {_LANDMARK_WORDS}."
    )


def placebo_rule_lesson() -> str:
    """The rule's format-matched placebo: true everywhere and useless (it names no side).

    As many words (27) and SmolLM2 tokens (32) as :func:`rule_lesson`, three characters more;
    it mentions the landmark and the stairs as the rule does, so what the rule does beyond it
    is what its one relation (same side) tells.

    Example:
        >>> placebo_rule_lesson()
        'In every dungeon the staircase down is at the end of one branch and the fountain, altar, sink or grave beside the start is carved of stone.'
    """
    return (
        "In every dungeon the staircase down is at the end of one branch and "
        f"{_LANDMARK_WORDS} is carved of stone."
    )


__all__ = [
    "BRANCH_LENGTH",
    "DUNGEON_NAMES",
    "Dungeon",
    "GENERATOR_VERSION",
    "LANDMARKS",
    "N_DUNGEONS",
    "SIDES",
    "SPLITS",
    "VARIANTS",
    "default_max_steps",
    "des_file",
    "dungeon",
    "dungeon_des_file",
    "inverted_lesson",
    "inverted_rule_lesson",
    "oracle_lesson",
    "other_side",
    "placebo_lesson",
    "placebo_rule_lesson",
    "pool",
    "rule_lesson",
    "slug",
    "task_text",
]
