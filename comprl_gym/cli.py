"""The ``comprl-gym`` command.

``envs`` lists the ids, ``play ID`` lets a person play in the terminal, ``run`` plays ids with
a scripted agent and prints a table. ``eval``, ``leaderboard``, ``train`` and ``serve`` come from
:mod:`comprl_gym.evaluation.cli`, :mod:`comprl_gym.trainers.cli` and :mod:`comprl_gym.serving.cli`.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from tqdm import tqdm

import comprl_gym
from comprl_gym.agents import make_agent
from comprl_gym.core import printable_text
from comprl_gym.env_factory import EnvSpec, make_env
from comprl_gym.evaluation.eval import expand_env_ids
from comprl_gym.registration import ENV_TABLE, markdown_table
from comprl_gym.rollouts import RolloutConfig, RolloutWorker
from comprl_gym.utils import parse_key_values

#: Modules that add sub-commands: each has ``add_commands(subparsers)``.
COMMAND_MODULES = ("comprl_gym.evaluation.cli", "comprl_gym.trainers.cli", "comprl_gym.serving.cli")


def _cmd_envs(args: argparse.Namespace) -> int:
    if args.markdown:
        print(markdown_table())
        return 0
    width = max(len(i) for i in ENV_TABLE)
    for entry in ENV_TABLE.values():
        if args.family and entry.family != args.family:
            continue
        print(f"{entry.env_id:<{width}}  {entry.family:<9}  {entry.description}")
    return 0


def _cmd_play(args: argparse.Namespace) -> int:
    env = make_env(EnvSpec.of(args.env_id, parse_key_values(args.env_arg)))
    observation, info = env.reset(seed=args.seed)
    # The observations are printable already (TextEnv); the task comes from data.
    print(f"Task: {printable_text(info['task'])}\n")
    print(observation)
    while True:
        try:
            action = input("\n> ")
        except (EOFError, KeyboardInterrupt):
            print()
            break
        if action.strip().lower() in {"quit", "exit"}:
            break
        if action.strip() in {"?", "help"}:
            print("Allowed:", ", ".join(info["admissible_actions"] or ["(any)"]))
            continue
        observation, reward, terminated, truncated, info = env.step(action)
        print(observation)
        if terminated or truncated:
            outcome = "won" if info["won"] else ("lost" if terminated else "out of steps")
            print(f"\nEpisode over: {outcome}, score {info['score']:.2f}, {info['step']} steps")
            break
    env.close()
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    env_ids = expand_env_ids(args.env_ids)
    rows = []
    bar = tqdm(total=len(env_ids) * args.episodes, desc="episodes", unit="ep")
    for env_id in env_ids:
        env = make_env(EnvSpec.of(env_id, parse_key_values(args.env_arg)))
        # One agent for all of an id's episodes, reset by the loop at each episode's start.
        worker = RolloutWorker(
            [env],
            agent=make_agent(args.agent, env, seed=args.seed),
            config=RolloutConfig(max_turns=None),
        )
        bar.set_postfix_str(env_id)
        results = worker.run(
            seeds=[args.seed + episode for episode in range(args.episodes)],
            on_episode=lambda _: bar.update(),
        )
        env.close()
        n = len(results)
        rows.append(
            (
                env_id,
                n,
                sum(r.won for r in results) / n,
                sum(r.score for r in results) / n,
                sum(r.steps for r in results) / n,
            )
        )
    bar.close()
    print(
        "\n| id | episodes | success rate | mean score | mean steps |\n| --- | --- | --- | --- | --- |"
    )
    for env_id, n, success, score, steps in rows:
        print(f"| {env_id} | {n} | {success:.2f} | {score:.2f} | {steps:.1f} |")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="comprl-gym", description=comprl_gym.__doc__)
    parser.add_argument("--version", action="version", version=comprl_gym.__version__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("envs", help="list the registered ids")
    p.add_argument("--family", choices=sorted({e.family for e in ENV_TABLE.values()}))
    p.add_argument("--markdown", action="store_true", help="print the README table")
    p.set_defaults(func=_cmd_envs)

    p = sub.add_parser("play", help="play an env yourself in the terminal")
    p.add_argument("env_id")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE")
    p.set_defaults(func=_cmd_play)

    p = sub.add_parser("run", help="play ids with a scripted agent and print a results table")
    p.add_argument("env_ids", nargs="+", help="ids or patterns such as 'comprl/MiniHack-*'")
    p.add_argument("--agent", default="expert", help="random | expert | module:Class")
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE")
    p.set_defaults(func=_cmd_run)

    for module_name in COMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue
        module.add_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except comprl_gym.ComprlGymError as exc:
        print(f"comprl-gym: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
