"""``make demo``'s memory: where its peak resident set goes, and what brings it down.

Two measurements, written into ``benchmarks/results/demo_memory.json`` (``--out``):

* ``--job CMD``: runs a command (``bash scripts/demo.sh``, or its three ``comprl-gym``
  commands) and samples the resident set of its whole process tree every 0.5 s: the peak of
  each process (the training, each stream) and of the tree, and the samples as a CSV beside
  the JSON (``--csv``).
* ``--update``: one actor update as the demo's actor takes it (configs/demo.yaml's actor: the
  reader's LoRA on SmolLM2-135M, micro-batches of 4; 8 sequences of 380-620 tokens with 20
  trained tokens each, about the demo's first update), in a fresh process for each of four
  settings: glibc's default malloc or a fixed 1 MiB mmap threshold (``MALLOC_MMAP_THRESHOLD_``,
  ``MALLOC_TRIM_THRESHOLD_``), and gradient checkpointing off or on. Each reports its peak
  resident set and time, and the four trained adapters are compared bit for bit.

Run:  python -m benchmarks.demo.memory --update
      python -m benchmarks.demo.memory --job "bash scripts/demo.sh" --label after
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import REPO, RESULTS

MALLOC = {"MALLOC_MMAP_THRESHOLD_": "1048576", "MALLOC_TRIM_THRESHOLD_": "1048576"}


def _gib(n_bytes: float) -> float:
    return round(n_bytes / 2**30, 2)


def sample_job(command: str, csv_path: Path | None, every: float = 0.5) -> dict:
    """Run ``command`` in a shell; the peak resident set of each process of its tree and of
    the tree (sum over processes at one instant)."""
    import psutil

    started = time.time()
    proc = subprocess.Popen(command, shell=True, cwd=REPO)
    root = psutil.Process(proc.pid)
    peaks: dict[int, dict] = {}
    tree_peak = 0
    rows = []
    while proc.poll() is None:
        try:
            members = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            break
        total = 0
        for member in members:
            try:
                rss = member.memory_info().rss
                cmd = " ".join(member.cmdline()[1:4])[:100]
            except psutil.Error:
                continue
            total += rss
            seen = peaks.setdefault(member.pid, {"command": cmd, "peak_rss_gib": 0.0})
            seen["peak_rss_gib"] = max(seen["peak_rss_gib"], _gib(rss))
            if rss > 200 * 2**20:
                rows.append((round(time.time() - started, 1), member.pid, cmd, _gib(rss)))
        tree_peak = max(tree_peak, total)
        time.sleep(every)
    if csv_path is not None:
        with open(csv_path, "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["t_s", "pid", "command", "rss_gib"])
            writer.writerows(rows)
    big = [p for p in peaks.values() if p["peak_rss_gib"] >= 0.5]
    return {
        "command": command,
        "returncode": proc.wait(),
        "wall_time_s": round(time.time() - started, 1),
        "processes": big,
        "largest_process_gib": max((p["peak_rss_gib"] for p in big), default=0.0),
        "tree_peak_gib": _gib(tree_peak),
        # ru_maxrss of the waited-for descendants (what demo/run.py reports), in KiB.
        "ru_maxrss_children_gib": _gib(
            resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
        ),
    }


def one_update(checkpointing: bool, weights_out: str, samples: int = 8) -> dict:
    """One actor update as configs/demo.yaml's actor (run in a child process)."""
    import torch

    from comprl_gym.trainers import TrainConfig
    from comprl_gym.trainers.losses import ClippedPG
    from comprl_gym.trainers.policy import PolicyOptimizer, TrainSample

    settings = TrainConfig.from_yaml(REPO / "configs" / "demo.yaml").actor
    settings.gradient_checkpointing = checkpointing
    optimizer = PolicyOptimizer.from_settings(settings, "actor", loss=ClippedPG())
    rng = random.Random(0)
    batch = []
    for i in range(samples):
        length = rng.randint(380, 620)
        ids = [rng.randrange(100, 40000) for _ in range(length)]
        mask = [0] * length
        for turn in range(5):  # 5 replies of 4 tokens, as a 5-step episode
            end = length * (turn + 1) // 5
            mask[end - 4 : end] = [1] * 4
        batch.append(TrainSample(ids, mask, advantage=1.0 if i % 2 else -0.5))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    started = time.perf_counter()
    stats = optimizer.update(batch)
    elapsed = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    torch.save(optimizer.trainable_weights(), weights_out)
    return {
        "peak_before_update_gib": _gib(before),
        "peak_gib": _gib(peak),
        "update_s": round(elapsed, 1),
        "seq_tokens": stats["seq_tokens"],
        "grad_norm": stats["grad_norm"],
    }


def compare_updates() -> dict:
    import torch

    runs = {}
    weights = {}
    with tempfile.TemporaryDirectory() as work:
        for malloc in ("default", "mmap_1MiB"):
            for checkpointing in (False, True):
                name = f"malloc={malloc},gradient_checkpointing={checkpointing}"
                out = os.path.join(work, f"{len(runs)}.pt")
                env = {**os.environ, "PYTHONPATH": str(REPO)}
                for key in MALLOC:
                    env.pop(key, None)
                if malloc != "default":
                    env.update(MALLOC)
                code = (
                    "import json; from benchmarks.demo.memory import one_update; "
                    f"print('RESULT', json.dumps(one_update({checkpointing}, {out!r})))"
                )
                done = subprocess.run(
                    [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True
                )
                line = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
                if not line:
                    raise SystemExit(f"{name} failed:\n{done.stderr[-3000:]}")
                runs[name] = json.loads(line[-1][len("RESULT ") :])
                weights[name] = torch.load(out)
                print(name, runs[name], flush=True)
    first = next(iter(weights.values()))
    same = all(
        all(torch.equal(first[k], other[k]) for k in first) and first.keys() == other.keys()
        for other in weights.values()
    )
    return {"settings": runs, "trained_adapters_bitwise_equal": same}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--job", help="a command to run and sample (e.g. 'bash scripts/demo.sh')")
    parser.add_argument("--label", default="job", help="its key in the JSON's 'jobs'")
    parser.add_argument("--csv", type=Path, help="write the job's samples here")
    parser.add_argument("--update", action="store_true", help="the one-update comparison")
    parser.add_argument("--out", type=Path, default=RESULTS / "demo_memory.json")
    args = parser.parse_args(argv)
    result = json.loads(args.out.read_text()) if args.out.exists() else {}
    machine = {"cores": os.cpu_count(), "load_average_before": list(os.getloadavg())}
    if args.update:
        result["update"] = {**compare_updates(), "machine": machine}
    if args.job:
        job = sample_job(args.job, args.csv)
        result.setdefault("jobs", {})[args.label] = {**job, "machine": machine}
    with open(args.out, "w") as handle:
        json.dump(result, handle, indent=2)
        handle.write("\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
