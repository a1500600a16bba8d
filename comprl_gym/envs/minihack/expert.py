"""A scripted MiniHack expert: shortest paths to the stairs, exploring what is unseen.

:class:`MiniHackExpert` is *privileged*: instead of parsing the text it reads the env's current
nle arrays (``env.unwrapped.nle_observation``: glyphs, position, message, inventory). It keeps a
small memory per episode (cells it stood on, rock confirmed around them, locked doors) and
each step:

1. attacks an adjacent monster;
2. walks the cheapest path (Dijkstra over seen cells; traps and monsters cost extra, diagonal
   moves through doorways are excluded) to the staircase down when it has been seen;
3. otherwise fetches the key (KeyRoom), unlocks a locked door with it (``apply``) or kicks it
   (``kick <direction>``, Corridor tasks);
4. otherwise explores: walks to the nearest seen, walkable cell next to an unexplored one
   (frontier exploration; this finds the stairs in dark rooms, mazes and corridors);
5. otherwise searches for hidden passages, or steps at random.

Example:
    >>> import gymnasium as gym
    >>> import comprl_gym
    >>> from comprl_gym.rollouts import run_episode
    >>> env = gym.make("comprl/MiniHack-Room-15x15-v0")
    >>> run_episode(env, MiniHackExpert(env), seed=0).won
    True
    >>> env.close()
"""

from __future__ import annotations

import heapq
import random
from typing import Any

import numpy as np
from nle import nethack

from comprl_gym.envs.minihack.actions import DELTA_DIRECTIONS, DIRECTION_DELTAS
from comprl_gym.envs.minihack.language import (
    CMAP_CLOSED_DOORS,
    CMAP_DOORWAY,
    CMAP_OPEN_DOORS,
    CMAP_STAIRS_DOWN,
    CMAP_STONE,
    cell_description,
    decode_bytes,
)

# Cell classes of the planner's grid.
UNKNOWN, BLOCKED, FREE, DOOR, CLOSED_DOOR, TRAP = 0, 1, 2, 3, 4, 5

_WALKABLE_CMAPS = {19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 33, 35, 36, 39, 40}
_TRAP_COST, _MONSTER_COST = 25.0, 6.0
_STUCK_LIMIT = 3
_SEARCHES_PER_SPOT = 8
_RUN_DISTANCE = 3
_REVEAL_WEIGHT = 1.0


def _cell_class_table() -> np.ndarray:
    """The planner's class of every glyph."""
    table = np.full(nethack.MAX_GLYPH + 1, BLOCKED, dtype=np.int8)
    for glyph in range(nethack.MAX_GLYPH + 1):
        if nethack.glyph_is_cmap(glyph):
            cmap = glyph - nethack.GLYPH_CMAP_OFF
            if cmap == CMAP_STONE:
                table[glyph] = UNKNOWN
            elif cmap in _WALKABLE_CMAPS:
                table[glyph] = FREE
            elif cmap == CMAP_DOORWAY or cmap in CMAP_OPEN_DOORS:
                table[glyph] = DOOR
            elif cmap in CMAP_CLOSED_DOORS:
                table[glyph] = CLOSED_DOOR
            if nethack.glyph_is_trap(glyph):
                table[glyph] = TRAP
        elif nethack.glyph_is_object(glyph) or nethack.glyph_is_monster(glyph):
            table[glyph] = FREE  # objects lie on floor; monsters stand on it (boulders: see
            # the stuck detection)
        elif nethack.glyph_is_invisible(glyph):
            table[glyph] = FREE
    return table


CELL_CLASS = _cell_class_table()
IS_MONSTER = np.array(
    [
        nethack.glyph_is_monster(g) or nethack.glyph_is_invisible(g)
        for g in range(nethack.MAX_GLYPH + 1)
    ]
)
IS_OBJECT = np.array([nethack.glyph_is_object(g) for g in range(nethack.MAX_GLYPH + 1)])


