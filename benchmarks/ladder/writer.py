"""A capable-but-imperfect lesson writer for the memory family (issue 56, item 1).

Complementary RL refines an extractor that already writes usable lessons; the bare stem
extractor does not (after a loss it copies the side walked). This recipe makes one with the
library's own parts: the known-answer ladder's supervised learner
(:func:`comprl_gym.trainers.ladder.climb`) teaches the stem extractor of
``configs/extractor-credit.yaml`` (SmolLM2-135M, LoRA r 16 on the top 8 blocks, lr 2e-3,
16 a step) the memory family's rule on the scripted ``train`` episodes, from a teacher that
is wrong ``--label-noise`` of the time (:func:`~comprl_gym.trainers.ladder.noisy_teacher`). Cross-entropy on such labels is least
when the model names the right side with probability ``1 - label_noise``, so its sampled
lessons are right about that often, while its greedy choice may be right everywhere.

It writes ``assets/memory-writer/writer.pt`` (the LoRA weights, ``extractor.init_weights``
of a config with the same extractor settings, e.g. ``configs/memory-writer.yaml``),
``climb.json`` (the climb: settings, the curve on the probe episodes, the sha256) and
``probe.json`` (``comprl-gym probe --config configs/memory-writer.yaml``: right after a win
and after a loss, sampled, greedy and mean probability, with Wilson intervals).

    python -m benchmarks.ladder.writer                          # ~10 min on 2 cores
    python -m benchmarks.ladder.writer --label-noise 0.25 --updates 40
"""

from __future__ import annotations

import argparse
import subprocess
import time
from pathlib import Path

from benchmarks.common import REPO
from comprl_gym.trainers.config import TrainConfig
from comprl_gym.trainers.ladder import climb
from comprl_gym.utils import atomic_write_json

#: Whose extractor settings the writer is trained with (the ladder's).
LADDER_CONFIG = REPO / "configs" / "extractor-credit.yaml"
#: The config that starts its extractor from the writer (and is probed with it).
WRITER_CONFIG = REPO / "configs" / "memory-writer.yaml"
OUT = REPO / "assets" / "memory-writer"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--label-noise", type=float, default=0.25, help="how often the teacher is wrong"
    )
    parser.add_argument("--updates", type=int, default=40, help="supervised updates of 16")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=OUT, help="the folder written")
    args = parser.parse_args(argv)
    config = TrainConfig.from_yaml(LADDER_CONFIG, [f"seed={args.seed}"])
    writer = TrainConfig.from_yaml(WRITER_CONFIG)
    if (writer.extractor.model, writer.extractor.lora) != (
        config.extractor.model,
        config.extractor.lora,
    ):
        raise SystemExit(f"{WRITER_CONFIG}'s extractor must have {LADDER_CONFIG}'s model and LoRA")
    start = time.perf_counter()

    def show(result) -> None:
        p = result.curve[-1]
        print(
            f"update {p.updates}: greedy {p.greedy_right}/{p.episodes}, P(right) "
            f"{p.mean_p_target:.2f}, by kind {p.greedy_right_by_kind} "
            f"({time.perf_counter() - start:.0f} s)",
            flush=True,
        )

    weights = args.out / "writer.pt"
    result = climb(
        "rule",
        "supervised",
        config.extractor,
        config.experience,
        max_updates=args.updates,
        seed=args.seed,
        stop_when_solved=False,
        progress=show,
        label_noise=args.label_noise,
        save_weights=weights,
    )
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO
    ).stdout.strip()
    atomic_write_json(
        args.out / "climb.json",
        {
            "command": f"python -m benchmarks.ladder.writer --label-noise {args.label_noise} "
            f"--updates {args.updates} --seed {args.seed}",
            "commit": commit,
            "settings_from": str(LADDER_CONFIG.relative_to(REPO)),
            "label_noise": args.label_noise,
            "weights": str(weights.relative_to(REPO))
            if weights.is_relative_to(REPO)
            else str(weights),
            **result.to_dict(),
        },
    )
    subprocess.run(
        ["comprl-gym", "probe", "--config", str(WRITER_CONFIG.relative_to(REPO)),
         "--out", str(args.out / "probe.json")],
        check=True, cwd=REPO,
    )  # fmt: skip
    print(f"writer sha256 {result.weights_sha256}; {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
