"""Does a reading warm-up teach the landmark rule? Its training loss and held-out first moves.

The rule reader's warm-up (``configs/landmark-reader.yaml``) left the rule's loss at a coin's.
This takes the warm-up's own steps (:func:`~comprl_gym.trainers.warmup.reading_examples`,
:func:`~comprl_gym.trainers.warmup.reading_samples`,
:func:`~comprl_gym.trainers.warmup.warmup_optimizer`, the same ``random.Random(seed).sample``
batches as :func:`~comprl_gym.trainers.warmup.run_warmup`) under ``--set`` overrides of that
config, and every ``--eval-every`` steps scores the actor's **greedy first move** on the 64
held-out ``test`` dungeons: the most likely first token after the prompt's "Action number: "
prefill, read as the numbered action, with the rule, with its inversion and with no lesson.
A reader of the rule goes to the landmark's side with the rule and to the other side with the
inversion; the blind prompt shows what the actor does without a lesson.

    python -m benchmarks.landmark_rule.warmup_check --name ladder_recipe \\
        --set warmup.lr=2e-3 --set warmup.batch_size=16 --set warmup.steps=40

Each call adds (or replaces) one entry of ``benchmarks/results/landmark_warmup.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

from benchmarks.common import REPO, RESULTS  # noqa: E402
from comprl_gym.agents.prompts import PromptConfig  # noqa: E402
from comprl_gym.envs.memory import dungeon  # noqa: E402
from comprl_gym.seeding import seed_everything  # noqa: E402
from comprl_gym.trainers.config import TrainConfig, apply_overrides  # noqa: E402
from comprl_gym.trainers.policy import PolicyOptimizer  # noqa: E402
from comprl_gym.trainers.warmup import (  # noqa: E402
    draw_batch,
    next_token_logits,
    reading_examples,
    reading_samples,
    warmup_optimizer,
)
from comprl_gym.utils import atomic_write_json  # noqa: E402

CONFIG = REPO / "configs" / "landmark-reader.yaml"
HELD_OUT = "test"
#: Held-out arms: the lesson format the prompt is built from and the side it is written for
#: (``landmark``: the rule itself; ``other``: its inversion; ``none``: no lesson).
ARMS = ("rule", "inverted_rule", "none")


def held_out_samples(config: TrainConfig, tokenizer, prompt: PromptConfig) -> dict[str, list]:
    """Per arm, the held-out dungeons' first prompts (as the warm-up builds them, up to the
    answer) and the landmark's side: ``(prompt ids, side)``. Raises ``ValueError`` unless every
    prompt lists east as action 1 and west as action 2."""
    held = TrainConfig.from_dict(config.to_dict())
    held.warmup.split = HELD_OUT
    held.warmup.formats = ["rule", "none"]
    held.warmup.sides = "both"
    examples = reading_examples(held)
    samples = reading_samples(held, examples, tokenizer, prompt)
    out: dict[str, list] = {arm: [] for arm in ARMS}
    seen: set[str] = set()
    for (_, example), sample in zip(examples, samples):
        side = dungeon(example.task_id).side
        if example.format == "none":
            if example.task_id in seen:
                continue  # the blind prompt is the same for both labels
            seen.add(example.task_id)
            arm = "none"
        else:
            arm = "rule" if example.answer == side else "inverted_rule"
        cut = sample.action_mask.index(1)
        # The prompts list east as action 1 and west as action 2 (first_moves reads them so).
        label = tokenizer.decode(sample.input_ids[cut : cut + 1]).strip()
        if label != {"east": "1", "west": "2"}[example.answer]:
            raise ValueError(f"{example.task_id}: {example.answer} is action {label}")
        out[arm].append((sample.input_ids[:cut], side))
    return out


def first_moves(
    actor: PolicyOptimizer, held: dict[str, list], arms: tuple[str, ...] = ARMS
) -> dict[str, dict]:
    """Per arm, where the greedy first move goes: the landmark's side, the other side, or
    anything else (another number, another token); and how many went east (half the held-out
    dungeons' landmarks are east: an actor that ignores the landmark scores about half)."""
    tokenizer = actor.tokenizer
    [one], [two] = (tokenizer(n, add_special_tokens=False)["input_ids"] for n in "12")
    number = {one: "east", two: "west"}
    result = {}
    for arm in arms:
        items = held[arm]
        counts = {"landmark_side": 0, "other_side": 0, "other": 0}
        east = 0
        logits = next_token_logits(actor.model, [ids for ids, _ in items])
        for row, (_, side) in zip(logits, items):
            move = number.get(int(row.argmax()))
            key = "landmark_side" if move == side else "other_side" if move else "other"
            counts[key] += 1
            east += move == "east"
        result[arm] = {**counts, "east": east, "dungeons": len(items)}
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--name", required=True, help="the entry's key in the results file")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--skip-start", action="store_true", help="no held-out score at step 0")
    parser.add_argument("--out", default=str(RESULTS / "landmark_warmup.json"))
    args = parser.parse_args(argv)
    import yaml

    data = apply_overrides(yaml.safe_load(CONFIG.read_text()), args.set)
    config = TrainConfig.from_dict(data)
    torch.set_num_threads(max(1, config.torch_threads))
    seed_everything(config.seed)
    actor = PolicyOptimizer.from_settings(config.actor, "actor")
    prompt = PromptConfig(conversation=config.conversation, history_window=config.history_turns)
    examples = reading_examples(config)
    samples = reading_samples(config, examples, actor.tokenizer, prompt)
    held = held_out_samples(config, actor.tokenizer, prompt)
    optimizer = warmup_optimizer(actor, config.warmup.lr)
    formats = list(dict.fromkeys(s.meta["format"] for s in samples))
    rng = random.Random(config.seed)
    by_format: dict[str, list] = {name: [] for name in formats}
    evaluations = {}
    if not args.skip_start:
        evaluations["0"] = first_moves(actor, held)
        print(0, json.dumps(evaluations["0"]), flush=True)
    start = time.perf_counter()
    for step in range(config.warmup.steps):
        batch = draw_batch(samples, config.warmup.batch_size, rng, config.warmup.twins)
        stats = optimizer.update(batch)
        for name in formats:
            terms = [v for s, v in zip(batch, stats["sequence_losses"]) if s.meta["format"] == name]
            by_format[name].append(sum(terms) / len(terms) if terms else None)
        print(step + 1, f"{stats['loss']:.3f}", f"{time.perf_counter() - start:.0f}s", flush=True)
        if (step + 1) % args.eval_every == 0 or step + 1 == config.warmup.steps:
            last = step + 1 == config.warmup.steps
            arms = ARMS if last else ARMS[:2]  # the blind prompt at the end only
            evaluations[str(step + 1)] = first_moves(actor, held, arms)
            print(step + 1, json.dumps(evaluations[str(step + 1)]), flush=True)

    def mean(values: list) -> float | None:
        kept = [v for v in values if v is not None]
        return round(sum(kept) / len(kept), 3) if kept else None

    out_path = Path(args.out)
    results = json.loads(out_path.read_text()) if out_path.exists() else {}
    results.setdefault("config", str(CONFIG.relative_to(REPO)))
    results.setdefault("held_out", f"{HELD_OUT} split, 64 dungeons, greedy first token")
    results.setdefault("tries", {})[args.name] = {
        "overrides": args.set,
        "warmup": {
            k: getattr(config.warmup, k) for k in ("steps", "lr", "batch_size", "formats", "sides")
        },
        "lora": {"r": config.actor.lora.r, "top_layers": config.actor.lora.top_layers},
        "loss_by_format_first_ten": {f: mean(v[:10]) for f, v in by_format.items()},
        "loss_by_format_last_ten": {f: mean(v[-10:]) for f, v in by_format.items()},
        "losses_by_format": by_format,
        "first_moves": evaluations,
        "train_time_s": round(time.perf_counter() - start),
    }
    atomic_write_json(out_path, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
