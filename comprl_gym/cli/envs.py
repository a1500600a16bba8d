"""``comprl-gym envs``, ``play``, ``run`` and ``validate``: the registered ids listed, one
played by a person, ids played by a scripted agent, ids checked against the env contract."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tqdm import tqdm

from comprl_gym.agents import make_agent
from comprl_gym.core import ConfigurationError, printable_text
from comprl_gym.env_factory import EnvSpec, make_env
from comprl_gym.evaluation.eval import expand_env_ids
from comprl_gym.registration import ENV_TABLE, markdown_table
from comprl_gym.rollouts import RolloutConfig, RolloutWorker
from comprl_gym.utils import ENV_ARG, atomic_write_json, parse_key_values, writes_to_stdout

#: Each command's examples, shown at the end of its --help.
EXAMPLES = {
    "envs": """examples:
  comprl-gym envs
  comprl-gym envs --family memory""",
    "play": """examples:
  comprl-gym play comprl/MiniHack-Room-5x5-v0
  comprl-gym play comprl/Memory-Fork-v0 --seed 3 --env-arg split=test
Type an action at the prompt; ? lists the allowed ones, quit ends.""",
    "run": """examples:
  comprl-gym run 'comprl/MiniHack-Room-*' --agent expert --episodes 5
  comprl-gym run comprl/Memory-Fork-v0 --agent random --episodes 20""",
    "validate": """examples:
  comprl-gym validate comprl/WebShop-v0 'comprl/MiniHack-Room-*' --seeds 0 1 2
  comprl-gym validate --all --json validate.json
  comprl-gym validate comprl/Memory-Fork-v0 --json - | python -m json.tool""",
}


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


def add_envs(sub: Any) -> None:
    p = sub.add_parser("envs", help="list the registered ids")
    p.add_argument(
        "--family",
        choices=sorted({e.family for e in ENV_TABLE.values()}),
        help="only the ids of this family",
    )
    p.add_argument("--markdown", action="store_true", help="print the README table")
    p.set_defaults(func=_cmd_envs)


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


def add_play(sub: Any) -> None:
    p = sub.add_parser("play", help="play an env yourself in the terminal")
    p.add_argument("env_id", help="the id to play (see `comprl-gym envs`)")
    p.add_argument("--seed", type=int, default=0, help="the reset seed: which task (default 0)")
    p.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE", help=ENV_ARG)
    p.set_defaults(func=_cmd_play)


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


def add_run(sub: Any) -> None:
    p = sub.add_parser("run", help="play ids with a scripted agent and print a results table")
    p.add_argument("env_ids", nargs="+", help="ids or patterns such as 'comprl/MiniHack-*'")
    p.add_argument("--agent", default="expert", help="random | expert | module:Class")
    p.add_argument("--episodes", type=int, default=10, help="episodes per id (default 10)")
    p.add_argument("--seed", type=int, default=0, help="episode I is reset(seed=SEED+I)")
    p.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE", help=ENV_ARG)
    p.set_defaults(func=_cmd_run)


def _cmd_validate(args: argparse.Namespace) -> int:
    from comprl_gym.evaluation.validate import validate_ids
    from comprl_gym.registration import ENV_TABLE

    if not args.env_ids and not args.all:
        raise ConfigurationError("name the ids to validate, or pass --all")
    if args.all:
        env_ids = list(ENV_TABLE)
    else:  # an id gymnasium knows (a family of yours) as it is, else a pattern of comprl ids
        import gymnasium as gym

        env_ids = []
        for name in args.env_ids:
            env_ids += [name] if name in gym.registry else expand_env_ids([name])

    # With the JSON on standard output (--json - or /dev/stdout) the reports people read go to
    # standard error, so that standard output is the JSON alone.
    messages = sys.stderr if writes_to_stdout(args.json) else sys.stdout

    def show(report: Any) -> None:
        lines = report.lines() + [f"  note: {note}" for note in report.notes]
        tqdm.write("\n".join(lines), file=messages)

    reports = validate_ids(
        env_ids,
        seeds=args.seeds,
        env_kwargs=parse_key_values(args.env_arg),
        progress=not args.no_progress,
        on_report=show,
    )
    failed = [r.env_id for r in reports if not r.passed]
    if args.json:
        atomic_write_json(
            args.json,
            {"passed": not failed, "seeds": args.seeds, "reports": [r.to_dict() for r in reports]},
        )
    print(
        f"{len(reports) - len(failed)} of {len(reports)} id(s) passed"
        + (f"; failed: {', '.join(failed)}" if failed else ""),
        file=messages,
    )
    return 1 if failed else 0


def add_validate(sub: Any) -> None:
    p = sub.add_parser(
        "validate",
        help="check that env ids keep the contract: check_env, expert, no-op, random, "
        "determinism, bad actions, leaks, printable text",
        description="Check that env ids keep the contract before anyone benchmarks them: "
        "gymnasium's env checker, the expert wins, doing nothing and acting at random do "
        "not, the same seed replays the same episode, bad actions never raise, no "
        "observation leaks the answer, every observation is printable text. Each failed "
        "check is one line of the report; the command exits 1 if any failed.",
    )
    p.add_argument("env_ids", nargs="*", help="ids or patterns such as 'comprl/MiniHack-*'")
    p.add_argument("--all", action="store_true", help="every registered id")
    p.add_argument(
        "--seeds", type=int, nargs="+", default=[0, 1, 2], help="episode seeds (default 0 1 2)"
    )
    p.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE", help=ENV_ARG)
    p.add_argument(
        "--json",
        default=None,
        metavar="FILE",
        help="also write the reports to this JSON file (- for standard output; the lines "
        "for people then go to standard error)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_validate)
