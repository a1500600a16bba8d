"""``comprl-gym serve ID [ID ...]``: serve comprl ids over OpenEnv's protocol
(:mod:`comprl_gym.serving`).

Example:
    >>> import argparse
    >>> parser = argparse.ArgumentParser(); sub = parser.add_subparsers()
    >>> add_serve(sub)
    >>> args = parser.parse_args(["serve", "comprl/WebShop-v0", "--max-sessions", "4"])
    >>> args.env_ids, args.max_sessions, args.host
    (['comprl/WebShop-v0'], 4, '127.0.0.1')
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from comprl_gym.evaluation.eval import expand_env_ids
from comprl_gym.utils import ENV_ARG, parse_key_values

#: Each command's examples, shown at the end of its --help.
EXAMPLES = {
    "serve": """examples:
  comprl-gym serve 'comprl/MiniHack-Room-*' --port 8000
  comprl-gym serve comprl/WebShop-v0 --experience runs/demo/store --token SECRET""",
}


def _cmd_serve(args: argparse.Namespace) -> int:
    # FastAPI, uvicorn and openenv load only when a server is started.
    from comprl_gym.serving.server import serve

    env_ids = expand_env_ids(args.env_ids)
    experience = None
    if args.experience:
        from comprl_gym.experience import ExperienceManager

        experience = ExperienceManager(args.experience)
    print(f"comprl-gym: serving {len(env_ids)} id(s) on http://{args.host}:{args.port}", flush=True)
    serve(
        env_ids,
        host=args.host,
        port=args.port,
        max_sessions=args.max_sessions,
        idle_timeout_s=args.idle_timeout or None,
        token=args.token or os.environ.get("COMPRL_GYM_SERVE_TOKEN"),
        env_kwargs={env_id: parse_key_values(args.env_arg) for env_id in env_ids},
        experience=experience,
        inject_top_k=args.inject_top_k,
        search_budget=args.search_budget,
        report_outcomes=args.report_outcomes,
    )
    if experience is not None:
        experience.close()
    return 0


def add_serve(sub: Any) -> None:
    p = sub.add_parser(
        "serve",
        help="serve ids over OpenEnv's protocol (WebSocket /ws, /health)",
        description="Serve comprl ids with openenv-core's server: one env per client session.",
    )
    p.add_argument("env_ids", nargs="+", help="ids or patterns such as 'comprl/MiniHack-*'")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback)")
    p.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    p.add_argument("--max-sessions", type=int, default=16, help="concurrent sessions at most")
    p.add_argument(
        "--idle-timeout",
        type=float,
        default=300.0,
        metavar="S",
        help="close a session idle this long (seconds; 0 = never)",
    )
    p.add_argument(
        "--token",
        default=None,
        help="require 'Authorization: Bearer TOKEN' (or set COMPRL_GYM_SERVE_TOKEN)",
    )
    p.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE", help=ENV_ARG)
    p.add_argument(
        "--experience",
        default=None,
        metavar="STORE_DIR",
        help="an experience store: clients may reset with experience=true",
    )
    p.add_argument("--inject-top-k", type=int, default=3, help="experiences shown at reset")
    p.add_argument("--search-budget", type=int, default=2, help="search_and_ask calls per episode")
    p.add_argument(
        "--report-outcomes",
        action="store_true",
        help="let served episodes update the store's win tallies (off: the store is read only)",
    )
    p.set_defaults(func=_cmd_serve)
