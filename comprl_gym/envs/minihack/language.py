"""MiniHack observations in words, built from nle's own arrays.

:class:`ObservationRenderer` turns one nle observation dict (``glyphs``, ``chars``,
``blstats``, ``message``, ``screen_descriptions``, ``inv_strs``, ``inv_letters``) into the text
an LLM reads: the game message, what is where relative to the agent ("staircase down: 3 steps
east and 1 step north"), what lies next to it, a status line, the inventory when the task uses
items, and the allowed actions. Only the few non-background cells are decoded, found with one
vectorised lookup over the glyph grid, which keeps rendering cheap.

Example:
    >>> relative_position(3, -1)
    '3 steps east and 1 step north'
    >>> relative_position(0, 2)
    '2 steps south'
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from nle import nethack

from comprl_gym.envs.minihack.actions import DELTA_DIRECTIONS

#: Map symbols (cmap indices, NetHack 3.6 ``defsym.h``) that are background: stone, walls,
#: floor and corridor. Everything else on the map is listed by name.
CMAP_STONE = 0
CMAP_WALLS = range(1, 12)
CMAP_DOORWAY, CMAP_OPEN_DOORS, CMAP_CLOSED_DOORS = 12, (13, 14), (15, 16)
CMAP_FLOORS = (19, 20, 21, 22)  # room, dark part of a room, corridor, lit corridor
CMAP_STAIRS_DOWN = 24
#: NetHack's words for a lit room's floor cell, and the start of its greeting message.
_ROOM_FLOOR = "floor of a room"
_WELCOME = "Hello Agent, welcome to NetHack!"


def _background_glyph_table() -> np.ndarray:
    """A boolean per glyph: True for the background glyphs the text does not enumerate."""
    table = np.zeros(nethack.MAX_GLYPH + 1, dtype=bool)
    for cmap in (CMAP_STONE, *CMAP_WALLS, *CMAP_FLOORS):
        table[nethack.GLYPH_CMAP_OFF + cmap] = True
    return table


BACKGROUND_GLYPHS = _background_glyph_table()

_NEIGHBOURS: tuple[tuple[int, int], ...] = tuple(DELTA_DIRECTIONS)
_MAX_LISTED = 15


def relative_position(dx: int, dy: int) -> str:
    """Where a cell ``dx`` columns east and ``dy`` rows south of the agent is, in words."""
    parts = []
    for amount, positive, negative in ((dx, "east", "west"), (dy, "south", "north")):
        if amount:
            steps = abs(amount)
            parts.append(
                (
                    steps,
                    f"{steps} step{'s' if steps != 1 else ''} {positive if amount > 0 else negative}",
                )
            )
    if not parts:
        return "here"
    parts.sort(key=lambda part: -part[0])
    return " and ".join(text for _, text in parts)


def decode_bytes(row: np.ndarray) -> str:
    """A NUL-terminated byte array as text."""
    return row.tobytes().split(b"\0", 1)[0].decode("utf-8", errors="replace")


def cell_description(screen_descriptions: np.ndarray, x: int, y: int) -> str:
    """nle's words for one map cell ("staircase down", "newt", "" for unseen stone)."""
    return decode_bytes(screen_descriptions[y, x])


def glyph_kind(glyph: int) -> str:
    """A coarse class of a glyph for the text: monster, object, trap or feature."""
    if nethack.glyph_is_monster(glyph) or nethack.glyph_is_invisible(glyph):
        return "monster"
    if nethack.glyph_is_object(glyph):
        return "object"
    if nethack.glyph_is_trap(glyph):
        return "trap"
    return "feature"


