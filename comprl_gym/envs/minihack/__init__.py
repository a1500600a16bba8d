"""MiniHack text environments (``comprl/MiniHack-*``): real NetHack through minihack and nle.

Example:
    >>> import gymnasium as gym
    >>> import comprl_gym
    >>> env = gym.make("comprl/MiniHack-v0", task="MiniHack-Room-5x5-v0")
    >>> obs, info = env.reset(seed=3)
    >>> info["env_family"], "north" in info["admissible_actions"]
    ('minihack', True)
    >>> env.close()
"""

from comprl_gym.families import EnvEntry, FamilySpec, ValidationProfile, lazy_exports

_ENTRY_POINT = "comprl_gym.envs.minihack:MiniHackTextEnv"

_ROOMS = {
    "Room": "an empty lit room; reach the staircase down",
    "Room-Random": "a lit room with random start and goal",
    "Room-Dark": "a dark room: only adjacent cells are seen",
    "Room-Monster": "a room with monsters between you and the stairs",
    "Room-Trap": "a room with hidden traps",
    "Room-Ultimate": "a dark room with monsters and traps",
}
#: minihack task name (without ``MiniHack-`` and ``-v0``) -> what it is.
TASKS: dict[str, str] = {
    **{
        f"{name}-{size}": f"{size} {what}"
        for name, what in _ROOMS.items()
        for size in ("5x5", "15x15")
    },
    "Corridor-R2": "two rooms joined by corridors; find the stairs",
    "Corridor-R3": "three rooms joined by corridors; find the stairs",
    "Corridor-R5": "five rooms joined by corridors; find the stairs",
    "KeyRoom-S5": "pick up a key, open a locked door, reach the stairs",
    "MazeWalk-9x9": "a 9x9 maze to the stairs",
    "MazeWalk-15x15": "a 15x15 maze to the stairs",
    "MultiRoom-N2": "two rooms joined by doors",
    "MultiRoom-N4": "four rooms joined by doors",
    # Generated (envs/minihack/layouts.py).
    "Room-East-4x3": "a lit 4x3 room; start on the west wall, stairs three steps east",
    "Corridor-North-4": "a lit corridor one cell wide; stairs three steps north (configs/corridor.yaml)",
}

SPEC = FamilySpec(
    name="minihack",
    label="MiniHack",
    entries=(
        *(
            EnvEntry(
                f"comprl/MiniHack-{name}-v0",
                _ENTRY_POINT,
                what,
                {"task": f"MiniHack-{name}-v0"},
            )
            for name, what in TASKS.items()
        ),
        EnvEntry(
            "comprl/MiniHack-v0",
            _ENTRY_POINT,
            "any minihack task: gym.make('comprl/MiniHack-v0', task='MiniHack-River-v0')",
            {"task": "MiniHack-Room-5x5-v0"},
        ),
    ),
    expert="comprl_gym.envs.minihack.expert:MiniHackExpert",
    action_grammar=(
        "You play MiniHack, a small NetHack dungeon, through text. You see the map around you "
        "described in words. An action is a direction to move (north, east, south, west, "
        "north-east, south-east, south-west, north-west) or a command such as 'pick up', "
        "'open north', 'kick east', 'apply', 'search'. Reach the staircase down ('>') to win."
    ),
    extractor_focus=(
        "You are a dungeon-strategy archivist for MiniHack (NetHack rooms, corridors, mazes). "
        "Extract reusable navigation and survival heuristics: reading the map symbols ('>' "
        "stairs down, '@' the agent, '#' corridors, '+' doors), avoiding loops and walls, "
        "handling monsters, traps, keys and locked doors, and reaching the goal in few moves."
    ),
    suite_content="comprl_gym.envs.minihack.benchmarking:suite_content",
    suite_engines=("minihack", "nle"),
    validation_by_id={
        # Room-5x5/15x15 put you and the stairs in the same corners every time; the generated
        # demo corridor is one fixed des-file map.
        **{
            f"comprl/{name}": ValidationProfile(seeds_vary=False)
            for name in (
                "MiniHack-Room-5x5-v0",
                "MiniHack-Room-15x15-v0",
                "MiniHack-v0",  # Room-5x5 by default
                "MiniHack-Corridor-North-4-v0",
            )
        },
        "comprl/MiniHack-Room-Ultimate-15x15-v0": ValidationProfile(
            expert_floor=0.5,
            expert_floor_reason="the expert plans paths but does not fight: the monsters of a "
            "dark 15x15 room can kill it on its way",
        ),
    },
)

# The env imports nle: load it on first use so listing the family stays light.
__getattr__ = lazy_exports(__name__, {"MiniHackTextEnv": "comprl_gym.envs.minihack.env"})

__all__ = ["SPEC", "TASKS", "MiniHackTextEnv"]
