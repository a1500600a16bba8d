"""Named actions for MiniHack: words an LLM can write, mapped onto a task's NetHack keys.

Each task keeps its own action set (``env.unwrapped.actions`` in minihack). Every NetHack
action in it gets a name (``north``, ``pick up``, ``apply``...). Commands that ask "In what
direction?" (``open``, ``kick``, ``close``, ``fight``) become one named action per direction
(``open north``, ``kick south-west``), so one agent action is one complete game command.

Parsing folds case, spacing, hyphens and underscores (``core.normalize_action_text``) and
ignores the spaces between words, so ``North_East``, ``north east`` and ``northeast`` are the
same action. A few phrasings are accepted as aliases (``move north``, ``go north``,
``pickup``, ``apply key``, ``unlock door``); the admissible list shows the canonical names only.

Example:
    >>> from nle.nethack import CompassDirection, Command
    >>> actions = ActionSet.from_nle_actions((*CompassDirection, Command.PICKUP))
    >>> actions.names[:3]
    ['north', 'east', 'south']
    >>> actions.parse("South_West").name
    'south-west'
    >>> actions.parse("pickup").name
    'pick up'
    >>> actions.parse("nort") is None
    True
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from nle.nethack import actions as nle_actions

from comprl_gym.core import normalize_action_text

_Compass = nle_actions.CompassDirection
_Command = nle_actions.Command
_Misc = nle_actions.MiscDirection

#: Compass directions in the order the env lists them, with their words.
DIRECTION_NAMES: dict[int, str] = {
    _Compass.N: "north",
    _Compass.E: "east",
    _Compass.S: "south",
    _Compass.W: "west",
    _Compass.NE: "north-east",
    _Compass.SE: "south-east",
    _Compass.SW: "south-west",
    _Compass.NW: "north-west",
}

#: (dx, dy) of each direction word on the NetHack map (y grows southwards).
DIRECTION_DELTAS: dict[str, tuple[int, int]] = {
    "north": (0, -1),
    "east": (1, 0),
    "south": (0, 1),
    "west": (-1, 0),
    "north-east": (1, -1),
    "south-east": (1, 1),
    "south-west": (-1, 1),
    "north-west": (-1, -1),
}
DELTA_DIRECTIONS: dict[tuple[int, int], str] = {d: name for name, d in DIRECTION_DELTAS.items()}

_COMMAND_NAMES: dict[int, str] = {
    _Command.PICKUP: "pick up",
    _Command.APPLY: "apply",
    _Command.SEARCH: "search",
    _Command.EAT: "eat",
    _Command.DROP: "drop",
    _Command.WEAR: "wear",
    _Command.WIELD: "wield",
    _Command.QUAFF: "quaff",
    _Command.READ: "read",
    _Command.ZAP: "zap",
    _Command.PRAY: "pray",
    _Command.PUTON: "put on",
    _Command.REMOVE: "remove",
    _Command.TAKEOFF: "take off",
    _Command.THROW: "throw",
    _Command.LOOK: "look",
    _Command.INVENTORY: "inventory",
    _Misc.WAIT: "wait",
    _Misc.DOWN: "go down",
    _Misc.UP: "go up",
}

#: Commands that ask for a direction next: they are offered once per compass direction.
DIRECTED_COMMANDS: dict[int, str] = {
    _Command.OPEN: "open",
    _Command.CLOSE: "close",
    _Command.KICK: "kick",
    _Command.FIGHT: "fight",
}

_ALIASES: dict[str, str] = {
    "applykey": "apply",
    "usekey": "apply",
    "unlockdoor": "apply",
    "unlockthedoor": "apply",
    "applythekey": "apply",
    "pickupkey": "pick up",
    "pickupthekey": "pick up",
    "take": "pick up",
    "grab": "pick up",
    "rest": "wait",
    "n": "north",
    "e": "east",
    "s": "south",
    "w": "west",
    "ne": "north-east",
    "se": "south-east",
    "sw": "south-west",
    "nw": "north-west",
}
_MOVE_PREFIXES = ("move", "go", "walk", "step")


def _key(text: str) -> str:
    """The lookup form of an action: normalized, with the spaces between words removed."""
    return normalize_action_text(text).replace(" ", "")


@dataclass(frozen=True)
class NamedAction:
    """One action as the agent names it.

    Attributes:
        name: the canonical words shown in the admissible list.
        indices: positions in the task's nle action list, stepped in this order.
    """

    name: str
    indices: tuple[int, ...]


class ActionSet:
    """The named actions of one task and the parser from free text to them."""

    def __init__(self, actions: list[NamedAction]):
        self.actions = actions
        self.names = [action.name for action in actions]
        self._by_key = {_key(action.name): action for action in actions}
        for alias, target in _ALIASES.items():
            if _key(target) in self._by_key and alias not in self._by_key:
                self._by_key[alias] = self._by_key[_key(target)]

    @classmethod
    def from_nle_actions(cls, nle_action_list: tuple[int, ...] | list[int]) -> ActionSet:
        """Name every action of an nle action list (``env.unwrapped.actions``)."""
        index_of = {int(action): i for i, action in enumerate(nle_action_list)}
        directions = [
            (index_of[int(d)], name) for d, name in DIRECTION_NAMES.items() if int(d) in index_of
        ]
        named: list[NamedAction] = [NamedAction(name, (i,)) for i, name in directions]
        taken = {name for _, name in directions}
        for i, action in enumerate(nle_action_list):
            value = int(action)
            if value in DIRECTION_NAMES:
                continue
            if value in DIRECTED_COMMANDS and directions:
                verb = DIRECTED_COMMANDS[value]
                for direction_index, direction in directions:
                    named.append(NamedAction(f"{verb} {direction}", (i, direction_index)))
                    taken.add(f"{verb} {direction}")
                continue
            if isinstance(action, nle_actions.CompassDirectionLonger):
                name = "far " + DIRECTION_NAMES[_Compass(value + 32)]  # "K" runs like "k"
            else:
                name = _COMMAND_NAMES.get(value) or _enum_words(action)
            if name in taken:
                name = f"{name} ({type(action).__name__.lower()})"
            taken.add(name)
            named.append(NamedAction(name, (i,)))
        return cls(named)

    def parse(self, text: str) -> NamedAction | None:
        """The action ``text`` names, or ``None`` when it names none of this task's actions."""
        key = _key(text)
        if key in self._by_key:
            return self._by_key[key]
        words = normalize_action_text(text).split(" ")
        if len(words) > 1 and words[0] in _MOVE_PREFIXES:
            return self._by_key.get("".join(words[1:]))
        return None

    def __contains__(self, name: str) -> bool:
        return _key(name) in self._by_key


def _enum_words(action: object) -> str:
    """A readable name for an nle action without an explicit one (``Command.SEEARMOR``...)."""
    if isinstance(action, enum.Enum):
        return action.name.lower().replace("_", " ")
    return f"key {int(action)}"  # pragma: no cover - nle action lists hold enums
