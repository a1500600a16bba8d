"""Does the recipe path (configs + ``comprl-gym train`` / ``stream``) play what the old benchmark
played? Both at tiny size, every streamed episode compared.

The **old path** is ``benchmarks/bench_experience_transfer.py`` as committed at ``--ref``
(default ``HEAD``), run with the package as committed there (``git archive``: the old
benchmark imports helpers the library has since moved), ``--quick``. The **new path** is the
thin runner of the working tree (``python -m benchmarks.experience_transfer.run --config
configs/memory-*.yaml``, itself ``comprl-gym train`` then ``comprl-gym stream --run``), the
same settings overridden to the tiny model. Same seeds, same held-out dungeons.

1. **The reader**: 2 steps of the reading warm-up in each path; their per-step losses and the
   largest difference between the two readers' weights. The warm-up moved into the trainer
   (:mod:`comprl_gym.trainers.warmup`) with the actor's optimiser settings (no weight decay,
   gradients clipped at norm 1) where the old one used torch's AdamW defaults (weight decay
   0.01, no clipping), and padded micro-batches where it ran one example at a time; a third
   run, the new path with the old optimiser settings, shows how much of the difference that
   is.
2. **Each trainer** (``--trainers``), from the *old* reader in both paths (so the warm-up's
   numerics do not leak in): one training iteration, then 3 held-out dungeons streamed twice
   with ``none``, ``own`` and ``oracle``. Per episode, (arm, visit, task): the reset and
   sampling seeds, the outcome, every move and the lesson shown; and the training curve.

Writes ``benchmarks/results/stream_equivalence.json``. About 15 minutes on 2 busy cores.

    python scripts/stream_equivalence.py [--trainers static_experience,complementary]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
#: The old benchmark (a file at ``--ref``) and the new runner (a module of the working tree).
BENCH = "benchmarks/bench_experience_transfer.py"
RUNNER = ["-m", "benchmarks.experience_transfer.run"]
#: The settings both paths share: the tiny model, 3 held-out dungeons visited twice.
SMALL = ["--quick", "--tasks", "3", "--visits", "2"]
#: The old benchmark's flags for the committed table's settings (its ``$S``), one iteration.
OLD_METHOD = [
    "--train-tasks", "8", "--iterations", "1", "--lr", "1e-4", "--groups", "4",
    "--lora-layers", "0", "--extractor-format", "stem", "--merge-interval", "0",
    "--extractor-temperature", "1.0", "--extractor-lr", "2e-4", "--untrained-tasks", "0",
    "--threads", "1",
]  # fmt: skip
#: Each trainer's recipe.
CONFIGS = {
    "grpo": "configs/memory-grpo.yaml",
    "static_experience": "configs/memory-static.yaml",
    "complementary": "configs/memory-complementary.yaml",
}
#: What an episode is compared on.
FIELDS = ("reset_seed", "sampling_seed", "won", "actions", "shown")


def run(command: list[str], cwd: Path, pythonpath: Path) -> float:
    """Run ``command`` (a benchmark) with ``pythonpath``'s package; its wall time."""
    env = {**os.environ, "PYTHONPATH": str(pythonpath), "HF_HUB_OFFLINE": "1"}
    env["TRANSFORMERS_OFFLINE"] = "1"
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, *command], cwd=cwd, env=env, capture_output=True, text=True
    )
    if done.returncode:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    return time.perf_counter() - started


def episodes(result: dict[str, Any]) -> dict[tuple, dict[str, Any]]:
    """Each streamed episode by (arm, visit, task): its seeds, outcome, moves, lessons shown."""
    return {
        (e["arm"], e["visit"], e["task_index"]): {
            "reset_seed": e["reset_seed"],
            "sampling_seed": e["sampling_seed"],
            "won": bool(e["won"]),
            "actions": e["actions"],
            "shown": [x.get("content") for x in e.get("experiences") or []],
        }
        for e in result["episodes"]
    }


