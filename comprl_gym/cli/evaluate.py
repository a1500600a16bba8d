"""``comprl-gym eval`` and ``suites``: an agent evaluated on env ids or a pinned suite, and
the pinned suites listed."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from comprl_gym.core import ConfigurationError
from comprl_gym.evaluation.eval import EvalConfig, run_eval, summary_markdown
from comprl_gym.evaluation.suites import load_suite, run_suite
from comprl_gym.utils import ENV_ARG, parse_key_values

#: Each command's examples, shown at the end of its --help.
EXAMPLES = {
    "eval": """examples:
  comprl-gym eval 'comprl/MiniHack-Room-*' --agent hf:smollm2 --episodes 20 --seeds 0 1 \\
      --out results/smollm2
  comprl-gym eval comprl/ALFWorld-v0 --agent hf:smollm2 --out results/x --resume
  comprl-gym eval comprl/MiniHack-Room-5x5-v0 --agent hf:smollm2 --paired-experience \\
      --experience runs/demo/store --out results/paired
  comprl-gym eval --suite minihack-nav@1 --agent expert --out results/expert""",
    "suites": """examples:
  comprl-gym suites
  comprl-gym suites --tasks""",
}


def _cmd_eval(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    config = EvalConfig(
        env_ids=args.env_ids,
        agent=args.agent,
        episodes=args.episodes,
        seeds=args.seeds,
        out_dir=args.out,
        parallel=args.parallel,
        max_steps=args.max_steps,
        env_kwargs=parse_key_values(args.env_arg),
        task_seed_offset=args.task_seed_offset,
        paired_experience=args.paired_experience,
        experience=args.experience,
        inject_top_k=args.inject_top_k,
        search_budget=args.search_budget,
        resume=args.resume,
        keep_tokens=args.keep_tokens,
        progress=not args.no_progress,
        suite=args.suite,
    )
    if args.suite and args.seeds == [0]:  # the default: as many agent seeds as the suite plays
        config.seeds = list(range(load_suite(args.suite).episodes_per_task))
    if not args.suite and not args.env_ids:
        raise ConfigurationError("name env ids to evaluate, or a suite with --suite NAME@VERSION")
    summary = run_suite(config) if config.suite else run_eval(config)
    print(summary_markdown(summary))
    print(f"results in {args.out}/ (episodes.jsonl, summary.json, summary.md)")
    return 0


def add_eval(sub: Any) -> None:
    p = sub.add_parser(
        "eval",
        help="evaluate an agent on env ids: per-episode JSONL, summary with 95%% intervals "
        "(Wilson for success)",
        description="Play an agent on env ids (or a pinned suite) and write a results folder: "
        "episodes.jsonl, summary.json and summary.md with 95% intervals. A family with task "
        "pools plays its held-out pool unless --env-arg split=... names another.",
    )
    p.add_argument("env_ids", nargs="*", help="ids or patterns such as 'comprl/MiniHack-*'")
    p.add_argument(
        "--suite",
        default=None,
        metavar="NAME@VERSION",
        help="a versioned suite instead of env ids (it pins ids, arguments, step limits and "
        "task seeds; only --env-arg data_dir=/sandbox= may be added); `comprl-gym suites` "
        "lists them",
    )
    p.add_argument(
        "--agent",
        default="hf:smollm2",
        help="random | expert | module:Class | hf:MODEL | vllm:MODEL | openai:URL#MODEL, "
        "optionally ?temperature=0&max_tokens=64&history=4&think=1 (default hf:smollm2)",
    )
    p.add_argument("--episodes", type=int, default=10, help="tasks per env id (default 10)")
    p.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=[0],
        help="agent seeds; each task runs once per seed",
    )
    p.add_argument("--out", required=True, help="results folder")
    p.add_argument(
        "--parallel", type=int, default=8, help="episodes at once per env id (one generation call)"
    )
    p.add_argument("--max-steps", type=int, default=None, help="env step limit")
    p.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE", help=ENV_ARG)
    p.add_argument("--task-seed-offset", type=int, default=0, help="task I is reset(seed=OFFSET+I)")
    p.add_argument(
        "--paired-experience",
        action="store_true",
        help="play each task with and without experience",
    )
    p.add_argument(
        "--experience", default=None, help="experience store folder (for --paired-experience)"
    )
    p.add_argument(
        "--inject-top-k", type=int, default=3, help="lessons shown per episode (default 3)"
    )
    p.add_argument(
        "--search-budget",
        type=int,
        default=2,
        help="search_and_ask actions answered per episode (default 2)",
    )
    p.add_argument("--resume", action="store_true", help="continue the run in --out")
    p.add_argument(
        "--keep-tokens", action="store_true", help="keep token ids/logprobs in episodes.jsonl"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    p.set_defaults(func=_cmd_eval)


def _cmd_suites(args: argparse.Namespace) -> int:
    """One line per pinned suite: its key, episodes, tasks (with pools), what it is."""
    from comprl_gym.evaluation.suites import load_suite, suite_keys
    from comprl_gym.families import env_pool

    for key in suite_keys():
        suite = load_suite(key)
        print(f"{key}  {suite.episodes} episodes  {suite.description}")
        if args.tasks:
            for task in suite.tasks:
                pool = env_pool(task.env_id, task.env_kwargs)
                where = f", pool {pool.label()}" if pool else ""
                print(f"    {task.name}: {task.env_id}, {len(task.seeds)} seeds{where}")
    return 0


def add_suites(sub: Any) -> None:
    p = sub.add_parser(
        "suites",
        help="list the pinned suites `comprl-gym eval --suite` plays",
        description="List the pinned, versioned suites: each pins its env ids, arguments, "
        "step limits and task seeds, so that runs of one suite version are comparable.",
    )
    p.add_argument(
        "--tasks", action="store_true", help="also list each suite's tasks and their pools"
    )
    p.set_defaults(func=_cmd_suites)
