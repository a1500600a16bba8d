"""Benchmark: comprl/ALFWorld-v0 against alfworld's own AlfredTWEnv, and game sizes.

1. Reset and step time on the same official valid_unseen games, in the same run: alfworld's
   ``AlfredTWEnv`` (textworld.gym, its wrappers) against ``comprl/ALFWorld-v0``, cold (first
   reset of a game in a fresh cache: the one-time translation) and warm (later resets).
   Both play the same commands (our expert's walkthrough).
2. Generated games against official ones: receptacles, objects, admissible commands per step,
   expert plan length.

Run:  python -m benchmarks.speed.alfworld [--games 6] [--size-games 12] [--data DIR]
The official games are read from DIR (default $COMPRL_SHARED_DATA/alfworld, or
../shared/data/alfworld beside the repo).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.common import shared_data_dir


def default_data_dir() -> Path:
    return shared_data_dir() / "alfworld"


def play(env, seed=None, task_id=None):
    """Reset, let the expert win; returns (reset_s, [step_s], commands, admissible_counts)."""
    from comprl_gym.envs.alfworld.expert import ALFWorldExpert

    start = time.perf_counter()
    obs, info = env.reset(seed=seed, options={"task_id": task_id} if task_id else None)
    reset_s = time.perf_counter() - start
    expert = ALFWorldExpert(env)
    expert.reset(info["task"], info)
    steps, commands, admissible = [], [], [len(info["admissible_actions"])]
    while True:
        command = expert.act(obs, info)
        start = time.perf_counter()
        obs, reward, terminated, truncated, info = env.step(command)
        steps.append(time.perf_counter() - start)
        commands.append(command)
        admissible.append(len(info["admissible_actions"]))
        if terminated or truncated:
            return reset_s, steps, commands, admissible, info


def alfred_tw_env(game_dir: Path):
    from alfworld.agents.environment.alfred_tw_env import AlfredTWEnv

    config = {
        "env": {"goal_desc_human_anns_prob": 0.0, "task_types": [1, 2, 3, 4, 5, 6],
                "domain_randomization": False, "expert_type": "planner"},
        "dataset": {"data_path": str(game_dir), "eval_id_data_path": str(game_dir),
                    "eval_ood_data_path": str(game_dir), "num_train_games": -1, "num_eval_games": -1},
        "general": {"training_method": "dagger"},
        "dagger": {"training": {"max_nb_steps_per_episode": 100}},
    }  # fmt: skip
    return AlfredTWEnv(config, train_eval="eval_out_of_distribution").init_env(batch_size=1)


def speed(data_dir: Path, n_games: int, resets: int) -> None:
    import contextlib
    import io

    from comprl_gym.envs.alfworld import ALFWorldEnv
    from comprl_gym.envs.alfworld.data import load_game

    env = ALFWorldEnv(split="valid_unseen", data_dir=data_dir, max_steps=100)
    stride = max(1, env.num_games // n_games)
    rows = []
    for position in range(0, stride * n_games, stride):
        record = env.game_record(position)
        cold, steps, commands, _, info = play(env, task_id=record.task_id)
        warm = [play(env, task_id=record.task_id)[0] for _ in range(resets)]
        assert info["won"]
        with tempfile.TemporaryDirectory() as tmp:
            game, traj = load_game(record)
            folder = Path(tmp) / "valid_unseen" / record.game_file.parent.parent.name / "trial_0"
            folder.mkdir(parents=True)
            (folder / "game.tw-pddl").write_text(json.dumps(game))
            (folder / "traj_data.json").write_text(json.dumps(traj))
            with contextlib.redirect_stdout(io.StringIO()):
                upstream = alfred_tw_env(Path(tmp))
            up_resets, up_steps = [], []
            for _ in range(resets):
                start = time.perf_counter()
                upstream.reset()
                up_resets.append(time.perf_counter() - start)
                for command in commands:
                    start = time.perf_counter()
                    *_, up_infos = upstream.step([command])
                    up_steps.append(time.perf_counter() - start)
            assert up_infos["won"][0]
            upstream.close()
        rows.append((record.task_type, cold, statistics.mean(warm), statistics.mean(steps),
                     statistics.mean(up_resets), statistics.mean(up_steps)))  # fmt: skip
        print(f"  {record.task_id}: done", flush=True)

    print("\n## Reset / step time, official valid_unseen games (seconds, same run)\n")
    print("| game type | AlfredTWEnv reset | ours reset (cold) | ours reset (warm) | reset speed-up "
          "(warm) | AlfredTWEnv step | ours step | step speed-up |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for task_type, cold, warm, step, up_reset, up_step in rows:
        print(f"| {task_type} | {up_reset:.3f} | {cold:.3f} | {warm:.3f} | {up_reset / warm:.1f}x "
              f"| {up_step:.3f} | {step:.3f} | {up_step / step:.1f}x |")  # fmt: skip
    mean = [statistics.mean(col) for col in list(zip(*rows))[1:]]
    print(f"| **mean** | {mean[3]:.3f} | {mean[0]:.3f} | {mean[1]:.3f} | {mean[3] / mean[1]:.1f}x "
          f"| {mean[4]:.3f} | {mean[2]:.3f} | {mean[4] / mean[2]:.1f}x |")  # fmt: skip


def game_size(env, seed: int) -> tuple[int, int, float, int]:
    reset_s, steps, commands, admissible, info = play(env, seed=seed)
    assert info["won"], info["task_id"]
    problem = json.loads(Path(info["gamefile"]).read_text())["pddl_problem"]
    receptacles = problem.count(" - receptacle\n")
    objects = sum(
        1 for line in problem.splitlines() if "_bar_" in line and line.endswith(" - object")
    )
    return receptacles, objects, statistics.mean(admissible), len(commands)


def sizes(data_dir: Path, n_games: int) -> None:
    from comprl_gym.envs.alfworld import ALFWorldEnv

    table = {}
    for label, kwargs in (
        ("official valid_unseen", {"data_dir": data_dir}),
        ("generated valid_unseen", {"data_dir": None}),
        ("generated train", {"data_dir": None, "split": "train"}),
    ):
        kwargs.setdefault("split", "valid_unseen")
        env = ALFWorldEnv(max_steps=100, **kwargs)
        stride = max(1, env.num_games // n_games) if label.startswith("official") else 1
        table[label] = [game_size(env, seed) for seed in range(0, stride * n_games, stride)]
    print(f"\n## Game size, {n_games} games each (mean [min-max])\n")
    print("| games | receptacles | objects | admissible commands / step | expert plan length |")
    print("|---|---|---|---|---|")
    for label, rows in table.items():
        cells = []
        for column in zip(*rows):
            cells.append(f"{statistics.mean(column):.1f} [{min(column):.0f}-{max(column):.0f}]")
        print(f"| {label} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=6, help="official games timed")
    parser.add_argument("--resets", type=int, default=2, help="warm resets per game and env")
    parser.add_argument(
        "--size-games", type=int, default=12, help="games per row of the size table"
    )
    parser.add_argument("--data", type=Path, default=default_data_dir())
    parser.add_argument("--keep-cache", action="store_true", help="use the user's comprl cache")
    args = parser.parse_args()
    if not (args.data / "json_2.1.1" / "valid_unseen").is_dir():
        raise SystemExit(f"no official games under {args.data}/json_2.1.1 (see --data)")
    with tempfile.TemporaryDirectory() as cache:
        if not args.keep_cache:  # cold numbers mean a cold cache
            os.environ["COMPRL_GYM_CACHE"] = cache
        speed(args.data, args.games, args.resets)
        sizes(args.data, args.size_games)


if __name__ == "__main__":
    main()
