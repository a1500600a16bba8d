"""Generated MiniHack layouts: des-files of this project, registered as minihack task ids.

minihack builds any level from a des-file (``MiniHack-Navigation-Custom-v0``); a layout here
is registered under its own ``MiniHack-<name>-v0`` id with that des-file bound, so
``MiniHackTextEnv`` (and ``comprl/MiniHack-<name>-v0``) plays it like a built-in task.

``Room-East-4x3`` is a small task for learning experiments on a CPU budget: the staircase is
always three columns east of the start, the start row is drawn per episode, and the
observation names the offset. Measured (300 episodes): a uniform random walk over the eight
moves wins 16% within 8 steps, 21% within 12, 34% within 16; SmolLM2-135M at temperature 1
won 0 of 40 episodes of 8 steps (it rarely walks east: 11 of 128 moves in one batch).

``Corridor-North-4`` is the corridor run's task (``configs/corridor.yaml``): a lit corridor one
cell wide, the start at its south end and the staircase three steps north. Within 5 steps SmolLM2-135M
sampled at temperature 1 wins 14-17% (9 and 11 of 64 held-out episodes in two runs; it
wastes moves on walls, south steps and numbers that name no action), so GRPO's groups hold
wins and losses; greedy decoding walks north three times and wins every episode. It is easy
by design: 2 CPU cores buy about a hundred training episodes.

Example:
    >>> import gymnasium as gym
    >>> import comprl_gym
    >>> env = gym.make("comprl/MiniHack-Room-East-4x3-v0")
    >>> obs, info = env.reset(seed=0)
    >>> "staircase down: 3 steps east" in obs.splitlines()[3]
    True
    >>> env.close()
"""

from __future__ import annotations

import gymnasium as gym

#: layout name -> des-file. Level names are limited to 14 characters by NetHack.
LAYOUTS: dict[str, str] = {
    # A lit 4x3 room: the agent starts on a random row of the west column, the staircase down
    # is on the middle row of the east column, three steps away.
    "Room-East-4x3": """
MAZE: "mylevel", ' '
FLAGS:premapped
GEOMETRY:center,center
MAP
------
|....|
|....|
|....|
------
ENDMAP
REGION:(0,0,5,4),lit,"ordinary"
BRANCH:(1,1,1,3),(0,0,0,0)
STAIR:(4,2),down
""",
    # A lit corridor one cell wide and four long: start at the south end, the staircase down
    # at the north end, three steps north.
    "Corridor-North-4": """
MAZE: "mylevel", ' '
FLAGS:premapped
GEOMETRY:center,center
MAP
---
|.|
|.|
|.|
|.|
---
ENDMAP
REGION:(0,0,2,5),lit,"ordinary"
BRANCH:(1,4,1,4),(0,0,0,0)
STAIR:(1,1),down
""",
}


def register_layouts() -> None:
    """Register every layout as ``MiniHack-<name>-v0`` (idempotent)."""
    for name, des_file in LAYOUTS.items():
        task_id = f"MiniHack-{name}-v0"
        if task_id not in gym.registry:
            gym.register(
                id=task_id,
                entry_point="minihack.navigation:MiniHackNavigation",
                kwargs={"des_file": des_file},
            )