def compare(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """Episode by episode: how many are identical in each field, and the first differences."""
    a, b = episodes(old), episodes(new)
    shared = sorted(set(a) & set(b))
    out: dict[str, Any] = {
        "episodes_old": len(a),
        "episodes_new": len(b),
        "compared": len(shared),
        "identical": {f: sum(a[k][f] == b[k][f] for k in shared) for f in FIELDS},
        "identical_episodes": sum(a[k] == b[k] for k in shared),
        "first_differences": [
            {"episode": list(k), "old": a[k], "new": b[k]} for k in shared if a[k] != b[k]
        ][:3],
        "training_curve_old": old["training_curve"],
        "training_curve_new": new["training_curve"],
    }
    out["equivalent"] = out["identical_episodes"] == len(shared) == len(a) == len(b)
    return out


def reader_difference(old: Path, new: Path) -> dict[str, Any]:
    """The two readers' weights: the same names, and their largest absolute difference."""
    import torch

    a = torch.load(old, map_location="cpu", weights_only=True)
    b = torch.load(new, map_location="cpu", weights_only=True)
    shared = sorted(set(a) & set(b))
    diffs = [float((a[n].float() - b[n].float()).abs().max()) for n in shared]
    return {
        "weights": len(shared),
        "only_old": len(set(a) - set(b)),
        "only_new": len(set(b) - set(a)),
        "max_abs_difference": max(diffs, default=None),
        "identical": not diffs or max(diffs) == 0.0,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ref", default="HEAD", help="the commit of the old path")
    parser.add_argument("--trainers", default="static_experience,complementary")
    parser.add_argument("--out", default=str(REPO / "benchmarks/results/stream_equivalence.json"))
    args = parser.parse_args()
    trainers = args.trainers.split(",")
    unknown = set(trainers) - set(CONFIGS)
    if unknown:
        parser.error(f"--trainers: unknown {sorted(unknown)}; choose from {sorted(CONFIGS)}")
    commit = subprocess.run(
        ["git", "rev-parse", args.ref], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()
    result: dict[str, Any] = {"old": f"{BENCH} at {commit}", "new": f"{RUNNER[1]} (working tree)"}
    with tempfile.TemporaryDirectory(prefix="stream-equivalence-") as tmp:
        root, old_tree = Path(tmp), Path(tmp) / "old"
        old_tree.mkdir()
        # The old package and benchmark exactly as committed (read from git, nothing checked out).
        archive = subprocess.run(
            ["git", "archive", commit, "comprl_gym", "benchmarks"],
            cwd=REPO,
            capture_output=True,
            check=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(old_tree)], input=archive, check=True)
        # 1. The reader, 2 warm-up steps in each path.
        old_reader, new_keep = root / "old-reader.pt", root / "new-reader"
        seconds = run(
            [BENCH, *SMALL, "--all-with-lessons", "--reading-warmup", "2", "--iterations", "1",
             "--lora-layers", "0", "--untrained-tasks", "0", "--arms", "none,oracle",
             "--save-reader", str(old_reader), "--out", str(root / "old-reader")],
            old_tree, old_tree,
        )  # fmt: skip
        seconds += run(
            [*RUNNER, *SMALL, "--config", "configs/memory-reader.yaml", "--set", "warmup.steps=2",
             "--set", "actor.init_weights=", "--set", "torch_threads=1", "--arms", "none,oracle",
             "--keep", str(new_keep), "--out", str(root / "new-reader")],
            REPO, REPO,
        )  # fmt: skip
        # The same with the old warm-up's optimiser: torch's AdamW weight decay (0.01) and no
        # gradient clipping (the library's warm-up takes the actor's: 0.0 and a norm of 1.0).
        like_old = root / "new-reader-old-optimiser"
        seconds += run(
            [*RUNNER, *SMALL, "--config", "configs/memory-reader.yaml", "--set", "warmup.steps=2",
             "--set", "actor.init_weights=", "--set", "torch_threads=1", "--arms", "none,oracle",
             "--set", "actor.weight_decay=0.01", "--set", "actor.max_grad_norm=0",
             "--keep", str(like_old), "--out", str(root / "new-reader-old-optimiser")],
            REPO, REPO,
        )  # fmt: skip
        losses = {
            name: json.loads((root / f"{name}.json").read_text())["reading_warmup"]["losses"]
            for name in ("old-reader", "new-reader", "new-reader-old-optimiser")
        }
        result["reader"] = {
            "losses_old": losses["old-reader"],
            "losses_new": losses["new-reader"],
            "weights": reader_difference(old_reader, new_keep / "run" / "warmup" / "reader.pt"),
            "losses_new_with_old_optimiser": losses["new-reader-old-optimiser"],
            "weights_new_with_old_optimiser": reader_difference(
                old_reader, like_old / "run" / "warmup" / "reader.pt"
            ),
            "seconds": seconds,
        }
        # 2. Each trainer from the old reader, in both paths.
        result["trainers"] = {}
        for trainer in trainers:
            arms = "none,oracle" if trainer == "grpo" else "none,own,oracle"
            seconds = run(
                [BENCH, *SMALL, *OLD_METHOD, "--trainer", trainer, "--load-reader",
                 str(old_reader), "--arms", arms, "--out", str(root / f"old-{trainer}")],
                old_tree, old_tree,
            )  # fmt: skip
            seconds += run(
                [*RUNNER, *SMALL, "--config", CONFIGS[trainer], "--set", "iterations=1",
                 "--set", f"actor.init_weights={old_reader}", "--set", "torch_threads=1",
                 "--arms", arms, "--out", str(root / f"new-{trainer}")],
                REPO, REPO,
            )  # fmt: skip
            old = json.loads((root / f"old-{trainer}.json").read_text())
            new = json.loads((root / f"new-{trainer}.json").read_text())
            result["trainers"][trainer] = compare(old, new) | {"seconds": seconds}
            print(trainer, {k: result["trainers"][trainer][k] for k in ("compared", "identical")})
    from comprl_gym.utils import atomic_write_text

    out = Path(args.out)
    atomic_write_text(out, json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