class MiniHackExpert:
    """Scripted expert for ``comprl/MiniHack-*`` envs (see the module docstring).

    Args:
        env: the env it plays (any wrapper around :class:`MiniHackTextEnv`).
        seed: seed of its random fallback moves.
    """

    def __init__(self, env: Any, seed: int | None = 0):
        self.env = env
        self._rng = random.Random(seed)
        self.reset("", {})

    # ---- Agent protocol -----------------------------------------------------------------------
    def reset(self, task: str, info: dict[str, Any]) -> None:
        """Forget the previous episode."""
        self._visited: set[tuple[int, int]] = set()
        self._rock: set[tuple[int, int]] = set()
        self._locked: set[tuple[int, int]] = set()
        self._key_positions: set[tuple[int, int]] = set()
        self._last_move: tuple[tuple[int, int], tuple[int, int]] | None = None
        self._stuck_count = 0
        self._impassable: set[tuple[int, int]] = set()
        self._searches: dict[tuple[int, int], int] = {}
        self._doors: set[tuple[int, int]] = set()
        self._stairs: set[tuple[int, int]] = set()

    def act(self, observation: str, info: dict[str, Any]) -> str:
        """The next action, chosen from the env's privileged nle arrays."""
        base = self.env.unwrapped
        obs = base.nle_observation
        allowed = set(info.get("admissible_actions") or base.admissible_actions())
        glyphs = obs["glyphs"]
        x, y = int(obs["blstats"][nethack.NLE_BL_X]), int(obs["blstats"][nethack.NLE_BL_Y])
        here = (y, x)
        grid = CELL_CLASS[glyphs]
        self._remember(obs, grid, here)
        grid = self._grid_with_memory(grid, here)

        monsters = self._monsters(glyphs, here)
        stairs_now = np.nonzero(glyphs == nethack.GLYPH_CMAP_OFF + CMAP_STAIRS_DOWN)
        self._stairs.update((int(sy), int(sx)) for sy, sx in zip(*stairs_now))
        stairs_distance = min(
            (max(abs(sy - y), abs(sx - x)) for sy, sx in self._stairs), default=None
        )
        hp, max_hp = (
            int(obs["blstats"][nethack.NLE_BL_HP]),
            int(obs["blstats"][nethack.NLE_BL_HPMAX]),
        )
        # Near the stairs, or too hurt to fight on, run for them; otherwise fight what is
        # adjacent (monsters follow and hit a fleeing agent).
        run_for_stairs = stairs_distance is not None and (
            stairs_distance <= _RUN_DISTANCE or hp * 3 < max_hp
        )
        attack = None if run_for_stairs else self._adjacent_monster(monsters, here, grid)
        if attack:
            return self._move(here, attack)

        step = self._first_step(grid, here, self._stairs, monsters)
        if step:
            return self._move(here, step)

        attack = self._adjacent_monster(monsters, here, grid)
        if attack:
            return self._move(here, attack)

        key_action = self._key_plan(obs, grid, here, monsters, allowed)
        if key_action:
            return key_action

        door_action = self._locked_door_plan(grid, here, monsters, allowed)
        if door_action:
            return door_action

        frontier = self._frontier(grid)
        step = self._first_step(
            grid, here, frontier, monsters, self._frontier_bonus(grid, frontier)
        )
        if step:
            return self._move(here, step)

        if "search" in allowed:
            search_action = self._search_plan(grid, here, monsters)
            if search_action:
                return search_action
        moves = [name for name in DIRECTION_DELTAS if name in allowed]
        return self._rng.choice(moves)

    # ---- memory -------------------------------------------------------------------------------
    def _remember(
        self, obs: dict[str, np.ndarray], grid: np.ndarray, here: tuple[int, int]
    ) -> None:
        message = decode_bytes(obs["message"])
        if self._last_move is not None:
            start, target = self._last_move
            if "locked" in message:
                self._locked.add(target)
            attacked = IS_MONSTER[obs["glyphs"][target]]
            if start == here and not attacked:
                self._stuck_count += 1
                stubborn_door = (
                    target in self._locked or target in self._doors
                )  # doors resist, retry
                if self._stuck_count >= _STUCK_LIMIT and not stubborn_door:
                    self._impassable.add(target)  # something we cannot pass (a peaceful, a boulder)
                    self._stuck_count = 0
            else:
                self._stuck_count = 0
        self._last_move = None
        self._visited.add(here)
        self._doors.update(
            (int(cy), int(cx))
            for cy, cx in zip(*np.nonzero((grid == DOOR) | (grid == CLOSED_DOOR)))
        )
        height, width = grid.shape
        for dy in (-1, 0, 1):
            for dx in (-1, 0, 1):
                cy, cx = here[0] + dy, here[1] + dx
                if 0 <= cy < height and 0 <= cx < width and grid[cy, cx] == UNKNOWN:
                    self._rock.add((cy, cx))  # adjacent cells are always seen: still blank = rock
        descriptions = obs["screen_descriptions"]
        objects = np.nonzero(IS_OBJECT[obs["glyphs"]])
        for oy, ox in zip(*objects):
            if "key" in cell_description(descriptions, int(ox), int(oy)):
                self._key_positions.add((int(oy), int(ox)))

    def _grid_with_memory(self, grid: np.ndarray, here: tuple[int, int]) -> np.ndarray:
        grid = grid.copy()
        for cy, cx in self._rock:
            if grid[cy, cx] == UNKNOWN:
                grid[cy, cx] = BLOCKED
        for cell in self._impassable - {here}:
            grid[cell] = BLOCKED
        for cell in self._locked:
            if grid[cell] == CLOSED_DOOR:  # an unlocked or broken door is passable again
                grid[cell] = BLOCKED
        if here in self._doors:
            grid[here] = DOOR  # the agent's own glyph hides the doorway it stands in
        return grid

    # ---- planning -----------------------------------------------------------------------------
    @staticmethod
    def _monsters(glyphs: np.ndarray, here: tuple[int, int]) -> set[tuple[int, int]]:
        monster_mask = (glyphs >= nethack.GLYPH_MON_OFF) & (glyphs < nethack.GLYPH_OBJ_OFF)
        monster_mask |= glyphs == nethack.GLYPH_INVISIBLE
        cells = {(int(cy), int(cx)) for cy, cx in zip(*np.nonzero(monster_mask))}
        cells.discard(here)
        return cells

    def _adjacent_monster(
        self, monsters: set[tuple[int, int]], here: tuple[int, int], grid: np.ndarray
    ) -> tuple[int, int] | None:
        for cell in sorted(monsters):
            if cell in self._impassable:
                continue
            if max(abs(cell[0] - here[0]), abs(cell[1] - here[1])) == 1 and self._can_step(
                grid, here, cell
            ):
                return cell
        return None

    @staticmethod
    def _can_step(grid: np.ndarray, start: tuple[int, int], end: tuple[int, int]) -> bool:
        """NetHack forbids diagonal moves into or out of a doorway."""
        if start[0] != end[0] and start[1] != end[1]:
            return grid[start] not in (DOOR, CLOSED_DOOR) and grid[end] not in (DOOR, CLOSED_DOOR)
        return True

    def _first_step(
        self,
        grid: np.ndarray,
        here: tuple[int, int],
        goals: set[tuple[int, int]],
        monsters: set[tuple[int, int]],
        bonus: dict[tuple[int, int], float] | None = None,
    ) -> tuple[int, int] | None:
        """The first cell of the cheapest path from ``here`` to any of ``goals`` (Dijkstra).

        With ``bonus``, the goal minimising ``path cost - bonus[goal]`` wins instead of the
        nearest one (exploration prefers frontier cells that reveal more).
        """
        if not goals or here in goals:
            return None
        height, width = grid.shape
        best = {here: 0.0}
        parent: dict[tuple[int, int], tuple[int, int]] = {}
        queue = [(0.0, here)]
        max_bonus = max(bonus.values(), default=0.0) if bonus else 0.0
        chosen, chosen_score = None, float("inf")
        while queue:
            cost, cell = heapq.heappop(queue)
            if cost - max_bonus >= chosen_score:
                break
            if cost > best[cell]:
                continue
            if cell in goals:
                score = cost - (bonus.get(cell, 0.0) if bonus else 0.0)
                if score < chosen_score:
                    chosen, chosen_score = cell, score
                if not bonus:
                    break
                continue
            for dx, dy in DELTA_DIRECTIONS:
                nxt = (cell[0] + dy, cell[1] + dx)
                if not (0 <= nxt[0] < height and 0 <= nxt[1] < width):
                    continue
                kind = grid[nxt]
                if kind in (UNKNOWN, BLOCKED) or not self._can_step(grid, cell, nxt):
                    continue
                step_cost = 1.0
                if kind == TRAP:
                    step_cost += _TRAP_COST
                elif kind == CLOSED_DOOR:
                    step_cost += 1.0
                if nxt in monsters:
                    step_cost += _MONSTER_COST
                new_cost = cost + step_cost
                if new_cost < best.get(nxt, float("inf")):
                    best[nxt] = new_cost
                    parent[nxt] = cell
                    heapq.heappush(queue, (new_cost, nxt))
        if chosen is None:
            return None
        while parent[chosen] != here:
            chosen = parent[chosen]
        return chosen

    def _frontier(self, grid: np.ndarray) -> set[tuple[int, int]]:
        """Walkable seen cells next to a cell that is neither seen nor known rock."""
        walkable = np.isin(grid, (FREE, DOOR, CLOSED_DOOR))
        unknown = grid == UNKNOWN
        padded = np.pad(unknown, 1)
        near_unknown = np.zeros_like(unknown)
        height, width = grid.shape
        for dy in (-1, 0, 1):
            for dx in (-1, 0, 1):
                near_unknown |= padded[1 + dy : 1 + dy + height, 1 + dx : 1 + dx + width]
        cells = {(int(cy), int(cx)) for cy, cx in zip(*np.nonzero(walkable & near_unknown))}
        return cells - self._visited

    def _search_plan(
        self, grid: np.ndarray, here: tuple[int, int], monsters: set[tuple[int, int]]
    ) -> str | None:
        """Nothing left to explore: search for hidden doors and corridors along walls."""
        walkable = np.isin(grid, (FREE, DOOR))
        padded = np.pad(grid == BLOCKED, 1)
        height, width = grid.shape
        near_wall = np.zeros_like(walkable)
        for dy in (-1, 0, 1):
            for dx in (-1, 0, 1):
                near_wall |= padded[1 + dy : 1 + dy + height, 1 + dx : 1 + dx + width]
        candidates = [(int(cy), int(cx)) for cy, cx in zip(*np.nonzero(walkable & near_wall))]
        if candidates and all(self._searches.get(c, 0) >= _SEARCHES_PER_SPOT for c in candidates):
            self._searches.clear()  # every spot searched: hidden things can take longer, go again
        spots = {c for c in candidates if self._searches.get(c, 0) < _SEARCHES_PER_SPOT}
        padded_walkable = np.pad(walkable, 1)
        dead_ends = {
            c for c in spots if padded_walkable[c[0] : c[0] + 3, c[1] : c[1] + 3].sum() <= 2
        }
        spots = dead_ends or spots  # corridors that end nowhere usually continue hidden
        if here in spots:
            self._searches[here] = self._searches.get(here, 0) + 1
            return "search"
        step = self._first_step(grid, here, spots, monsters)
        return self._move(here, step) if step else None

    @staticmethod
    def _frontier_bonus(
        grid: np.ndarray, frontier: set[tuple[int, int]]
    ) -> dict[tuple[int, int], float]:
        """How much stepping next to each frontier cell may reveal: its unexplored neighbours."""
        padded = np.pad(grid == UNKNOWN, 1)
        return {
            cell: _REVEAL_WEIGHT * float(padded[cell[0] : cell[0] + 3, cell[1] : cell[1] + 3].sum())
            for cell in frontier
        }

    def _key_plan(
        self,
        obs: dict[str, np.ndarray],
        grid: np.ndarray,
        here: tuple[int, int],
        monsters: set[tuple[int, int]],
        allowed: set[str],
    ) -> str | None:
        """KeyRoom: fetch the key, then unlock the door standing orthogonally next to it."""
        if "apply" not in allowed:
            return None
        has_key = any(
            "key" in decode_bytes(line)
            for letter, line in zip(obs["inv_letters"].tolist(), obs["inv_strs"])
            if letter
        )
        if not has_key:
            if "pick up" in allowed and here in self._key_positions:
                self._key_positions.discard(here)
                return "pick up"
            step = self._first_step(grid, here, self._key_positions, monsters)
            return self._move(here, step) if step else None
        doors = {tuple(map(int, cell)) for cell in zip(*np.nonzero(grid == CLOSED_DOOR))}
        doors |= {cell for cell in self._locked if CELL_CLASS[obs["glyphs"][cell]] == CLOSED_DOOR}
        return self._approach_doors(grid, here, doors, monsters, "apply", per_direction=False)

    def _locked_door_plan(
        self,
        grid: np.ndarray,
        here: tuple[int, int],
        monsters: set[tuple[int, int]],
        allowed: set[str],
    ) -> str | None:
        """Kick open a door known to be locked (Corridor tasks offer ``kick <direction>``)."""
        if "kick north" not in allowed or not self._locked:
            return None
        glyphs = self.env.unwrapped.nle_observation["glyphs"]
        doors = {cell for cell in self._locked if CELL_CLASS[glyphs[cell]] == CLOSED_DOOR}
        self._locked = doors
        return self._approach_doors(grid, here, doors, monsters, "kick", per_direction=True)

    def _approach_doors(
        self,
        grid: np.ndarray,
        here: tuple[int, int],
        doors: set[tuple[int, int]],
        monsters: set[tuple[int, int]],
        verb: str,
        per_direction: bool,
    ) -> str | None:
        if not doors:
            return None
        stands: dict[tuple[int, int], tuple[int, int]] = {}
        for door in doors:
            for name in ("north", "south", "east", "west"):
                dx, dy = DIRECTION_DELTAS[name]
                stand = (door[0] - dy, door[1] - dx)
                inside = 0 <= stand[0] < grid.shape[0] and 0 <= stand[1] < grid.shape[1]
                if inside and grid[stand] in (FREE, DOOR):
                    stands[stand] = door
        if here in stands:
            door = stands[here]
            direction = DELTA_DIRECTIONS[(door[1] - here[1], door[0] - here[0])]
            return f"{verb} {direction}" if per_direction else verb
        step = self._first_step(grid, here, set(stands), monsters)
        return self._move(here, step) if step else None

    def _move(self, here: tuple[int, int], target: tuple[int, int]) -> str:
        self._last_move = (here, target)
        return DELTA_DIRECTIONS[(target[1] - here[1], target[0] - here[0])]
