"""Train a memory-family recipe, stream its held-out dungeons: one result file per run.

A thin runner over the command line (``docs/memory-recipes.md`` has the recipes): ``comprl-gym
train --config CONFIG`` (``configs/memory-*.yaml``, ``--set`` overrides), then ``comprl-gym
stream --run`` of the trained run on the held-out dungeons (the run's actor at temperature 1,
its extractor filling the ``own`` arm's store), then one JSON file with the keys of the
committed ``benchmarks/results/extractor_memory_*.json``: every streamed episode with its
seeds, outcome, moves and the lessons it was shown; per arm and visit the success (Wilson) and
each arm minus ``none`` and minus ``placebo`` (Newcombe, McNemar); the training curve and the
extractor's metrics; what every store's lessons say (the family's judge); how often each
credit rule signed the extractor's batches right; every store text. ``comprl-gym table`` reads
this file, or the two run folders (kept with ``--keep DIR``), alike. ``--quick`` is a smoke
run on the tiny random model.

    python -m benchmarks.experience_transfer.run --config configs/memory-static.yaml \\
        --set seed=1 --arms none,own,oracle \\
        --out benchmarks/results/extractor_memory_stem_static_seed1

The committed files were written by this script's earlier, self-contained version (git history
before issue 43: its own reading warm-up and lesson-reading trainer, now
``TrainConfig.warmup`` and ``configs/memory-reader.yaml``); ``scripts/stream_equivalence.py``
compares the two paths episode by episode at tiny size.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ENV_ID = "comprl/Memory-Fork-v0"
#: ``--quick``: the tiny random model, in process (no vLLM), no progress bars.
QUICK = ["actor.model=tiny", "extractor.model=tiny", "rollout_backend=transformers"]
#: The episode fields the result file keeps (and each episode's moves).
EPISODE_KEYS = ("arm", "visit", "task_index", "task_id", "reset_seed", "sampling_seed", "won")


def train_and_stream(args: argparse.Namespace, work: Path) -> tuple[Any, Path, Path]:
    """``comprl-gym train`` then ``comprl-gym stream --run`` into ``work``; the config and the
    two folders."""
    from comprl_gym.cli import main
    from comprl_gym.trainers import TrainConfig

    sets = [*(QUICK if args.quick else []), *args.set, *(["progress=false"] if args.quick else [])]
    config = TrainConfig.from_yaml(args.config, sets)  # a bad config fails before any run
    run, stream = work / "run", work / "stream"
    flags = [f"--set={s}" for s in sets]
    if main(["train", "--config", args.config, *flags, "--output-dir", str(run)]):
        raise SystemExit("training failed")
    env_args = [f"--env-arg={k}={v}" for k, v in config.env_kwargs[ENV_ID].items() if k != "split"]
    argv = ["stream", "--env", ENV_ID, "--split", args.held_out, "--run", str(run)]
    argv += ["--tasks", str(args.tasks), "--visits", str(args.visits), "--arms", args.arms]
    argv += ["--seed", str(config.seed), "--max-steps", str(config.max_episode_steps)]
    argv += ["--temperature", "1.0", "--output-dir", str(stream), *env_args]
    if main([*argv, *(["--no-progress"] if args.quick else [])]):
        raise SystemExit("streaming failed")
    return config, run, stream


def store_lessons(run: Any, arm: str | None = None) -> dict[int, str]:
    """The active lessons by id of a :class:`~comprl_gym.trainers.run.Run`'s store (a
    stream's: its ``arm``'s), read-only; none where there is no store (a run without one)."""
    from comprl_gym.trainers.run import RunFileMissing

    try:
        store = run.store(arm=arm)
    except RunFileMissing:
        return {}
    with store:
        return {e.id: e.text for e in store.iter_experiences()}


def result_file(args: argparse.Namespace, config: Any, run: Path, stream: Path) -> dict:
    """The committed result files' keys, from the training run's and the stream's folders."""
    from comprl_gym.envs.memory import pool
    from comprl_gym.evaluation.stream import compare_runs, streaming_summary
    from comprl_gym.families import family_spec, verdict_counts
    from comprl_gym.trainers.credit import credit_agreement
    from comprl_gym.trainers.run import Run

    spec = family_spec("memory")
    held_out = list(pool(args.held_out))[: args.tasks]
    streamed, trained_run = Run(stream), Run(run)
    records = list(streamed.episodes())
    rows = trained_run.metrics
    summary = trained_run.summary
    # The stores that learnt (own, exemplar, cases) and the one the run trained with.
    learnt = [a for a in args.arms.split(",") if a not in ("none", *spec.lessons.fixed)]
    texts = {arm: list(store_lessons(streamed, arm).values()) for arm in learnt}
    trained = store_lessons(trained_run)
    texts["training_run"] = list(trained.values())
    verdicts = {}
    for lesson, text in trained.items():
        verdict = spec.judge(text)
        verdicts[lesson] = "no_task" if verdict.task_id is None else verdict.verdict
    batch_log = trained_run.checkpoint().batch_log
    warmup = summary.get("warmup") or {}
    summary_by_arm = streaming_summary(records)
    placebo = streaming_summary(records, reference="placebo")

    def shown_own(record: dict) -> bool:
        """Whether the episode was shown a lesson about its own dungeon."""
        shown = [" ".join(str(e.get(k) or "") for k in e) for e in record["experiences"]]
        return held_out[record["task_index"]] in [spec.judge(text).task_id for text in shown]

    out = {
        "benchmark": "experience_transfer",
        "env_id": ENV_ID,
        "held_out_pool": args.held_out,
        "held_out_dungeons": held_out,
        "visits": args.visits,
        "config": config.to_dict(),
        "training_curve": [
            {
                "iteration": r["step"],
                "success": r.get("success"),
                "with_experience": r.get("with_experience/success"),
                "without_experience": r.get("without_experience/success"),
            }
            for r in rows
            if "success" in r
        ],
        "extractor_metrics": [
            {"iteration": r["step"]}
            | {k: v for k, v in r.items() if k.startswith("extractor/") or k == "store_size"}
            for r in rows
            if any(k.startswith("extractor/") for k in r)
        ],
        "reading_warmup": {
            "steps": warmup.get("steps", 0),
            "lr": warmup.get("lr", config.warmup.lr),
            "lessons": warmup.get("formats", config.warmup.formats),
            "sides": warmup.get("sides", config.warmup.sides),
            "loaded_from": Path(config.actor.init_weights).name or None,
            "batch": warmup.get("batch_size", config.warmup.batch_size),
            "losses": warmup.get("losses", []),
            "losses_by_format": warmup.get("losses_by_format", {}),
        },
        "train_time_s": summary["train_time_s"],
        "wall_time_s": time.perf_counter() - args.started,
        "untrained": None,  # the untrained actor: `comprl-gym stream --agent hf:MODEL`
        "summary": summary_by_arm,
        "minus_placebo": {
            a: r["minus_placebo"] for a, r in placebo.items() if "minus_placebo" in r
        },
        "shown_own_dungeons_lesson": {
            arm: sum(shown_own(r) for r in records if r["arm"] == arm)
            / max(1, sum(r["arm"] == arm for r in records))
            for arm in summary_by_arm
            if arm != "none"
        },
        "store_sides": {name: verdict_counts(spec, t) for name, t in texts.items()},
        "extractor_batches": [
            record | {"sides": [verdicts.get(int(i)) for i in record["ids"]]}
            for record in batch_log
        ],
        "credit_agreement": credit_agreement(batch_log, verdicts),
        "store_texts": texts,
        "episodes": [
            {k: r.get(k) for k in EPISODE_KEYS}
            | {"experiences": r.get("experiences", []), "steps": r.get("steps")}
            | {"actions": [t["action"] for t in r["turns"]]}
            for r in records
        ],
        "load_average_1min": round(os.getloadavg()[0], 2),
    }
    if args.paired_with:
        other = json.loads(Path(args.paired_with).read_text())["episodes"]
        out["paired_with"] = {
            "file": Path(args.paired_with).name,
            "arm": "own",
            "this_minus_that": compare_runs(records, other, "own"),
        }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="a recipe (configs/memory-*.yaml)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--tasks", type=int, default=64, help="held-out dungeons streamed")
    parser.add_argument("--visits", type=int, default=2, help="visits to each")
    parser.add_argument("--held-out", default="test", help="the held-out pool (test, test_large)")
    parser.add_argument("--arms", default="none,own,oracle", help="arms (comprl-gym stream)")
    parser.add_argument("--paired-with", default="", help="pair the own arm with this file's")
    parser.add_argument("--quick", action="store_true", help="the tiny model: a smoke run")
    parser.add_argument("--keep", default="", help="keep the run and stream folders here")
    parser.add_argument("--out", required=True, help="stem of the .json and .png written")
    args = parser.parse_args()
    args.started = time.perf_counter()
    if args.paired_with and not Path(args.paired_with).is_file():
        parser.error(f"--paired-with: no file {args.paired_with}")
    from comprl_gym.utils import atomic_write_bytes

    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-transfer-"))
    try:
        config, run, stream = train_and_stream(args, work)
        out = result_file(args, config, run, stream)
        stem = Path(args.out)
        stem.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(stem.with_suffix(".json"), (json.dumps(out, indent=1) + "\n").encode())
        shutil.copyfile(stream / "stream.png", stem.with_suffix(".png"))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"wrote {stem.with_suffix('.json')} and .png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
