"""Base rates of the memory family (comprl/Memory-*) on its held-out dungeons.

For each variant (Fork, Landmark) it plays, on ``split="test"`` (the 64 held-out dungeons):

* ``random``: uniform over the allowed actions (``make_agent("random", env)``);
* ``expert``: the oracle of the hidden side (``make_agent("expert", env)``), what a correct
  lesson makes possible;
* ``walk_east``: always "east", the best a policy blind to the side can do on the Fork (the
  sides are balanced: exactly half the dungeons);
* ``llm``: an untrained LLM actor (default SmolLM2-135M-Instruct sampled at temperature 1, the
  demo's actor settings: multi-turn chat, 12 new tokens, compact observations).

Episode ``I`` is ``reset(seed=I)``: the held-out dungeon ``I mod 64``. Agents are played
through ``comprl_gym.evaluation.run_eval`` (the ``comprl-gym eval`` code; runs are kept under
``--runs`` and resumed), rates get Wilson 95% intervals (``comprl_gym.evaluation.stats``).
Writes ``benchmarks/results/memory_family.json``.

Measured on 2 shared CPU cores: random and expert take seconds; SmolLM2 10 minutes (Fork)
and 27 minutes (Landmark, the machine busier) per 64 episodes, 16 at a time. ``--llm none`` leaves the LLM out (its earlier result in the JSON is then kept).

Usage:
    python -m benchmarks.memory_family.run                 # everything
    python -m benchmarks.memory_family.run --llm none      # random, expert, walk_east only
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS, RUNS

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

VARIANTS = {"fork": "comprl/Memory-Fork-v0", "landmark": "comprl/Memory-Landmark-v0"}
DEFAULT_LLM = "hf:smollm2?temperature=1&max_tokens=12&conversation=multi_turn"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Random, expert, blind and untrained-LLM success rates of the memory "
        "family on its held-out dungeons, with Wilson 95% intervals.",
    )
    parser.add_argument(
        "--episodes",
        type=int,
        default=256,
        help="episodes per variant for random, expert, walk_east",
    )
    parser.add_argument("--llm-episodes", type=int, default=64, help="episodes per variant (LLM)")
    parser.add_argument(
        "--llm", default=DEFAULT_LLM, help=f"LLM agent spec, or 'none' (default {DEFAULT_LLM})"
    )
    parser.add_argument(
        "--observation-mode", default="compact", help="the LLM's observation mode (default compact)"
    )
    parser.add_argument("--split", default="test", choices=("train", "test"))
    parser.add_argument("--parallel", type=int, default=16, help="LLM episodes per generation call")
    parser.add_argument(
        "--runs", default=str(RUNS / "memory_family"), help="eval run folders (resumed)"
    )
    parser.add_argument("--out", default=str(RESULTS / "memory_family.json"))
    return parser.parse_args(argv)


def rate(outcomes: list[bool]) -> dict[str, Any]:
    from comprl_gym.evaluation.stats import wilson_interval

    interval = wilson_interval(sum(outcomes), len(outcomes))
    return {
        "rate": round(interval.mean, 4),
        "ci95": [round(interval.low, 4), round(interval.high, 4)],
        "wins": sum(outcomes),
        "episodes": len(outcomes),
    }


def evaluate(agent: str, env_id: str, episodes: int, env_kwargs: dict, out: Path, parallel: int):
    """Play ``episodes`` tasks through run_eval; the per-episode records, in task order."""
    from comprl_gym.evaluation.eval import EvalConfig, run_eval

    run_eval(
        EvalConfig(
            env_ids=[env_id],
            agent=agent,
            episodes=episodes,
            seeds=[0],
            out_dir=out,
            parallel=parallel,
            env_kwargs=env_kwargs,
            resume=True,
            progress=False,
        )
    )
    from comprl_gym.trainers.run import Run

    records = list(Run(out).episodes())
    return sorted(records, key=lambda r: int(r["seed"]))


def summarise(agent: str, records: list[dict], env_kwargs: dict) -> dict:
    from comprl_gym.envs.memory import dungeon

    seeds = sorted(int(r["seed"]) for r in records)
    by_side = {
        side: rate([bool(r["won"]) for r in records if dungeon(r["task_id"]).side == side])
        for side in ("east", "west")
    }
    return {
        "agent": agent,
        **rate([bool(r["won"]) for r in records]),
        "by_side": by_side,
        # terminated without a win: the episode stepped into the branch without the stairs
        "wrong_branch": sum(bool(r["terminated"]) and not r["won"] for r in records),
        "out_of_steps": sum(bool(r["truncated"]) for r in records),
        "reset_seeds": [seeds[0], seeds[-1]] if seeds else [],
        "task_ids": len({r["task_id"] for r in records}),
        "agent_seeds": sorted({int(r.get("agent_seed", 0)) for r in records}),
        "steps_mean": round(sum(r.get("steps", 0) for r in records) / max(1, len(records)), 3),
        "env_kwargs": env_kwargs,
        # per episode, as recorded when it was played (a resumed run costs nothing here)
        "episode_wall_s_mean": round(
            sum(float(r.get("wall_time_s", 0.0)) for r in records) / max(1, len(records)), 3
        ),
    }


def walk_east(env_id: str, episodes: int, split: str) -> dict:
    """Always 'east': the blind policy (wins exactly the east dungeons)."""
    import gymnasium as gym

    import comprl_gym  # noqa: F401  (registers the ids)

    env = gym.make(env_id, split=split)
    outcomes = []
    start = time.perf_counter()
    for seed in range(episodes):
        env.reset(seed=seed)
        done = False
        while not done:
            _, _, terminated, truncated, info = env.step("east")
            done = terminated or truncated
        outcomes.append(bool(info["won"]))
    env.close()
    return {
        "agent": "always east",
        **rate(outcomes),
        "reset_seeds": [0, episodes - 1],
        "env_kwargs": {"split": split},
        "wall_s": round(time.perf_counter() - start, 1),
    }


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    out_path = Path(args.out)
    previous = json.loads(out_path.read_text()) if out_path.exists() else {}
    runs = Path(args.runs)
    results: dict[str, Any] = {}
    for variant, env_id in VARIANTS.items():
        rows: dict[str, Any] = {}
        kwargs = {"split": args.split}
        for agent in ("random", "expert"):
            records = evaluate(
                agent, env_id, args.episodes, kwargs, runs / f"{agent}-{variant}", parallel=16
            )
            rows[agent] = summarise(agent, records, kwargs)
        rows["walk_east"] = walk_east(env_id, args.episodes, args.split)
        if args.llm != "none":
            llm_kwargs = {**kwargs, "observation_mode": args.observation_mode}
            records = evaluate(
                args.llm, env_id, args.llm_episodes, llm_kwargs, runs / f"llm-{variant}",
                args.parallel,
            )  # fmt: skip
            rows["llm"] = summarise(args.llm, records, llm_kwargs)
            rows["llm"]["temperature"] = 1.0 if "temperature=1" in args.llm else None
        elif "llm" in previous.get("variants", {}).get(variant, {}):
            rows["llm"] = previous["variants"][variant]["llm"]
        results[variant] = rows
        for name, row in rows.items():
            print(
                f"{env_id:28s} {name:10s} {row['rate']:.3f} "
                f"[{row['ci95'][0]:.3f}, {row['ci95'][1]:.3f}] n={row['episodes']}"
            )
    from comprl_gym.envs.memory import default_max_steps

    payload = {
        "benchmark": "memory family base rates (benchmarks/memory_family/run.py)",
        "split": args.split,
        "step_limit": default_max_steps(),
        "episode_seeds": "episode I is reset(seed=I): held-out dungeon I mod 64",
        "interval": "Wilson score, 95%",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "command": "python -m benchmarks.memory_family.run " + " ".join(sys.argv[1:]),
        "variants": results,
    }
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {out_path}")
    return payload


if __name__ == "__main__":
    main()
