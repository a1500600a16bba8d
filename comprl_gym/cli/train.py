"""``comprl-gym train`` and ``doctor``: a trainer run from a YAML config, and the config's
models checked before one trains.

Example:
    >>> import argparse
    >>> parser = argparse.ArgumentParser(); sub = parser.add_subparsers()
    >>> add_train(sub)
    >>> parser.parse_args(["train", "--config", "configs/demo.yaml"]).config
    'configs/demo.yaml'
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path
from typing import Any

from comprl_gym.trainers.report import format_results_table

#: Each command's examples, shown at the end of its --help.
EXAMPLES = {
    "train": """examples:
  comprl-gym train --config configs/demo.yaml
  comprl-gym train --config configs/grpo-minihack.yaml --set actor.lr=1e-5 --output-dir runs/g""",
    "doctor": """examples:
  comprl-gym doctor --config configs/extractor-credit.yaml
  comprl-gym doctor --config configs/demo.yaml --set actor.lr=1e-5 --updates 5""",
}


def add_config_arguments(parser: Any) -> None:
    """``--config FILE`` and repeatable ``--set KEY=VALUE``: a TrainConfig and its overrides."""
    parser.add_argument(
        "--config", required=True, help="YAML file of TrainConfig keys (configs/*.yaml)"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key, dotted for nested ones: --set actor.lr=1e-5",
    )


def _cmd_train(args: argparse.Namespace) -> int:
    import time

    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from comprl_gym.trainers import TrainConfig, make_trainer

    config = TrainConfig.from_yaml(args.config, args.set)
    if args.output_dir:
        config.output_dir = args.output_dir
    start = time.perf_counter()
    trainer = make_trainer(config)
    try:
        summary = trainer.train()
    finally:
        trainer.close()
    wall = time.perf_counter() - start
    print(
        f"\n{config.algorithm}: {summary['iterations']} iterations, {summary['rollouts']} rollouts, "
        f"wall time {wall / 60:.1f} min; outputs in {config.output_dir}"
    )
    store = summary.get("experience_store")
    if store:
        print(
            f"experience store: {store['evicted']} lesson(s) evicted over its life "
            f"(max_entries={store['max_entries']}, eviction_policy={store['eviction_policy']})"
        )
    if summary.get("evaluation"):
        temperature = summary.get("eval_temperature", 0.0)
        sampling = "greedy" if not temperature else f"sampled at temperature {temperature}"
        print(
            f"\nEvaluation on the seeds after the training pool ({sampling}; success [95% interval]):\n"
        )
        print(format_results_table(summary))
        print(f"\nLearning curve: {Path(config.output_dir) / 'learning_curve.png'}")
    return 0


def add_train(sub: Any) -> None:
    p = sub.add_parser(
        "train", help="train an LLM agent (GRPO, Complementary RL, baselines) from a YAML config"
    )
    add_config_arguments(p)
    p.add_argument("--output-dir", help="override output_dir")
    p.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    p.set_defaults(func=_cmd_train)


def _cmd_doctor(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from comprl_gym.trainers import TrainConfig
    from comprl_gym.trainers.doctor import diagnose, findings_table

    config = TrainConfig.from_yaml(args.config, args.set)
    findings = diagnose(config, updates=args.updates)
    print(findings_table(findings))
    failed = [f for f in findings if not f.passed]
    if failed:
        print(f"\n{len(failed)} check(s) FAILED: training with this config would not learn:")
        for f in failed:
            print(f"- {f.model}: {f.check}: {f.detail}")
        return 1
    print(f"\nall {len(findings)} checks passed")
    return 0


def add_doctor(sub: Any) -> None:
    p = sub.add_parser(
        "doctor",
        help="check that a config's training would move its models and feed its rollout engine",
        description=(
            "Build each model the config trains (model, LoRA, optimiser, loss, rollout engine) "
            "as training does, train it for a few updates on a known answer, and check that "
            "it has trainable weights, a gradient, weights that move, entropy left, that it "
            "learns the answer, and that the rollout engine serves the pushed weights. Exits 1 "
            "naming the cause when a check fails."
        ),
    )
    add_config_arguments(p)
    p.add_argument(
        "--updates", type=int, default=3, help="known-answer updates per model (default 3)"
    )
    p.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    p.set_defaults(func=_cmd_doctor)