@dataclass
class ObservationRenderer:
    """Turns nle observations of one task into text.

    Attributes:
        task_description: one sentence saying what the task asks.
        mode: ``text`` (words only), ``text+map`` (words and the ASCII map), ``map``, or
            ``compact``: the words of ``text`` for a small model's short context, told once.
            The task, the status line and the allowed actions come with the first
            observation only, NetHack's welcome message is left out, and "Next to you" names
            only the neighbours that are not plain room floor. A multi-turn conversation keeps
            the first observation, so nothing is lost. A later observation of Room-Random-5x5
            is 50 SmolLM2 tokens instead of 160 (mean over 32 random-walk episodes).
        show_inventory: list the inventory (tasks whose actions use items, e.g. KeyRoom).
        action_notes: what the less obvious actions do, shown after the allowed actions.
    """

    task_description: str
    mode: str = "text"
    show_inventory: bool = False
    action_notes: str = ""

    def render(
        self,
        obs: dict[str, np.ndarray],
        allowed_actions: list[str],
        notes: str = "",
        first: bool = True,
    ) -> str:
        """The observation text for ``obs``; ``first`` marks an episode's first observation."""
        compact = self.mode == "compact"
        told_once = first or not compact
        sections = [f"Task: {self.task_description}"] if told_once else []
        message = decode_bytes(obs["message"]).strip()
        if compact and message.startswith(_WELCOME):
            message = ""
        if notes:
            sections.append(notes)
        if message:
            sections.append(f"Message: {message}")
        if self.mode in ("text", "text+map", "compact"):
            sections.append(self.describe_surroundings(obs, only_unusual_neighbours=compact))
        if self.mode in ("map", "text+map"):
            sections.append("Map (@ is you, > the staircase down):\n" + self.ascii_map(obs))
        if told_once:
            sections.append(self.status_line(obs))
        if self.show_inventory:
            sections.append(self.inventory(obs))
        if told_once:
            sections.append("Allowed actions: " + ", ".join(allowed_actions))
            if self.action_notes:
                sections.append(self.action_notes)
        return "\n".join(sections)

    def describe_surroundings(
        self, obs: dict[str, np.ndarray], only_unusual_neighbours: bool = False
    ) -> str:
        """What is where relative to the agent, and what lies next to it."""
        glyphs = obs["glyphs"]
        descriptions = obs["screen_descriptions"]
        x, y = int(obs["blstats"][nethack.NLE_BL_X]), int(obs["blstats"][nethack.NLE_BL_Y])
        interesting = ~BACKGROUND_GLYPHS[glyphs]
        interesting[y, x] = False
        ys, xs = np.nonzero(interesting)
        entries = []
        for cy, cx in zip(ys.tolist(), xs.tolist()):
            glyph = int(glyphs[cy, cx])
            words = cell_description(descriptions, cx, cy) or "something"
            kind = glyph_kind(glyph)
            label = words if kind == "feature" else f"{words} ({kind})"
            dx, dy = cx - x, cy - y
            entries.append(
                (max(abs(dx), abs(dy)), abs(dx) + abs(dy), label, relative_position(dx, dy))
            )
        entries.sort()
        lines = ["You see:"]
        if not entries:
            lines.append("- nothing but floor and walls")
        for _, _, label, where in entries[:_MAX_LISTED]:
            lines.append(f"- {label}: {where}")
        if len(entries) > _MAX_LISTED:
            lines.append(f"- ... and {len(entries) - _MAX_LISTED} more things further away")
        lines.append("Next to you: " + self.neighbours(obs, x, y, only_unusual_neighbours))
        return "\n".join(lines)

    @staticmethod
    def neighbours(obs: dict[str, np.ndarray], x: int, y: int, only_unusual: bool = False) -> str:
        """The eight cells around the agent, e.g. ``north: wall; east: floor of a room; ...``.

        ``only_unusual`` leaves out plain room floor and names each kind of cell once, with
        its directions: ``wall: north, north-east; staircase up: south; elsewhere floor``.
        """
        descriptions = obs["screen_descriptions"]
        height, width = obs["glyphs"].shape
        parts = []
        for dx, dy in _NEIGHBOURS:
            cx, cy = x + dx, y + dy
            if 0 <= cx < width and 0 <= cy < height:
                words = cell_description(descriptions, cx, cy) or "dark or solid rock"
            else:
                words = "edge of the map"
            parts.append((DELTA_DIRECTIONS[(dx, dy)], words))
        if not only_unusual:
            return "; ".join(f"{where}: {words}" for where, words in parts)
        kinds: dict[str, list[str]] = {}
        for where, words in parts:
            if words != _ROOM_FLOOR:
                kinds.setdefault(words, []).append(where)
        grouped = [f"{words}: {', '.join(wheres)}" for words, wheres in kinds.items()]
        return "; ".join([*grouped, "elsewhere floor" if grouped else "floor all around"])

    @staticmethod
    def status_line(obs: dict[str, np.ndarray]) -> str:
        """HP, depth, turn and the like from ``blstats``."""
        b = obs["blstats"]
        return (
            f"Status: HP {int(b[nethack.NLE_BL_HP])}/{int(b[nethack.NLE_BL_HPMAX])}, "
            f"depth {int(b[nethack.NLE_BL_DEPTH])}, turn {int(b[nethack.NLE_BL_TIME])}, "
            f"armor class {int(b[nethack.NLE_BL_AC])}, level {int(b[nethack.NLE_BL_XP])}, "
            f"gold {int(b[nethack.NLE_BL_GOLD])}"
        )

    @staticmethod
    def inventory(obs: dict[str, np.ndarray]) -> str:
        """The inventory, one ``letter - item`` per entry."""
        items = []
        for letter, line in zip(obs["inv_letters"].tolist(), obs["inv_strs"]):
            if letter == 0:
                break
            items.append(f"{chr(letter)} - {decode_bytes(line)}")
        return "Inventory: " + ("; ".join(items) if items else "empty")

    @staticmethod
    def ascii_map(obs: dict[str, np.ndarray]) -> str:
        """The dungeon map as ASCII, cropped to the part seen so far."""
        chars = obs["chars"]
        seen = chars != ord(" ")
        rows = np.flatnonzero(seen.any(axis=1))
        cols = np.flatnonzero(seen.any(axis=0))
        if rows.size == 0:
            return "(nothing seen yet)"
        crop = chars[rows[0] : rows[-1] + 1, cols[0] : cols[-1] + 1]
        return "\n".join(line.tobytes().decode("latin-1").rstrip() for line in crop)
