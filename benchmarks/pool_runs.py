"""Pool paired runs across seeds: one arm of several runs minus the same arm of their partners,
episode by episode, as one paired comparison.

Each pair is two result files of ``bench_experience_transfer.py`` streamed on the same tasks
and seed (``--paired-with``); a seed's episodes are kept apart by keying them on (pair, task),
so a (task, visit) is paired only with its partner run's. Intervals are Newcombe's, p-values
McNemar's exact test (``comprl_gym.evaluation.streaming.compare_runs``).

    python benchmarks/pool_runs.py --arm own \\
        --pair benchmarks/results/extractor_memory_stem_complementary.json \\
               benchmarks/results/extractor_memory_stem_static.json \\
        --pair benchmarks/results/extractor_memory_stem_complementary_seed1.json \\
               benchmarks/results/extractor_memory_stem_static_seed1.json \\
        --out benchmarks/results/extractor_memory_stem_pooled.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from comprl_gym.evaluation.streaming import compare_runs
from comprl_gym.utils import atomic_write_bytes


def keyed(result: dict[str, Any], key: Any, arm: str | None = None) -> list[dict[str, Any]]:
    """The run's episodes (of ``arm``, or all), each task index made ``(key, task)``, so that
    several runs pool without one run's task overwriting another's of the same index.

    Example:
        >>> keyed({"episodes": [{"arm": "own", "task_index": 3}]}, 1)
        [{'arm': 'own', 'task_index': (1, 3)}]
    """
    return [
        dict(e, task_index=(key, e["task_index"]))
        for e in result["episodes"]
        if arm is None or e["arm"] == arm
    ]


def pooled(pairs: list[tuple[dict[str, Any], dict[str, Any]]], arm: str) -> dict[str, Any]:
    """``arm`` of each pair's first run minus its second, pooled over the pairs, per visit.

    Example (two pairs of one task each; visit 1 won 1-0 in the first pair, 0-0 in the second):
        >>> def run(*won):
        ...     return {"episodes": [{"arm": "own", "visit": 1, "task_index": 0, "won": w,
        ...                           "reset_seed": 0, "sampling_seed": 0} for w in won]}
        >>> out = pooled([(run(1), run(0)), (run(0), run(0))], "own")
        >>> out["1"]["pairs"], out["1"]["difference"]["mean"]
        (2, 0.5)
    """
    mine = [e for k, (this, _) in enumerate(pairs) for e in keyed(this, k, arm)]
    theirs = [e for k, (_, that) in enumerate(pairs) for e in keyed(that, k, arm)]
    return compare_runs(mine, theirs, arm)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--pair",
        nargs=2,
        action="append",
        required=True,
        metavar=("THIS", "THAT"),
        help="two result files on the same tasks and seed (repeat per seed)",
    )
    parser.add_argument("--arm", default="own", help="the arm to compare (default own)")
    parser.add_argument("--out", default="", help="write the pooled comparison here (JSON)")
    args = parser.parse_args()
    pairs = [
        (json.loads(Path(a).read_text()), json.loads(Path(b).read_text())) for a, b in args.pair
    ]
    result = {
        "arm": args.arm,
        "pairs": [[Path(a).name, Path(b).name] for a, b in args.pair],
        "this_minus_that": pooled(pairs, args.arm),
    }
    for visit, cell in result["this_minus_that"].items():
        d = cell["difference"]
        print(
            f"{args.arm}, visit {visit}: {d['mean']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}] "
            f"over {cell['pairs']} pairs, McNemar p {cell['mcnemar_p']:.3f}"
        )
    if args.out:
        atomic_write_bytes(Path(args.out), (json.dumps(result, indent=1) + "\n").encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
