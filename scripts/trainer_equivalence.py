"""Record or compare a seeded four-iteration run of every trainer: metrics, weights, store texts.

A refactor of ``comprl_gym/trainers`` must not change what a trainer computes. Run
``--record`` before the change and ``--compare`` after it: every metric that does not measure
time, a hash of the final actor and extractor weights and the store's texts must be identical
(tiny model, in-line extraction, no diversification: bit-exact on one machine). Metrics
added after the recording are not compared; options added after it are set to what the
recorded code did.

    python scripts/trainer_equivalence.py --record benchmarks/results/trainer_equivalence.json
    python scripts/trainer_equivalence.py --compare benchmarks/results/trainer_equivalence.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

ALGORITHMS = ["grpo", "complementary", "static_experience", "experience_only"]
#: Metrics that measure time or the machine, not what was computed.
TIMING = ("time_s", "wait", "tokens_per_s", "_s")


def config(output_dir: str, algorithm: str) -> dict:
    return {
        "algorithm": algorithm,
        "seed": 3,
        "env_ids": ["comprl/MiniHack-Room-5x5-v0", "comprl/WebShop-v0"],
        "iterations": 4,
        "groups_per_iteration": 2,
        "group_size": 4,
        "max_episode_steps": 3,
        "history_turns": 1,
        "task_pool": 8,
        "invalid_action_penalty": 0.5,
        "actor": {"model": "tiny", "lr": 1e-2, "max_new_tokens": 4},
        "extractor": {"model": "tiny", "lr": 1e-3, "max_new_tokens": 10},
        "experience": {
            "extractor_format": "plain",
            "inject_top_k": 1,
            "search_and_ask_budget": 1,
            "min_uses": 1,
            "min_quality": 0.0,
            "extractor_batch_size": 2,
            # as recorded: later credit options off (rejected answers were not trained on)
            "train_on_rejected": False,
            "train_cooldown_steps": 0,
            # as recorded: the credit before the reference's became the default (2026-12-06)
            "credit_window": "since_written",
            "max_train_count": 3,
            "train_weight_power": 0.5,
            "merge_interval_steps": 2,
            "async_extraction": False,
            "diversify": False,
        },
        "output_dir": output_dir,
        "eval_tasks": 0,
        "progress": False,
        "tensorboard": False,
        "torch_threads": 1,
    }


def weights_hash(model) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().float().numpy().tobytes())
    return digest.hexdigest()[:16]


def run(algorithm: str) -> dict:
    from comprl_gym.trainers import TrainConfig, make_trainer

    with tempfile.TemporaryDirectory() as tmp:
        trainer = make_trainer(TrainConfig.from_dict(config(tmp, algorithm)))
        try:
            trainer.train()
            metrics = [
                {k: v for k, v in row.items() if k != "time" and not any(t in k for t in TIMING)}
                for row in trainer.metrics.read()
            ]
            result = {"metrics": metrics, "actor": weights_hash(trainer.actor.model)}
            if trainer.extractor is not None:
                result["extractor"] = weights_hash(trainer.extractor.optimizer.model)
                result["store"] = sorted(e.text for e in trainer.manager.experiences())
        finally:
            trainer.close()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--record", metavar="FILE", help="run every trainer and write FILE")
    mode.add_argument("--compare", metavar="FILE", help="run every trainer and compare to FILE")
    parser.add_argument("--algorithms", nargs="*", default=ALGORITHMS)
    args = parser.parse_args()
    results = {algorithm: run(algorithm) for algorithm in args.algorithms}
    if args.record:
        Path(args.record).write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
        print(f"recorded {', '.join(results)} in {args.record}")
        return 0
    recorded = json.loads(Path(args.compare).read_text())
    failures = 0
    for algorithm, result in results.items():
        result = json.loads(json.dumps(result))
        old_rows = recorded.get(algorithm, {}).get("metrics", [])
        # A metric added since the recording has nothing to compare with.
        result["metrics"] = [
            {k: v for k, v in row.items() if k in old}
            for row, old in zip(result.get("metrics", []), old_rows)
        ] + result.get("metrics", [])[len(old_rows) :]
        same = recorded.get(algorithm) == result
        failures += not same
        print(f"{algorithm}: {'identical' if same else 'DIFFERENT'}")
        if not same:
            old, new = recorded.get(algorithm, {}), json.loads(json.dumps(result))
            for key in sorted(set(old) | set(new)):
                if key == "metrics":
                    for i, (a, b) in enumerate(zip(old.get(key, []), new.get(key, []))):
                        for name in sorted(set(a) | set(b)):
                            if a.get(name) != b.get(name):
                                print(
                                    f"  iteration {i + 1} {name}: {a.get(name)!r} -> {b.get(name)!r}"
                                )
                elif old.get(key) != new.get(key):
                    print(f"  {key}: {old.get(key)!r:.200} -> {new.get(key)!r:.200}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
