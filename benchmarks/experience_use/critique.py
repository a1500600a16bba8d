"""Can the actor critique its retrieved experiences? (``experience.actor_critique``)

Before an episode the actor judges the lessons it was given: reject / accept / refine as JSON
in ``<answer>`` (reference ``memory_integration_mixin.py::actor_critic``). An unreadable reply
drops the lessons, so a model that rarely writes a readable decision loses the experience the
with-experience half is meant to test. This measures, per lesson (the hand-written
``correct`` and ``misleading`` lessons of ``run.py`` beside this file) and sampling
temperature, how the actor's critiques end: accept, reject, refine or unparsed, and what a
critique costs. A useful critic accepts or refines the correct lesson and rejects the
misleading one.

Results: ``benchmarks/results/critique.json``.

Run (CPU, small):  python -m benchmarks.experience_use.critique --episodes 8
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import gymnasium as gym

import comprl_gym  # noqa: F401  (registers the comprl/* ids)
from benchmarks.common import RESULTS
from benchmarks.experience_use.run import LESSONS, LessonEnv, family_of
from comprl_gym.agents.critique import DECISIONS, ExperienceCritic
from comprl_gym.agents.llm_agent import LLMAgent, LLMAgentConfig
from comprl_gym.agents.prompts import PromptConfig
from comprl_gym.llm import make_backend
from comprl_gym.rollouts import collect_rollouts


def run(args: argparse.Namespace) -> dict[str, Any]:
    backend = make_backend(f"hf:{args.model}")
    result: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}, "cells": []}
    lessons = LESSONS[family_of(args.env)]
    envs = [LessonEnv(gym.make(args.env, max_steps=1), []) for _ in range(args.episodes)]
    for temperature in args.temperatures:
        for condition in ("correct", "misleading"):
            for env in envs:
                env.set_lessons([lessons[condition]])
            agent = LLMAgent(
                backend,
                LLMAgentConfig(
                    temperature=temperature,
                    max_tokens=args.max_tokens,
                    seed=args.seed,
                    prompt=PromptConfig(conversation="multi_turn"),
                ),
                critic=ExperienceCritic(backend, args.critique_tokens),
            )
            start = time.perf_counter()
            seeds = list(range(args.seed, args.seed + args.episodes))
            trajectories = collect_rollouts(envs, agent, seeds=seeds)
            wall = time.perf_counter() - start
            counts = Counter(t.critique["decision"] for t in trajectories if t.critique)
            cell = {
                "temperature": temperature,
                "lesson": condition,
                "critiques": sum(counts.values()),
                **{d: counts.get(d, 0) for d in DECISIONS},
                "parse_rate": 1 - counts.get("unparsed", 0) / max(sum(counts.values()), 1),
                "wall_s_incl_one_action_step": round(wall, 1),
                "replies": [t.critique["reply"][:300] for t in trajectories[:3] if t.critique],
            }
            result["cells"].append(cell)
            print({k: v for k, v in cell.items() if k != "replies"}, flush=True)
    for env in envs:
        env.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--env", default="comprl/MiniHack-Room-Random-5x5-v0")
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--temperatures", type=float, nargs="+", default=[1.0, 0.0])
    parser.add_argument("--max-tokens", type=int, default=12, help="the actor's action budget")
    parser.add_argument("--critique-tokens", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS / "critique.json")
    args = parser.parse_args()
    result = run(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
