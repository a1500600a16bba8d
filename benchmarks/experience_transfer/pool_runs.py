"""Pool paired runs across seeds: one arm of several runs minus the same arm of their partners,
episode by episode, as one paired comparison.

Each pair is two result files of ``run.py`` beside this file streamed on the same tasks and
seed (``--paired-with``); a seed's episodes are kept apart by keying them on (pair, task), so a
(task, visit) is paired only with its partner run's. Intervals are Newcombe's, p-values
McNemar's exact test (``comprl_gym.evaluation.table.pooled``, which ``comprl-gym table``
pairs each method's deployed arm with).

    python -m benchmarks.experience_transfer.pool_runs --arm own \\
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

from comprl_gym.evaluation.table import load_run, pooled
from comprl_gym.utils import atomic_write_bytes


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
    pairs = [(load_run(a), load_run(b)) for a, b in args.pair]
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
