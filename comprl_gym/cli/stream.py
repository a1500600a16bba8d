"""``comprl-gym stream``: a streaming evaluation (:mod:`comprl_gym.evaluation.stream`) of an
agent spec, of a training run's actor and extractor (``--run``) or of a training config
before it trains (``--config``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import comprl_gym
from comprl_gym.families import env_pool
from comprl_gym.utils import ENV_ARG, parse_key_values

#: Each command's examples, shown at the end of its --help.
EXAMPLES = {
    "stream": """examples:
  comprl-gym stream --env comprl/Memory-Fork-v0 --tasks 64 --visits 3 \\
      --arms none,oracle,placebo,exemplar --agent hf:smollm2 --output-dir results/stream
  comprl-gym stream --env comprl/Memory-Fork-v0 --tasks 64 --visits 2 \\
      --run runs/memory-complementary --arms none,own,oracle --output-dir results/own
  comprl-gym stream --env comprl/Memory-Fork-v0 --split test_large --tasks 64 --visits 2 \\
      --arms none,coin,coin_exemplar,outcome_aware,exemplar \\
      --agent comprl_gym.envs.memory.replay:ReplayAgent --output-dir results/bounds
  comprl-gym leaderboard results/stream results/own --out leaderboard/""",
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
        first_task=args.first_task,
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


def add_stream(sub: Any) -> None:
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
        "--tasks",
        type=int,
        required=True,
        help="how many held-out tasks to play: reset seeds 0..N-1 of the pool, or F..F+N-1 "
        "with --first-task F",
    )
    p.add_argument(
        "--first-task",
        type=int,
        default=0,
        help="start at this reset seed: --tasks N plays seeds F..F+N-1 (a pool's later "
        "tasks, untouched by a stream of its first ones; default 0)",
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
