"""The ``comprl-gym`` command.

``envs`` lists the ids, ``play ID`` lets a person play in the terminal, ``run`` plays ids with
a scripted agent and prints a table, ``stream`` runs a streaming evaluation
(:mod:`comprl_gym.evaluation.stream`). ``eval``, ``leaderboard``, ``train`` and ``serve`` come from
:mod:`comprl_gym.evaluation.cli`, :mod:`comprl_gym.trainers.cli` and :mod:`comprl_gym.serving.cli`.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path
from typing import Any

from tqdm import tqdm

import comprl_gym
from comprl_gym.agents import make_agent
from comprl_gym.core import printable_text
from comprl_gym.env_factory import EnvSpec, make_env
from comprl_gym.evaluation.eval import expand_env_ids
from comprl_gym.families import env_pool
from comprl_gym.registration import ENV_TABLE, markdown_table
from comprl_gym.rollouts import RolloutConfig, RolloutWorker
from comprl_gym.utils import ENV_ARG, parse_key_values

#: A lesson's statuses (``comprl_gym.experience.records.STATUSES``, named here so that the
#: command line loads without the experience extra; tests/test_lessons_cli.py compares them).
LESSON_STATUSES = ("active", "merged", "dropped", "expired")

#: Modules that add sub-commands: each has ``add_commands(subparsers)``.
COMMAND_MODULES = (
    "comprl_gym.evaluation.cli",
    "comprl_gym.evaluation.table",
    "comprl_gym.trainers.cli",
    "comprl_gym.trainers.probe_command",
    "comprl_gym.serving.cli",
)


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


#: Each command's examples, shown at the end of its --help.
EXAMPLES = {
    "comprl-gym": """examples:
  comprl-gym envs
  comprl-gym run 'comprl/MiniHack-Room-*' --agent expert --episodes 5
  comprl-gym eval comprl/Memory-Fork-v0 --agent hf:smollm2 --episodes 20 --out results/mine
  comprl-gym train --config configs/demo.yaml""",
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
    "stream": """examples:
  comprl-gym stream --env comprl/Memory-Fork-v0 --tasks 64 --visits 3 \\
      --arms none,oracle,placebo,exemplar --agent hf:smollm2 --output-dir results/stream
  comprl-gym stream --env comprl/Memory-Fork-v0 --tasks 64 --visits 2 \\
      --run runs/memory-complementary --arms none,own,oracle --output-dir results/own
  comprl-gym stream --env comprl/Memory-Fork-v0 --split test_large --tasks 64 --visits 2 \\
      --arms none,coin,coin_exemplar,outcome_aware,exemplar \\
      --agent comprl_gym.envs.memory.replay:ReplayAgent --output-dir results/bounds
  comprl-gym leaderboard results/stream results/own --out leaderboard/""",
    "lessons": """examples:
  comprl-gym lessons runs/demo/experience
  comprl-gym lessons runs/demo/experience --status active --min-uses 2 --limit 20
  comprl-gym lessons bank/ --family memory --json""",
    "lesson": """examples:
  comprl-gym lesson runs/demo/experience 12
  comprl-gym lesson bank/ 12 --json""",
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
    "leaderboard": """examples:
  comprl-gym leaderboard results/* --out leaderboard/
  comprl-gym leaderboard results/* --suite minihack-nav@1 --out leaderboard/""",
    "validate": """examples:
  comprl-gym validate comprl/WebShop-v0 'comprl/MiniHack-Room-*' --seeds 0 1 2
  comprl-gym validate --all --json validate.json
  comprl-gym validate comprl/Memory-Fork-v0 --json - | python -m json.tool""",
    "table": """examples:
  comprl-gym table --method GRPO runs/grpo-0/stream runs/grpo-1/stream \\
      --method "Complementary RL" runs/crl-0/stream runs/crl-1/stream \\
      --versus GRPO --out results/table""",
    "train": """examples:
  comprl-gym train --config configs/demo.yaml
  comprl-gym train --config configs/grpo-minihack.yaml --set actor.lr=1e-5 --output-dir runs/g""",
    "doctor": """examples:
  comprl-gym doctor --config configs/extractor-credit.yaml
  comprl-gym doctor --config configs/demo.yaml --set actor.lr=1e-5 --updates 5""",
    "probe": """examples:
  comprl-gym probe --run runs/demo
  comprl-gym probe --extractor smollm2 --family memory --out probe.json""",
    "serve": """examples:
  comprl-gym serve 'comprl/MiniHack-Room-*' --port 8000
  comprl-gym serve comprl/WebShop-v0 --experience runs/demo/store --token SECRET""",
}

STREAM_HELP = """Stream held-out tasks: every task visited --visits times, once per arm (lesson source),
every (task, visit) episode on the same reset and sampling seed in every arm. On a family with
task pools the held-out pool is played unless --split names another.

Arms: none (no lessons; always run, the reference), the env family's fixed lessons (memory
family: oracle, inverted, placebo, one per task; on Memory-Landmark-v0 also rule,
inverted_rule, rule_placebo, one rule for every dungeon, there from the first visit), exemplar (won episodes' actions, stored
between visits), cases (every episode's actions and outcome), the family's scripted memories,
arms that bound the result (memory family: coin, the stem extractor's placebo, the oracle's
sentence with a side a coin drew per dungeon; coin_exemplar, the exemplar's placebo, each won
episode's record on the coin's side; outcome_aware, the ceiling, the oracle's sentence with
the side each episode shows), own (the --run's extractor distils each finished episode). The
agent is --agent (any `comprl-gym eval` spec) or the --run's trained actor; the memory
family's scripted reader is comprl_gym.envs.memory.replay:ReplayAgent (replays a shown
record's moves, else a shown sentence's side, else a coin).

Writes the folder `comprl-gym eval` writes (episodes.jsonl with arm and visit per episode,
summary.json/.md, provenance.json) plus stream.png (success by visit per arm) and stores/.
"""


def _trained_run(run_dir: str, work: Path, overrides: list[str] | None = None) -> Any:
    """The trainer of the training run in ``run_dir`` at its latest checkpoint, working in
    ``work`` (the run's own folder is only read), its config changed by ``KEY=VALUE``
    ``overrides`` (as ``comprl-gym train --set``): :meth:`Run.trainer
    <comprl_gym.trainers.run.Run.trainer>`."""
    from comprl_gym.trainers.run import Run

    return Run(run_dir).trainer(work, overrides)


def _untrained_run(config_path: str, work: Path, overrides: list[str] | None = None) -> Any:
    """The trainer a ``comprl-gym train --config`` run starts as, before its first iteration:
    the actor from its ``init_weights`` (or the base model), the extractor untrained, working
    in ``work`` (the config's own output_dir is never touched)."""
    from comprl_gym.trainers import TrainConfig, make_trainer

    here = [
        f"output_dir={work / 'run'}",
        f"experience.store_dir={work / 'store'}",
        "resume=false",
        "progress=false",
        "tensorboard=false",
    ]
    return make_trainer(TrainConfig.from_yaml(config_path, [*(overrides or []), *here]))


def _own_lessons(trainer: Any) -> Any:
    """The 'own' arm's lesson writer, a function of the arm's store that returns its
    ``learn``: the run's extractor distils each finished episode into the store (or, for a run
    whose lessons come from a no-model memory, that memory stores it); ``None`` for a run
    that writes no lessons (GRPO)."""
    if trainer.extractor is not None:
        extractor = trainer.extractor

        def own(store: Any) -> Any:
            def learn(episode: Any) -> None:
                # into=: the arm's store, never the run's (whose credit the extractor keeps)
                extractor.write(episode, actor_step=trainer.iteration, into=store)

            return learn

        return own
    if trainer.memory is not None:
        memory = trainer.memory
        return lambda store: lambda episode: memory.learn(episode, store, trainer.iteration)
    return None


def _arm_pair(text: str) -> tuple[str, str]:
    """``own:coin`` -> ``("own", "coin")`` (``--versus``)."""
    treatment, sep, control = text.partition(":")
    if not sep or not treatment.strip() or not control.strip():
        raise comprl_gym.ConfigurationError(
            f"--versus takes TREATMENT:CONTROL (two arms, e.g. own:coin), not {text!r}"
        )
    return treatment.strip(), control.strip()


def _cmd_stream(args: argparse.Namespace) -> int:
    import tempfile

    from comprl_gym.evaluation.stream import OWN, StreamConfig, run_stream, stream_markdown

    env_kwargs = parse_key_values(args.env_arg)
    if args.split:
        env_kwargs["split"] = args.split
    config = StreamConfig(
        env_id=args.env,
        agent=args.agent or "",
        tasks=args.tasks,
        visits=args.visits,
        arms=[a.strip() for a in args.arms.split(",") if a.strip()],
        env_kwargs=env_kwargs,
        max_steps=args.max_steps,
        seed=args.seed,
        inject_top_k=args.inject_top_k,
        parallel=args.parallel,
        out_dir=args.output_dir,
        progress=not args.no_progress,
        run=args.run,
        versus=[_arm_pair(pair) for pair in args.versus],
    )
    if not (args.run or args.config or args.agent):
        raise comprl_gym.ConfigurationError(
            "name the agent: --agent SPEC, --run DIR or --config FILE"
        )
    if args.run and args.config:
        raise comprl_gym.ConfigurationError(
            "--run DIR (a trained run) or --config FILE (a run before training), not both"
        )
    source = args.run or args.config
    config.run = source
    pool = env_pool(args.env, env_kwargs)
    if pool is not None:  # say which pool is played, before the minutes it takes
        how = "--split" if pool.chosen == "given" else "the default; --split names another"
        print(f"{args.env}: playing pool {pool.label()} ({how})", flush=True)
    with tempfile.TemporaryDirectory(prefix="comprl-stream-") as work:
        trainer = None
        if args.run:
            trainer = _trained_run(args.run, Path(work), args.set)
        elif args.config:
            trainer = _untrained_run(args.config, Path(work), args.set)
        try:
            agent, own = None, None
            if trainer is not None:
                own = _own_lessons(trainer)
                if own is None and OWN in config.arms:
                    raise comprl_gym.ConfigurationError(
                        f"{source} is a {trainer.algorithm} run, which has no "
                        "extractor (nor memory) to write the 'own' arm's lessons: drop 'own' "
                        "from --arms"
                    )
                if not args.agent:
                    agent = trainer.agent(seed=args.seed, temperature=args.temperature)
                    config.agent = f"{trainer.algorithm}@{trainer.iteration} ({source})"
            origin = None
            if args.run:
                from comprl_gym.trainers.run import Run

                origin = Run(args.run).origin()
            elif trainer is not None:
                from comprl_gym.evaluation.provenance import config_provenance

                roles = {"actor": trainer.config.actor, "extractor": trainer.config.extractor}
                origin = config_provenance(source, roles)
            summary = run_stream(config, agent=agent, own=own, run=origin)
        finally:
            if trainer is not None:
                trainer.close()
    print(stream_markdown(summary))
    if pool is not None:
        print(f"pool played: {pool.label()} (recorded in config.json and summary.json)")
    print(f"results in {args.output_dir}/ (episodes.jsonl, summary.json, summary.md, stream.png)")
    return 0


def _cmd_lesson(args: argparse.Namespace) -> int:
    """``comprl-gym lesson FOLDER ID``: one lesson's full text and history (a store's revision
    log; an exported bank keeps the lesson's provenance and tallies only)."""
    import json

    from comprl_gym.experience.database import DB_NAME, ExperienceDatabase
    from comprl_gym.experience.lineage import (
        BANK,
        bank_history,
        format_history,
        lesson_history,
        read_lessons,
        store_kind,
    )

    if store_kind(args.store_dir) == BANK:
        _, lessons = read_lessons(args.store_dir)
        found = [e for e in lessons if e.id == args.id]
        history = bank_history(found[0]) if found else None
    else:
        database = ExperienceDatabase(Path(args.store_dir) / DB_NAME, quick_check=False)
        try:
            history = lesson_history(database, args.id)
        finally:
            database.close()
    if history is None:
        raise comprl_gym.ConfigurationError(
            f"no lesson {args.id} in {args.store_dir} (no row and no kept revision names it)"
        )
    print(json.dumps(history, indent=2) if args.json else format_history(history))
    return 0


def _cmd_lessons(args: argparse.Namespace) -> int:
    """``comprl-gym lessons FOLDER``: the lessons of a store or an exported bank, filtered."""
    from comprl_gym.experience.lineage import filter_lessons, format_lessons, read_lessons

    if args.limit is not None and args.limit < 1:
        raise comprl_gym.ConfigurationError("--limit must be at least 1")
    _, lessons = read_lessons(args.store_dir)
    shown = filter_lessons(lessons, args.family, args.status, args.min_uses, args.limit)
    if args.json:
        for lesson in shown:
            print(lesson.to_json())
    else:
        print(format_lessons(shown, lessons))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="comprl-gym",
        description="Train and evaluate LLM agents that learn from experience. "
        "`comprl-gym COMMAND --help` shows each command's options and examples.",
        epilog=EXAMPLES["comprl-gym"],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=comprl_gym.__version__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("envs", help="list the registered ids")
    p.add_argument(
        "--family",
        choices=sorted({e.family for e in ENV_TABLE.values()}),
        help="only the ids of this family",
    )
    p.add_argument("--markdown", action="store_true", help="print the README table")
    p.set_defaults(func=_cmd_envs)

    p = sub.add_parser("play", help="play an env yourself in the terminal")
    p.add_argument("env_id", help="the id to play (see `comprl-gym envs`)")
    p.add_argument("--seed", type=int, default=0, help="the reset seed: which task (default 0)")
    p.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE", help=ENV_ARG)
    p.set_defaults(func=_cmd_play)

    p = sub.add_parser("run", help="play ids with a scripted agent and print a results table")
    p.add_argument("env_ids", nargs="+", help="ids or patterns such as 'comprl/MiniHack-*'")
    p.add_argument("--agent", default="expert", help="random | expert | module:Class")
    p.add_argument("--episodes", type=int, default=10, help="episodes per id (default 10)")
    p.add_argument("--seed", type=int, default=0, help="episode I is reset(seed=SEED+I)")
    p.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE", help=ENV_ARG)
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser(
        "stream",
        help="streaming evaluation (test-time learning): K visits per held-out task, one arm "
        "per lesson source, common random numbers; a run folder the leaderboard reads",
        description=STREAM_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--env", required=True, metavar="ID", help="the env id")
    p.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE", help=ENV_ARG)
    p.add_argument(
        "--split",
        default=None,
        help="the pool to play, passed as the env's split argument. Default: the family's "
        "held-out pool (memory: test; the others are test_large, sealed, and train, the "
        "training pool); the pool played is printed and recorded in config.json",
    )
    p.add_argument(
        "--tasks", type=int, required=True, help="held-out tasks: reset seeds 0..N-1 of the pool"
    )
    p.add_argument("--visits", type=int, default=2, help="visits to each task (default 2)")
    p.add_argument(
        "--arms",
        default="none",
        help="comma-separated lesson sources: none (always run), the family's fixed lessons "
        "(oracle, inverted, placebo), exemplar, cases, the family's scripted memories (coin, "
        "coin_exemplar, outcome_aware), own (needs --run)",
    )
    p.add_argument(
        "--agent",
        default=None,
        help="an agent spec as `comprl-gym eval` takes it (random | expert | module:Class | "
        "hf:MODEL?temperature=1 | ...); default: the --run's actor",
    )
    p.add_argument(
        "--run",
        default=None,
        metavar="DIR",
        help="a training run's output_dir: its latest checkpoint's actor (unless --agent) and "
        "extractor (the 'own' arm)",
    )
    p.add_argument(
        "--config",
        default=None,
        metavar="FILE",
        help="a training config, streamed as its run starts, before any training: the actor "
        "from its init_weights and the untrained extractor (the 'own' arm); the same arms "
        "and seeds as a --run of it give a before/after comparison",
    )
    p.add_argument(
        "--temperature",
        type=float,
        default=None,
        help="the --run actor's sampling temperature (default: its rollout temperature)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="change the --run's (or --config's) config as `comprl-gym train --set` does, e.g. "
        "rollout_backend=transformers to stream a vLLM-trained run on CPU",
    )
    p.add_argument("--seed", type=int, default=0, help="base of every episode's sampling seed")
    p.add_argument("--max-steps", type=int, default=None, help="env step limit")
    p.add_argument("--inject-top-k", type=int, default=1, help="lessons shown per episode")
    p.add_argument("--parallel", type=int, default=32, help="LLM episodes played at once")
    p.add_argument(
        "--versus",
        action="append",
        default=[],
        metavar="TREATMENT:CONTROL",
        help="also compare two arms episode by episode, per visit (repeatable): a memory "
        "against its placebo, e.g. own:coin",
    )
    p.add_argument("--output-dir", "--out", required=True, help="the run folder (new)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_stream)

    p = sub.add_parser(
        "lessons",
        help="list the lessons of an experience store or an exported bank: id, uses, wins, "
        "status, family, title",
        description="List the lessons of an experience store (a training run's experience/ "
        "folder, an eval's --experience) or of an exported bank, by id, every status unless "
        "--status names one. Reads the files only: no embedding model is loaded. "
        "`comprl-gym lesson FOLDER ID` shows one lesson's full text and history.",
    )
    p.add_argument("store_dir", metavar="FOLDER", help="a store folder or an exported bank")
    p.add_argument(
        "--family",
        default=None,
        help="only the lessons of this env family (memory, minihack, ...); '' for family-less ones",
    )
    p.add_argument(
        "--status",
        choices=LESSON_STATUSES,
        default=None,
        help="only the lessons with this status (default: every status)",
    )
    p.add_argument(
        "--min-uses", type=int, default=0, help="only the lessons shown at least this many times"
    )
    p.add_argument("--limit", type=int, default=None, help="show at most this many (by id)")
    p.add_argument(
        "--json", action="store_true", help="one JSON object per lesson, every field, no table"
    )
    p.set_defaults(func=_cmd_lessons)

    p = sub.add_parser(
        "lesson",
        help="one lesson: its full text, where it came from, what it was merged into, its uses "
        "and wins",
        description="Show one lesson of an experience store or an exported bank: its full "
        "text, where it came from, what it was merged into, and its uses and wins (a bank "
        "keeps no revision log: its lessons show their provenance and tallies only).",
    )
    p.add_argument("store_dir", metavar="FOLDER", help="a store folder or an exported bank")
    p.add_argument("id", type=int, help="the lesson's id (`comprl-gym lessons FOLDER` lists them)")
    p.add_argument("--json", action="store_true", help="print the history as JSON")
    p.set_defaults(func=_cmd_lesson)

    for module_name in COMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue
        module.add_commands(sub)
    for name, command in sub.choices.items():
        # Every command's help ends with examples a user can copy (tests/test_cli_help.py).
        command.epilog = EXAMPLES[name]
        command.formatter_class = argparse.RawDescriptionHelpFormatter
    return parser


#: The exit status of a command whose reader closed the pipe early (``| head``): a shell's
#: 128 + SIGPIPE, the status other tools end with there.
CLOSED_PIPE = 141


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        status = int(args.func(args) or 0)
        sys.stdout.flush()  # here, not at exit, so that a closed pipe is caught below
        return status
    except comprl_gym.ComprlGymError as exc:
        print(f"comprl-gym: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader left (`comprl-gym envs | head -1`): end quietly. Standard output is
        # pointed at /dev/null so that Python's flush at exit raises no second error.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return CLOSED_PIPE


if __name__ == "__main__":
    raise SystemExit(main())
