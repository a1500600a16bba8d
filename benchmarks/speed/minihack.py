"""Speed and memory of ``comprl/MiniHack-Room-15x15-v0`` against raw minihack.

Both envs play the same random action sequence (moves only, so both accept every action) in
the same process, in alternating chunks of 250 steps: ours renders the text observation every step; raw minihack returns its
default observation dict (``glyphs``, ``chars``, ..., the ``*_crop`` arrays). Memory is the
RSS growth of holding N live envs of each kind, per env.

Run:
    python -m benchmarks.speed.minihack [--steps 5000] [--envs 16]
"""

from __future__ import annotations

import argparse
import gc
import random
import resource
import time

import gymnasium as gym
import minihack  # noqa: F401 - registers MiniHack-* ids

import comprl_gym  # noqa: F401 - registers comprl/* ids
from comprl_gym.envs.minihack.actions import DIRECTION_NAMES

TASK = "MiniHack-Room-15x15-v0"
MOVES = list(DIRECTION_NAMES.values())


def _rss_mib() -> float:
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * resource.getpagesize() / 2**20


class _Runner:
    """Steps one env through an action sequence chunk by chunk, timing only the steps."""

    def __init__(self, env: gym.Env, actions: list, seed: int):
        self.env, self.actions, self.position = env, actions, 0
        self.elapsed, self.episodes = 0.0, 1
        env.reset(seed=seed)

    def run(self, count: int) -> None:
        chunk = self.actions[self.position : self.position + count]
        self.position += len(chunk)
        start = time.perf_counter()
        for action in chunk:
            _, _, terminated, truncated, _ = self.env.step(action)
            if terminated or truncated:
                self.env.reset()
                self.episodes += 1
        self.elapsed += time.perf_counter() - start


def _memory_per_env(make, count: int) -> float:
    gc.collect()
    before = _rss_mib()
    envs = [make() for _ in range(count)]
    for env in envs:
        env.reset(seed=0)
    after = _rss_mib()
    for env in envs:
        env.close()
    return (after - before) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--envs", type=int, default=16)
    args = parser.parse_args()
    rng = random.Random(0)
    indices = [rng.randrange(len(MOVES)) for _ in range(args.steps)]

    ours = gym.make(f"comprl/{TASK}")
    raw = gym.make(TASK)
    # Warm up both (first resets compile the level), then alternate chunks so that load from
    # other processes on the machine hits both alike.
    _Runner(ours, [MOVES[i] for i in indices[:200]], seed=1).run(200)
    _Runner(raw, indices[:200], seed=1).run(200)
    raw_runner = _Runner(raw, indices, seed=0)
    ours_runner = _Runner(ours, [MOVES[i] for i in indices], seed=0)
    for _ in range(0, args.steps, 250):
        raw_runner.run(250)
        ours_runner.run(250)
    raw_time, raw_eps = raw_runner.elapsed, raw_runner.episodes
    ours_time, ours_eps = ours_runner.elapsed, ours_runner.episodes
    ours.close()
    raw.close()

    raw_mem = _memory_per_env(lambda: gym.make(TASK), args.envs)
    ours_mem = _memory_per_env(lambda: gym.make(f"comprl/{TASK}"), args.envs)

    raw_sps, ours_sps = args.steps / raw_time, args.steps / ours_time
    print(f"{TASK}: {args.steps} random moves, same sequence; memory over {args.envs} envs\n")
    print(f"| {'env':<38} | {'steps/s':>8} | {'episodes':>8} | {'RSS MiB/env':>11} |")
    print(f"| {'-' * 38} | {'-' * 8} | {'-' * 8} | {'-' * 11} |")
    print(
        f"| {'raw gym.make (default obs keys)':<38} | {raw_sps:>8.0f} | {raw_eps:>8} | {raw_mem:>11.2f} |"
    )
    print(
        f"| {'comprl (text observation)':<38} | {ours_sps:>8.0f} | {ours_eps:>8} | {ours_mem:>11.2f} |"
    )
    print(f"\nspeed ratio comprl/raw: {ours_sps / raw_sps:.2f} (goal >= 1.0)")
    print(f"memory ratio comprl/raw: {ours_mem / raw_mem:.2f}" if raw_mem > 0 else "")


if __name__ == "__main__":
    main()
