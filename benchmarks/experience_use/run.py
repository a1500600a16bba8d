"""Can the actor use experience at all, and where does a small model leave GRPO a signal?

Issue "Show the learning", items 1 and 2. For each env id and sampling temperature, the same
seeds (so the same maps) are played under three conditions that differ only in the system
prompt, which carries the lesson for the whole episode (as the reference implementation puts
retrieved memories in the system prompt):

* ``none``: no lesson;
* ``correct``: a hand-written lesson that solves the task family when followed;
* ``misleading``: a plausible, wrong lesson.

A model that reads its system prompt should order the three as correct > none > misleading.
The base success (``none`` at the rollout temperature) tells which tasks give GRPO groups a
signal: a task where almost every rollout wins or loses gives every group advantage 0.

Each cell reports success with a Wilson 95% interval; the paired differences (same seeds) with
Newcombe's interval for paired proportions. Results: ``benchmarks/results/experience_use.json``
and ``.png``.

Run (CPU, small):  python -m benchmarks.experience_use.run --episodes 16 --envs comprl/MiniHack-Room-5x5-v0
Run (GPU):         python -m benchmarks.experience_use.run --episodes 256 --batch 256
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import gymnasium as gym

import comprl_gym  # noqa: F401  (registers the comprl/* ids)
from benchmarks.common import RESULTS
from comprl_gym.agents.llm_agent import LLMAgent, LLMAgentConfig
from comprl_gym.agents.prompts import PromptConfig
from comprl_gym.llm import make_backend
from comprl_gym.rollouts import collect_rollouts

#: Hand-written lessons per family. ``correct`` follows from the observation format (the
#: observation names the staircase's offset in steps); ``misleading`` sounds as confident.
LESSONS: dict[str, dict[str, str]] = {
    "minihack": {
        "correct": (
            "The observation says where the staircase down is, for example 'staircase down: "
            "3 steps east and 1 step north'. Every turn, move one step toward it: answer the "
            "direction it lies in (east if it is east, north if it is north, north-east if it "
            "is both east and north)."
        ),
        "misleading": (
            "The staircase down is reached by walking along the walls: every turn, answer west "
            "until you touch a wall, then south. Ignore the distances in the observation."
        ),
    },
}


class LessonEnv(gym.Wrapper):
    """Hands the agent fixed lessons in ``info["experiences"]`` at reset (no store, no search).

    Example:
        >>> env = LessonEnv(gym.make("comprl/MiniHack-Room-5x5-v0"), ["Go east."])
        >>> env.reset(seed=0)[1]["experiences"]
        [{'id': -1, 'text': 'Go east.'}]
    """

    def __init__(self, env: gym.Env, lessons: list[str]):
        super().__init__(env)
        self.set_lessons(lessons)

    def set_lessons(self, lessons: list[str]) -> None:
        self.lessons = [{"id": -1 - i, "text": text} for i, text in enumerate(lessons)]

    def reset(self, **kwargs: Any) -> tuple[str, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        return obs, {**info, "experiences": list(self.lessons)}


def family_of(env_id: str) -> str:
    env = gym.make(env_id)
    try:
        return str(env.reset(seed=0)[1]["env_family"])
    finally:
        env.close()


def play(envs: list[LessonEnv], lessons: list[str], agent: LLMAgent, args: argparse.Namespace):
    for env in envs:
        env.set_lessons(lessons)
    seeds = list(range(args.seed, args.seed + args.episodes))
    return collect_rollouts(envs, agent, seeds=seeds)


def cell(trajectories: list[Any]) -> dict[str, Any]:
    """The raw outcomes of one cell (intervals are added by :func:`summarise`)."""
    wins = [int(t.won) for t in trajectories]
    steps = [t.steps for t in trajectories]
    return {
        "episodes": len(wins),
        "wins": sum(wins),
        "success": sum(wins) / max(len(wins), 1),
        "mean_steps": sum(steps) / max(len(steps), 1),
        "invalid_action_rate": sum(t.invalid_actions for t in trajectories) / max(sum(steps), 1),
        "format_error_rate": sum(t.format_errors for t in trajectories) / max(sum(steps), 1),
        "outcomes": wins,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    backend = make_backend(f"hf:{args.model}", **({"device": args.device} if args.device else {}))
    result: dict[str, Any] = {
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "cells": [],
    }
    for env_id in args.envs:
        lessons = LESSONS[family_of(env_id)]
        envs = [
            LessonEnv(gym.make(env_id, max_steps=args.max_steps), [])
            for _ in range(min(args.batch, args.episodes))
        ]
        for temperature in args.temperatures:
            by_condition: dict[str, dict[str, Any]] = {}
            for condition in ("none", "correct", "misleading"):
                agent = LLMAgent(
                    backend,
                    LLMAgentConfig(
                        temperature=temperature,
                        max_tokens=args.max_tokens,
                        seed=args.seed,
                        prompt=PromptConfig(history_window=args.history),
                    ),
                )
                start = time.perf_counter()
                trajectories = play(
                    envs, [] if condition == "none" else [lessons[condition]], agent, args
                )
                stats = cell(trajectories)
                stats.update(
                    env_id=env_id,
                    temperature=temperature,
                    condition=condition,
                    wall_s=round(time.perf_counter() - start, 1),
                )
                by_condition[condition] = stats
                result["cells"].append(stats)
                print(
                    f"{env_id} T={temperature} {condition:10s} {stats['success']:.3f} "
                    f"n={stats['episodes']} steps={stats['mean_steps']:.1f} "
                    f"invalid={stats['invalid_action_rate']:.2f} ({stats['wall_s']} s)",
                    flush=True,
                )
                write(result, args.out)
        for env in envs:
            env.close()
    return result


def summarise(result: dict[str, Any]) -> dict[str, Any]:
    """Add Wilson intervals to every cell and paired differences (same seeds) against ``none``."""
    from comprl_gym.evaluation.stats import paired_difference_interval, wilson_interval

    for c in result["cells"]:
        ci = wilson_interval(c["wins"], c["episodes"])
        c["ci_low"], c["ci_high"] = ci.low, ci.high
    for c in result["cells"]:
        if c["condition"] == "none":
            continue
        [base] = [
            b
            for b in result["cells"]
            if (b["env_id"], b["temperature"], b["condition"])
            == (c["env_id"], c["temperature"], "none")
        ]
        c["difference_vs_none"] = paired_difference_interval(
            c["outcomes"], base["outcomes"]
        ).to_dict()
    return result


def write(result: dict[str, Any], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1))
    tmp.replace(out)


def plot(result: dict[str, Any], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = result["cells"]
    keys = list(dict.fromkeys((c["env_id"], c["temperature"]) for c in cells))
    conditions = ("none", "correct", "misleading")
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(keys)), 4))
    width = 0.27
    for j, condition in enumerate(conditions):
        xs, ys, lo, hi = [], [], [], []
        for i, key in enumerate(keys):
            match = [c for c in cells if (c["env_id"], c["temperature"]) == key]
            match = [c for c in match if c["condition"] == condition]
            if match:
                c = match[0]
                xs.append(i + (j - 1) * width)
                ys.append(c["success"])
                lo.append(c["success"] - c["ci_low"])
                hi.append(c["ci_high"] - c["success"])
        ax.bar(xs, ys, width, yerr=[lo, hi], capsize=3, label=condition)
    ax.set_xticks(range(len(keys)))
    ax.set_xticklabels(
        [f"{e.split('/')[-1].replace('MiniHack-', '')}\nT={t}" for e, t in keys], fontsize=8
    )
    ax.set_ylabel("success (Wilson 95% CI)")
    ax.set_ylim(0, 1)
    ax.set_title(f"{result['args']['model']}: a lesson in the system prompt")
    ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2", help="smollm2, tiny or a model folder")
    parser.add_argument(
        "--envs",
        nargs="+",
        default=[
            "comprl/MiniHack-Room-5x5-v0",
            "comprl/MiniHack-Room-Random-5x5-v0",
            "comprl/MiniHack-Room-Dark-5x5-v0",
            "comprl/MiniHack-Room-15x15-v0",
        ],
    )
    parser.add_argument("--episodes", type=int, default=128, help="episodes per cell")
    parser.add_argument("--batch", type=int, default=32, help="episodes played at once")
    parser.add_argument("--max-steps", type=int, default=10)
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--history", type=int, default=1, help="past turns shown in the prompt")
    parser.add_argument("--temperatures", type=float, nargs="+", default=[1.0, 0.0])
    parser.add_argument("--seed", type=int, default=10_000, help="first held-out seed")
    parser.add_argument("--device", default=None, help="cpu | cuda (default: cuda if present)")
    parser.add_argument("--out", type=Path, default=RESULTS / "experience_use.json")
    parser.add_argument(
        "--summarise-only", action="store_true", help="recompute intervals and the plot from --out"
    )
    parser.add_argument("--raw-only", action="store_true", help="play and save outcomes only")
    args = parser.parse_args(argv)
    if args.summarise_only:
        result = json.loads(args.out.read_text())
    else:
        result = run(args)
        if args.raw_only:
            return 0
    write(summarise(result), args.out)
    plot(result, args.out.with_suffix(".png"))
    print(f"wrote {args.out} and {args.out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
