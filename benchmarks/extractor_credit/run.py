"""Which credit rule gives the extractor a correctly signed gradient? Measured on real episodes.

The memory family knows the truth about a lesson: for each held-out dungeon the oracle lesson
is right, the inverted lesson wrong and the placebo says nothing. The streaming run of
``benchmarks/experience_transfer/run.py`` played every dungeon with each of them (and with
none), on common random numbers, with the trained actor. Here each (dungeon, lesson) is one
extractor generation whose uses are that arm's episodes on that dungeon, and extractor batches
of ``--batch`` generations are drawn at random from the pool. For each batch and rule:

* ``batch`` (the reference): ``r`` = mean of +1/-1 over the generation's uses, advantage
  ``r - mean(r over the batch)``;
* ``paired``: ``r`` = mean over its uses of (outcome - the no-lesson episode's outcome on the
  same dungeon and visit), advantage ``r``.

Reported per rule: the fraction of batches whose gradient is nonzero (some advantage is not 0)
and the sign agreement with the truth: over the pairs of a batch whose lessons the truth
orders (right > none-informative > wrong), the fraction the advantages order the same way
(ties count half). Writes ``benchmarks/results/extractor_credit.json``.

    python -m benchmarks.extractor_credit.run [--batches 2000] [--batch 8]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import defaultdict
from pathlib import Path

from benchmarks.common import RESULTS
from comprl_gym.trainers.credit import CREDIT_RULES, outcome, paired_outcome, rule_advantages

#: The truth's order of the lessons (higher is better).
TRUTH = {"oracle": 1, "placebo": 0, "inverted": -1}


def generations(episodes: list[dict]) -> list[dict]:
    """One generation per (arm, dungeon): its uses' outcomes and paired outcomes."""
    none = {
        (e["task_index"], e["visit"]): outcome(e["won"])
        for e in episodes
        if e["arm"] == "none" and "visit" in e
    }
    uses: dict[tuple[str, int], list[tuple[float, float]]] = defaultdict(list)
    for e in episodes:
        key = (e["task_index"], e["visit"])
        if e["arm"] in TRUTH and key in none:
            uses[(e["arm"], e["task_index"])].append(
                (outcome(e["won"]), paired_outcome(e["won"], [none[key]]))
            )
    return [
        {
            "arm": arm,
            "task": task,
            "truth": TRUTH[arm],
            "r_batch": sum(o for o, _ in pairs) / len(pairs),
            "r_paired": sum(p for _, p in pairs) / len(pairs),
        }
        for (arm, task), pairs in sorted(uses.items())
    ]


def measure(pool: list[dict], rule: str, batches: int, size: int, seed: int) -> dict:
    rng = random.Random(seed)
    nonzero = agree = ordered = 0.0
    for _ in range(batches):
        batch = rng.sample(pool, size)
        advantages = rule_advantages([g[f"r_{rule}"] for g in batch], rule)
        nonzero += any(a != 0 for a in advantages)
        for i in range(size):
            for j in range(i + 1, size):
                if batch[i]["truth"] == batch[j]["truth"]:
                    continue
                ordered += 1
                better = i if batch[i]["truth"] > batch[j]["truth"] else j
                worse = j if better == i else i
                if advantages[better] > advantages[worse]:
                    agree += 1
                elif advantages[better] == advantages[worse]:
                    agree += 0.5
    return {
        "batches_with_gradient": nonzero / batches,
        "sign_agreement": agree / ordered if ordered else None,
        "ordered_pairs": int(ordered),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", default=str(RESULTS / "experience_transfer.json"))
    parser.add_argument("--batches", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=8, help="extractor batch size")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(RESULTS / "extractor_credit.json"))
    args = parser.parse_args()
    source = json.loads(Path(args.source).read_text())
    # The trained actor's streamed episodes: the list ends with them (the untrained actor's,
    # played first, come before).
    episodes = source["episodes"]
    pool = generations(episodes[len(episodes) - _streamed_count(source) :])
    result = {
        "source": Path(args.source).name,
        "generations": len(pool),
        "batch": args.batch,
        "batches": args.batches,
        "rules": {
            rule: measure(pool, rule, args.batches, args.batch, args.seed) for rule in CREDIT_RULES
        },
        "mean_r": {
            arm: {
                rule: sum(g[f"r_{rule}"] for g in pool if g["arm"] == arm)
                / max(1, sum(1 for g in pool if g["arm"] == arm))
                for rule in CREDIT_RULES
            }
            for arm in TRUTH
        },
    }
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    for rule, row in result["rules"].items():
        print(
            f"{rule:7s} gradient in {row['batches_with_gradient']:.2f} of batches, "
            f"sign agreement {row['sign_agreement']:.2f} over {row['ordered_pairs']} pairs"
        )
    return 0


def _streamed_count(source: dict) -> int:
    """How many of the episodes are the streamed ones (after the untrained actor's)."""
    return sum(row["visits"]["all"]["episodes"] for row in source["summary"].values())


if __name__ == "__main__":
    sys.exit(main())
