"""``make demo``, measured: does the main job show experience at work, in about 15 minutes?

Runs ``make demo`` (``scripts/demo.sh``: the install, a short Complementary RL run on the memory
family from the committed reader, and ``comprl-gym stream`` on held-out dungeons before and
after that training) with its wall time and peak memory, or reads a finished one
(``--from-run``), and writes ``benchmarks/results/demo.json`` with ``demo.png`` (success by
visit per arm, after training), ``demo_before.png`` (before) and ``demo_learning_curve.png``:

* ``before`` and ``after``: each stream's ``streaming``, ``versus``, ``shown_verdicts`` and
  ``store_verdicts``, as ``comprl-gym stream`` printed them (``scripts/update_docs.py``
  renders the README's demo tables from these keys with the same functions, so the README
  quotes what a run prints), and its provenance (every loaded weight file's hash);
* ``after_minus_before``: per arm, the trained run minus its starting point, paired episode by
  episode (the two streams share tasks, visits and seeds);
* ``training``: per iteration, the actor's success with and without lessons, the extractor's
  metrics and what its store's lessons said (the family's judge);
* ``reader`` (path, bytes, sha256), ``wall_time_s``, ``peak_rss_gib`` (the largest process),
  ``machine`` (cores, load average before and after: the figures are from a shared box).

Run:  python -m benchmarks.demo.run                   # runs make demo (~8 min on 2 cores)
      python -m benchmarks.demo.run --from-run runs/demo
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import time
from collections import Counter
from pathlib import Path

from benchmarks.common import REPO, RESULTS
from comprl_gym.evaluation.provenance import file_sha256
from comprl_gym.evaluation.stream import compare_runs, stream_result
from comprl_gym.trainers.run import Run
from comprl_gym.utils import atomic_write_json

READER = REPO / "assets" / "memory-reader" / "reader.pt"
#: What the README's tables need from each stream's summary.json.
STREAM_KEYS = ("streaming", "versus", "shown_verdicts", "store_verdicts")


def _training(run_dir: Path) -> list[dict]:
    """Per iteration: success with and without lessons, the extractor's and the store's logs."""
    metrics = Run(run_dir).metrics
    keep = ("extractor/", "store/memory/", "probe/")
    return [
        {
            "iteration": m["step"],
            "success": m.get("success"),
            "with_experience": m.get("with_experience/success"),
            "without_experience": m.get("without_experience/success"),
            "iteration_time_s": m.get("iteration_time_s"),
            **{k: v for k, v in m.items() if k.startswith(keep)},
        }
        for m in metrics
        if "success" in m
    ]


def _stream(folder: Path) -> dict:
    return {
        "agent": Run(folder).config.agent,
        **stream_result(folder, ("stream", *STREAM_KEYS)),
    }


def summarise(run_dir: Path, streams: dict[str, Path]) -> dict:
    before = list(Run(streams["before"]).episodes())
    after = list(Run(streams["after"]).episodes())
    arms = list(dict.fromkeys(r["arm"] for r in after))
    return {
        "command": "make demo",
        "config": "configs/demo.yaml",
        "interval": "Wilson 95% for rates; Newcombe's paired 95% and McNemar's exact p for "
        "differences",
        **{name: _stream(folder) for name, folder in streams.items()},
        "after_minus_before": {arm: compare_runs(after, before, arm) for arm in arms},
        # Where the lesson-free actor walks first at the fork, before and after training.
        "first_moves_without_lessons": {
            name: dict(Counter(r["turns"][0]["action"] for r in rs if r["arm"] == "none"))
            for name, rs in (("before", before), ("after", after))
        },
        "training": _training(run_dir),
        "reader": {
            "path": READER.relative_to(REPO).as_posix(),
            "bytes": READER.stat().st_size,
            "sha256": file_sha256(READER),
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--from-run", type=Path, help="a finished make demo's training run")
    parser.add_argument(
        "--streams", type=Path, default=REPO / "runs", help="where demo-stream-*/ are"
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "demo.json")
    args = parser.parse_args(argv)
    load = {"before": list(os.getloadavg())}
    wall = peak = None
    run_dir = args.from_run or REPO / "runs" / "demo"
    if args.from_run is None:
        if run_dir.exists():
            raise SystemExit(f"{run_dir} exists: move it away to time make demo from scratch")
        start = time.perf_counter()
        subprocess.run(["make", "demo"], check=True, cwd=REPO)
        wall = time.perf_counter() - start
        # ru_maxrss of waited-for descendants: the largest single process, in KiB.
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
    load["after"] = list(os.getloadavg())
    streams = {name: args.streams / f"demo-stream-{name}" for name in ("before", "after")}
    result = summarise(run_dir, streams)
    result["wall_time_s"] = None if wall is None else round(wall, 1)
    result["peak_rss_gib"] = None if peak is None else round(peak, 2)
    result["machine"] = {"cores": os.cpu_count(), "load_average": load}
    atomic_write_json(args.out, result)
    shutil.copyfile(streams["after"] / "stream.png", args.out.with_suffix(".png"))
    shutil.copyfile(streams["before"] / "stream.png", args.out.with_name("demo_before.png"))
    curve = run_dir / "learning_curve.png"
    if curve.exists():
        shutil.copyfile(curve, args.out.with_name(args.out.stem + "_learning_curve.png"))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
