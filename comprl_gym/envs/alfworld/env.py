"""``comprl/ALFWorld-v0``: ALFWorld's household tasks on alfworld's own TextWorld engine.

The engine is textworld's PDDL env with alfworld's demangler and infos, exactly as alfworld's
``AlfredTWEnv`` sets it up: the agent reads "-= Welcome to TextWorld, ALFRED! =-", "You are in
the middle of a room. Looking quickly around you, you see ...", "Your task is to: ...", types
one of the admissible commands ("go to desk 1", "take mug 1 from desk 1", ...) and wins when
the PDDL goal holds. Games are translated once and reused (:mod:`.engine`), so a reset costs
a small fraction of upstream's.

Where the games come from:

* **official**: ``data_dir`` (or ``$ALFWORLD_DATA``) holding ``json_2.1.1/<split>/``; loaded
  with alfworld's split folders and filter (:mod:`.data`);
* **generated** (the default, offline): games built from the ALFRED floor plans shipped with
  alfworld (:mod:`.generator`), generated on first use and cached on disk. The default split
  is ``"train"``; ``"valid_unseen"`` uses floor plans that ``"train"`` never uses.

A ``data_dir`` without games for the split falls back to generated games with a warning;
``info["data_source"]`` always says which (``"official"`` or ``"generated"``).

Example:
    >>> import gymnasium as gym
    >>> import comprl_gym
    >>> env = gym.make("comprl/ALFWorld-PickAndPlace-v0", split="valid_unseen")
    >>> obs, info = env.reset(seed=0)                       # doctest: +SKIP
    >>> obs.startswith("-= Welcome to TextWorld, ALFRED! =-")  # doctest: +SKIP
    True
    >>> obs, reward, terminated, truncated, info = env.step(info["admissible_actions"][0])  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any

from comprl_gym.core import (
    ConfigurationError,
    DataError,
    TextEnv,
    Transition,
    normalize_action_text,
)
from comprl_gym.envs.alfworld.data import (
    DATA_HINT,
    SPLITS,
    TASK_TYPES,
    GameRecord,
    collect_games,
    find_split_dir,
    load_game,
)

logger = logging.getLogger(__name__)

_TASK = re.compile(r"Your task is to: (.*)$", re.S)


class ALFWorldEnv(TextEnv):
    """ALFWorld text games (official json_2.1.1 or generated) as a comprl :class:`TextEnv`.

    Args:
        task_types: ALFRED task types to play (default: all six, see ``data.TASK_TYPES``).
        split: ``"train"``, ``"valid_seen"`` or ``"valid_unseen"`` (default ``"train"``).
        data_dir: folder holding ``json_2.1.1/`` (or a split folder); default
            ``$ALFWORLD_DATA``; without one, generated games are played.
        max_steps: step limit of an episode (truncation).
        render_mode: ``None`` or ``"ansi"``.
        num_games: size of the generated set (default: the official split's size, see
            ``generator.DEFAULT_SPLIT_SIZES``); games are generated when first played.
        generated_root: folder for generated games (default: the comprl cache).

    ``reset(seed=s)`` plays game ``s mod n`` of the selected games (``info["task_id"]``
    names it); ``reset(options={"task_id": ...})`` plays a given game (an official game's
    path relative to ``json_2.1.1``, a generated game's id, or an index into the list).
    Reward is 1.0 on the step that wins; an inadmissible command gets the engine's own
    "Nothing happens." with ``info["invalid_action"] = True``.
    """

    env_family = "alfworld"

    def __init__(
        self,
        task_types: tuple[str, ...] | list[str] = TASK_TYPES,
        split: str = "train",
        data_dir: str | os.PathLike[str] | None = None,
        max_steps: int = 50,
        render_mode: str | None = None,
        num_games: int | None = None,
        generated_root: str | os.PathLike[str] | None = None,
    ):
        super().__init__(max_steps=max_steps, render_mode=render_mode)
        if isinstance(task_types, str):
            task_types = (task_types,)
        unknown = [t for t in task_types if t not in TASK_TYPES]
        if unknown or not task_types:
            raise ConfigurationError(
                f"unknown ALFWorld task type(s) {unknown or task_types!r}; choose from {TASK_TYPES}"
            )
        if split not in SPLITS:
            raise ConfigurationError(f"split must be one of {SPLITS}, got {split!r}")
        self.task_types = tuple(task_types)
        self.split = split
        self._official: list[GameRecord] | None = None
        self._generated = None
        self._generated_indices: list[int] = []
        self.data_source, self.data_message = self._select_source(
            data_dir, num_games, generated_root
        )
        self._engine: Any = None
        self._state: Any = None
        self.game: GameRecord | None = None
        self.traj_data: dict[str, Any] = {}

    # ---- where games come from ----------------------------------------------------------------
    def _select_source(
        self, data_dir: Any, num_games: int | None, generated_root: Any
    ) -> tuple[str, str]:
        explicit = data_dir if data_dir is not None else os.environ.get("ALFWORLD_DATA")
        split_dir = find_split_dir(data_dir, self.split)
        if split_dir is not None:
            games = collect_games(split_dir, self.task_types)
            if games:
                self._official = games
                message = f"{len(games)} official ALFWorld games from {split_dir}"
                logger.info(message)
                return "official", message
            reason = f"{split_dir} holds no playable game of types {list(self.task_types)}"
        elif explicit:
            reason = f"no {self.split!r} games under {explicit}"
        else:
            reason = None
        from comprl_gym.envs.alfworld.generator import GeneratedGames

        root = Path(generated_root) / self.split if generated_root else None
        self._generated = GeneratedGames(self.split, size=num_games, root=root)
        self._generated_indices = self._generated.indices(self.task_types)
        if not self._generated_indices:
            raise ConfigurationError(f"num_games={num_games} leaves no game of {self.task_types}")
        message = f"generated ALFWorld games ({self.split}, cached in {self._generated.root})"
        if reason:
            message = f"{reason}; playing {message} instead ({DATA_HINT})"
            # A data_dir the user passed deserves a warning; $ALFWORLD_DATA is set by alfworld
            # itself on import (to ~/.cache/alfworld), so an empty one is the normal case.
            logger.log(logging.WARNING if data_dir is not None else logging.INFO, message)
        else:
            logger.info("playing %s", message)
        return "generated", message

    @property
    def num_games(self) -> int:
        """How many games the seed cycles through."""
        return len(self._official) if self._official is not None else len(self._generated_indices)

    def game_record(self, position: int) -> GameRecord:
        """The ``position``-th game of this env's list (generating it if needed)."""
        position %= self.num_games
        if self._official is not None:
            return self._official[position]
        return self._generated.record(self._generated_indices[position])

    def prepare(self, count: int | None = None, progress: bool = True) -> None:
        """Generate the first ``count`` games now (with a progress bar) instead of on demand."""
        if self._generated is not None:
            indices = self._generated_indices[: count or len(self._generated_indices)]
            self._generated.prepare(indices, progress=progress)

    def _record_for_task_id(self, task_id: Any) -> GameRecord:
        if isinstance(task_id, int) or (isinstance(task_id, str) and task_id.isdigit()):
            return self.game_record(int(task_id))
        if self._official is not None:
            for record in self._official:
                if record.task_id == task_id or record.task_id.endswith("/" + str(task_id)):
                    return record
        else:
            match = re.search(r"trial_G\d+_\w+?_(\d+)$", str(task_id))
            if match and int(match.group(1)) in set(self._generated_indices):
                return self._generated.record(int(match.group(1)))
        raise ConfigurationError(
            f"unknown ALFWorld task_id {task_id!r} for this env ({self.data_message})"
        )

    # ---- TextEnv hooks ----------------------------------------------------------------------
    def _reset_task(self, seed: int, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        if "split" in options and options["split"] != self.split:
            raise ConfigurationError("the split is fixed at construction: make another env")
        if options.get("task_id") is not None:
            record = self._record_for_task_id(options["task_id"])
        else:
            record = self.game_record(seed)
        game_data, self.traj_data = load_game(record)
        if self._engine is None:
            from comprl_gym.envs.alfworld.engine import make_alfred_engine

            self._engine = make_alfred_engine()
        try:
            self._engine.load(game_data)
            self._state = self._engine.reset()
        except DataError:
            raise
        except Exception as exc:  # a game whose PDDL or grammar the engine rejects
            raise DataError(
                record.game_file, f"the engine cannot load this game ({exc!r})"
            ) from exc
        self.game = record
        self._state["extra.gamefile"] = str(record.game_file)
        observation = self._state.feedback
        match = _TASK.search(observation)
        self.task = match.group(1).strip().rstrip(".") if match else ""
        self.task_id = record.task_id
        return observation, self._extra()

    def _step_task(self, action: str) -> Transition:
        if self._state is None:
            raise ConfigurationError("call reset() before step()")
        admissible = self._state["admissible_commands"]
        command = action.strip()
        if command not in admissible:
            folded = normalize_action_text(command).rstrip(".")
            command = next((c for c in admissible if c == folded), command)
        invalid = command not in admissible
        self._state, score, done = self._engine.step(command)
        won = bool(self._state["won"])
        return Transition(
            observation=self._state.feedback,
            reward=1.0 if won else 0.0,
            terminated=bool(done) or won,
            won=won,
            score=1.0 if won else 0.0,
            invalid_action=invalid,
            info=self._extra(),
        )

    def admissible_actions(self) -> list[str] | None:
        if self._state is None:
            return []
        return list(self._state["admissible_commands"])

    def _extra(self) -> dict[str, Any]:
        return {
            "task_type": self.game.task_type if self.game else "",
            "data_source": self.data_source,
            "gamefile": str(self.game.game_file) if self.game else "",
        }

    # ---- privileged access (experts, analysis) --------------------------------------------------
    @property
    def engine(self) -> Any:
        """The textworld env (``AlfredInfos(AlfredDemangler(FastPddlEnv))``) of the episode."""
        return self._engine

    @property
    def engine_state(self) -> Any:
        """textworld's ``GameState`` after the last reset or step."""
        return self._state

    def planner_walkthrough(self) -> list[str]:
        """Fast Downward's optimal plan from the current state (can take seconds)."""
        return self._engine.unwrapped.plan()

    def close(self) -> None:
        self._engine = None
        self._state = None
        super().close()
