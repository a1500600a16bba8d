"""How long one step of the reading warm-up takes: the old per-example loop vs the batched step.

The experience-transfer benchmark's warm-up (``reading_warmup`` before issue 43) took one
forward pass per example, the LM head over every prompt position, a plain AdamW beside the
actor's optimiser. The library's warm-up (:mod:`comprl_gym.trainers.warmup`) takes one
:class:`~comprl_gym.trainers.policy.PolicyOptimizer` step of cross-entropy on padded
micro-batches (one forward pass each, the LM head on the labelled positions only). This
times both on the same batch of 8 examples (``random.Random(seed).sample`` of the memory
family's training examples, formats oracle, exemplar and none, both sides, as the warm-up
draws them), on SmolLM2 with LoRA on the top 8 blocks (r 16, alpha 32, as the benchmark
trained), alternating old and new so both see the same load. Each timed step is a whole
optimiser step (forward, backward, clipping where the library clips, AdamW); the trained
weights are put back after each, so every repetition starts from the same weights and both
methods' losses on the batch can be compared (they must agree: the same loss, computed twice).

Writes ``benchmarks/results/warmup_step_time.json``: per method every repetition's seconds,
the median, the ratio old / new, the batch's prompt lengths, torch threads and the machine's
load average before and after (the box is shared; the load says how much).

    python -m benchmarks.speed.warmup [--repeats 5] [--threads 2] [--micro-batch 4]

What it found on 2 CPU cores (the committed file, a quiet box: load 0.6 at the start): 10.5 s
per step for the loop, 8.0 s batched, 1.32x; on the same box busy with other runs (load 5-9)
84 s against 69 s, 1.22x; one micro-batch of 8 (``--micro-batch 8``) was no faster than two
of 4. On a CPU the step is bound by arithmetic, not by the number of forward passes: batching
saves only the LM head over every prompt position, forward and backward (estimated from
SmolLM2's shapes on these ~380-token prompts: about 43 of the loop's ~145 GFLOP per example,
so 1.4x at best). The 4x that issue 43 hoped for is not there on 2 cores; the per-call
overhead that batching removes matters on a GPU (not measured here: this task had no device).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

from benchmarks.common import RESULTS

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ENV_ID = "comprl/Memory-Fork-v0"
#: The memory env as the experience-transfer benchmark played it.
ENV_KWARGS = {"observation_mode": "compact", "branch_length": 2, "moves": "open"}
LORA = {"enabled": True, "r": 16, "alpha": 32, "top_layers": 8}


def old_step(model, optimizer, batch) -> float:
    """The benchmark's old warm-up step, as ``reading_warmup`` wrote it: one forward pass per
    example on its prompt and answer, the mean of the two labelled tokens' ``-log p``, the
    batch's mean, one backward pass, a plain AdamW step (no gradient clipping)."""
    import torch

    loss = torch.zeros(())
    for sample in batch:
        *prompt, answer, end = sample.input_ids
        ids = torch.tensor([[*prompt, answer]])
        logp = model(ids).logits[0, -2:].float().log_softmax(-1)
        loss = loss + (-(logp[0, answer] + logp[1, end]) / 2) / len(batch)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return float(loss)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed steps of each method")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--model", default="smollm2", help="smollm2 (default) or tiny")
    parser.add_argument(
        "--micro-batch", type=int, default=4, help="actor.micro_batch_size of the new step"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(RESULTS / "warmup_step_time.json"))
    args = parser.parse_args()

    import json

    import torch

    from comprl_gym.agents.prompts import PromptConfig
    from comprl_gym.trainers.config import TrainConfig
    from comprl_gym.trainers.policy import PolicyOptimizer
    from comprl_gym.trainers.warmup import reading_examples, reading_samples, warmup_optimizer
    from comprl_gym.utils import atomic_write_bytes

    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()
    config = TrainConfig.from_dict(
        {
            "seed": args.seed,
            "env_ids": [ENV_ID],
            "env_kwargs": {ENV_ID: ENV_KWARGS},
            "conversation": "multi_turn",
            "actor": {
                "model": args.model,
                "lr": 1e-4,
                "micro_batch_size": args.micro_batch,
                # (the tiny model has 2 blocks: LoRA on all of them)
                "lora": LORA if args.model == "smollm2" else {**LORA, "top_layers": 0},
            },
            "warmup": {"steps": 1, "formats": ["oracle", "exemplar", "none"], "sides": "both"},
        }
    )
    actor = PolicyOptimizer.from_settings(config.actor, "actor")

    samples = reading_samples(
        config, reading_examples(config), actor.tokenizer, PromptConfig("multi_turn")
    )
    batch = random.Random(args.seed).sample(samples, config.warmup.batch_size)
    start_weights = actor.trainable_weights()

    def restore() -> None:
        with torch.no_grad():
            for name, param in actor.model.named_parameters():
                if name in start_weights:
                    param.copy_(start_weights[name])

    params = [p for p in actor.model.parameters() if p.requires_grad]
    old_optimizer = torch.optim.AdamW(params, lr=config.warmup.lr)
    new_optimizer = warmup_optimizer(actor, config.warmup.lr)
    actor.model.train()
    times: dict[str, list[float]] = {"per_example_loop": [], "batched": []}
    losses: dict[str, list[float]] = {"per_example_loop": [], "batched": []}
    for repeat in range(args.repeats):
        for method in (
            ("per_example_loop", "batched") if repeat % 2 == 0 else ("batched", "per_example_loop")
        ):
            restore()
            began = time.perf_counter()
            if method == "batched":
                loss = new_optimizer.update(batch)["loss"]
            else:
                loss = old_step(actor.model, old_optimizer, batch)
            times[method].append(round(time.perf_counter() - began, 3))
            losses[method].append(round(loss, 6))
            print(
                f"{repeat + 1}/{args.repeats} {method}: {times[method][-1]:.2f} s, loss {loss:.4f}"
            )
            sys.stdout.flush()
    medians = {method: statistics.median(values) for method, values in times.items()}
    result = {
        "benchmark": "warmup_step_time",
        "model": args.model,
        "lora": config.actor.lora.__dict__,
        "micro_batch_size": args.micro_batch,
        "batch_size": config.warmup.batch_size,
        "prompt_tokens": [len(s.input_ids) - 2 for s in batch],
        "formats": [s.meta["format"] for s in batch],
        "torch_threads": args.threads,
        "cpu_count": os.cpu_count(),
        "repeats": args.repeats,
        "seconds": times,
        "median_s": medians,
        "speedup": round(medians["per_example_loop"] / medians["batched"], 2),
        # The same batch and starting weights: both methods compute the same loss.
        "losses": losses,
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out, (json.dumps(result, indent=1) + "\n").encode())
    print(
        f"per-example loop {medians['per_example_loop']:.2f} s, batched "
        f"{medians['batched']:.2f} s: {result['speedup']}x; wrote {out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
