"""GRPO on the corridor, measured: does ``configs/corridor.yaml`` (the main job until issue 45
moved ``make demo`` to the memory family) show the actor learning?

Runs ``comprl-gym train --config configs/corridor.yaml`` from scratch (or reads a finished run with
``--from-run``) and writes ``benchmarks/results/corridor.json`` and ``corridor.png``:

* per env id: the held-out success before training, after training without and with
  experience (Wilson 95% intervals, ``episodes`` each), and the paired differences (Newcombe's
  interval; the same held-out tasks in the same order): ``difference_ci_low`` /
  ``difference_ci_high`` are trained-with-experience minus untrained, the issue's goal being an
  interval that excludes 0;
* where the wall time went: the evaluations, the training iterations and, summed over the
  iterations, rollouts, actor updates, weight pushes and the actor's waits for experience;
* the per-iteration training success of each half (with / without experience);
* the machine: cores, load average before and after (the figures are from a shared box).

Run:  python -m benchmarks.corridor.run                       # about 15 min on 2 cores
      python -m benchmarks.corridor.run --from-run runs/corridor  # a finished corridor run
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import REPO, RESULTS


def _phase_totals(metrics: list[dict]) -> dict[str, float]:
    """Seconds spent in each part of the training iterations, summed over iterations."""
    keys = {
        "rollouts_s": "rollout_time_s",
        "actor_updates_s": "actor/update_time_s",
        "weight_push_s": "wait/weight_push",
        "actor_wait_for_experience_s": "actor_wait_s",
        "iterations_s": "iteration_time_s",
    }
    return {name: round(sum(m.get(key, 0.0) for m in metrics), 1) for name, key in keys.items()}


def _cell(result: dict) -> dict:
    """One evaluation row: its rate, Wilson bounds and mean episode length."""
    return {
        "success": result["success"],
        "ci_low": result["success_ci"]["low"],
        "ci_high": result["success_ci"]["high"],
        "mean_steps": result["steps"],
    }


def summarise(
    run_dir: Path, wall_s: float | None, load: dict[str, list[float]], config: dict
) -> dict:
    from comprl_gym.trainers.run import Run

    run = Run(run_dir)
    summary, metrics = run.summary, run.metrics
    envs = {}
    for env_id, row in summary["evaluation"].items():
        before = summary["evaluation_before"][env_id]["without_experience"]
        comparison = summary["comparison"][env_id]
        with_exp = comparison["with_experience"]

        envs[env_id] = {
            "episodes": before["episodes"],
            "before_training": _cell(before),
            "after_without_experience": _cell(row["without_experience"]),
            "after_with_experience": _cell(row["with_experience"]),
            "difference": with_exp["mean"],
            "difference_ci_low": with_exp["low"],
            "difference_ci_high": with_exp["high"],
            "difference_excludes_zero": bool(with_exp["low"] > 0 or with_exp["high"] < 0),
            "without_experience_minus_before": comparison["without_experience"],
            "with_minus_without_experience": row["with_experience"].get("difference"),
        }
    return {
        "command": "comprl-gym train --config configs/corridor.yaml",
        "algorithm": summary["algorithm"],
        "iterations": summary["iterations"],
        "training_rollouts": summary["rollouts"],
        "eval_temperature": summary["eval_temperature"],
        "interval": "Wilson 95% for rates; Newcombe's paired 95% for differences",
        "envs": envs,
        "wall_time_s": None if wall_s is None else round(wall_s, 1),
        "times_s": {k: round(v, 1) for k, v in summary.get("times", {}).items()},
        "training_phases_s": _phase_totals(metrics),
        "training_success": [
            {
                "iteration": m["step"],
                "all": m["success"],
                "with_experience": m.get("with_experience/success"),
                "without_experience": m.get("without_experience/success"),
                "actor_samples": m.get("actor/samples"),
            }
            for m in metrics
        ],
        "store_size": metrics[-1].get("store_size") if metrics else None,
        "machine": {"cores": os.cpu_count(), "load_average": load},
        "config": config,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--config",
        default=str(REPO / "configs" / "corridor.yaml"),
        help="the corridor's YAML config",
    )
    parser.add_argument("--from-run", type=Path, help="summarise this finished run; train nothing")
    parser.add_argument(
        "--out", type=Path, default=RESULTS / "corridor.json", help="the JSON (and .png beside it)"
    )
    args = parser.parse_args(argv)
    load = {"before": list(os.getloadavg())}
    wall = None
    if args.from_run:
        run_dir = args.from_run
    else:
        run_dir = Path(tempfile.mkdtemp(prefix="bench-corridor-"))
        command = [
            sys.executable,
            "-m",
            "comprl_gym.cli",
            "train",
            "--config",
            args.config,
            "--output-dir",
            str(run_dir),
            "--set",
            "resume=false",
        ]
        env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        start = time.perf_counter()
        subprocess.run(command, check=True, env=env)
        wall = time.perf_counter() - start
    load["after"] = list(os.getloadavg())
    from comprl_gym.trainers import TrainConfig

    config = TrainConfig.from_yaml(args.config).to_dict()
    result = summarise(run_dir, wall, load, config)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    curve = run_dir / "learning_curve.png"
    if curve.exists():
        shutil.copyfile(curve, args.out.with_suffix(".png"))
    for env_id, row in result["envs"].items():
        print(
            f"{env_id}: {row['episodes']} episodes; before {row['before_training']['success']:.2f}, "
            f"after without {row['after_without_experience']['success']:.2f}, "
            f"after with {row['after_with_experience']['success']:.2f}; with - before "
            f"{row['difference']:+.2f} [{row['difference_ci_low']:+.2f}, "
            f"{row['difference_ci_high']:+.2f}]"
        )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
