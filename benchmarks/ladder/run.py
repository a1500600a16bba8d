"""The known-answer ladder for the extractor's learner (comprl_gym.trainers.ladder), measured.

Each variant is the extractor of ``configs/extractor-credit.yaml`` (SmolLM2-135M filling the
memory family's lesson stem, LoRA r 16 on the top 8 blocks, CISPO with the ``choice``
baseline, temperature 1.5) with the overrides it names. Every rung is climbed by the
supervised control (cross-entropy on the target choice, the same prompts and LoRA) and by each
RL variant with a perfect reward, for at most ``--max-updates`` updates of 16 lessons,
evaluated every 5 updates on the 32 held-out probe episodes (greedy right, mean P(target),
choice entropy). The result goes to ``benchmarks/results/ladder.json`` with a plot.

    python -m benchmarks.ladder.run                       # every rung and variant
    python -m benchmarks.ladder.run --rungs rule --variants supervised,sampled --seed 1
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import time
from pathlib import Path

from benchmarks.common import REPO, RESULTS
from comprl_gym.trainers.config import TrainConfig
from comprl_gym.trainers.ladder import (
    EXTRACTOR_RUNGS,
    LadderPoint,
    RungResult,
    climb,
    ladder_table,
)
from comprl_gym.utils import atomic_write_json

CONFIG = REPO / "configs" / "extractor-credit.yaml"
RESULT = RESULTS / "ladder.json"

#: GRPO's baseline for the extractor, scored as the model's own choice: 4 lessons about each
#: of 4 episodes an update, each compared with the others about the same episode.
CONTEXT = [
    "extractor.score=choices",
    "experience.extractor_samples=4",
    "experience.extractor_baseline=context",
]
#: The reference's batch baseline, the model's own choice scored, sampled at 3.
CHOICES_BATCH = [
    "extractor.score=choices",
    "extractor.temperature=3.0",
    "experience.extractor_baseline=batch",
]

#: Variant name -> (learner, config overrides of the extractor).
VARIANTS: dict[str, tuple[str, list[str]]] = {
    "supervised": ("supervised", ["extractor.lr=2e-3"]),
    # The committed config's learner: CISPO on the unprocessed distribution, lr 2e-3.
    "raw": ("rl", []),
    # The same, lr 5e-4 (the perfect-credit diagnostic's).
    "raw-lr5e-4": ("rl", ["extractor.lr=5e-4"]),
    # Sampled at temperature 3 (more of the side the model does not yet prefer), scored raw.
    "raw-t3": ("rl", ["extractor.temperature=3.0"]),
    # The model's own choice scored (temperature 1 over the two sides), sampled hotter.
    "choices": ("rl", ["extractor.score=choices"]),
    "choices-t3": ("rl", ["extractor.score=choices", "extractor.temperature=3.0"]),
    # The same with the reference's batch baseline (r minus the batch's mean r): under the
    # choice baseline a side that is right wherever it is given earns 0, so the rare right
    # draw in a kind the model gets wrong teaches nothing.
    "choices-t3-batch-lr5e-4": ("rl", [*CHOICES_BATCH, "extractor.lr=5e-4"]),
    "choices-t3-batch-lr1e-3": ("rl", [*CHOICES_BATCH, "extractor.lr=1e-3"]),
    "context-choices-t3": ("rl", [*CONTEXT, "extractor.temperature=3.0"]),
    "context-choices-t3-lr1e-3": (
        "rl",
        [*CONTEXT, "extractor.temperature=3.0", "extractor.lr=1e-3"],
    ),
    "context-choices-t3-lr5e-4": (
        "rl",
        [*CONTEXT, "extractor.temperature=3.0", "extractor.lr=5e-4"],
    ),
    "context-choices-t3-warmup": (
        "rl",
        [*CONTEXT, "extractor.temperature=3.0", "extractor.lr_warmup_steps=10"],
    ),
    # Sampled near-uniformly (temperature 10): the side the model does not prefer is drawn in
    # about a third of the lessons even at a 8-nat margin, so groups keep comparing both.
    "context-choices-t10": ("rl", [*CONTEXT, "extractor.temperature=10.0"]),
    # Only the lessons that beat their episode's mean are pushed (up): rejection-sampling
    # fine-tuning on near-uniform draws. The one that passes.
    "context-choices-t10-positive": (
        "rl",
        [*CONTEXT, "extractor.temperature=10.0", "experience.extractor_positive_only=true"],
    ),
    # The context baseline on the committed raw score, sampled at 1.5.
    "context": ("rl", ["experience.extractor_samples=4", "experience.extractor_baseline=context"]),
    # Scored as sampled: temperature 1.5 over the two choices only.
    "sampled": ("rl", ["extractor.score=sampled"]),
    "sampled-lr5e-4": ("rl", ["extractor.score=sampled", "extractor.lr=5e-4"]),
    # With an entropy bonus against the collapse.
    "sampled-lr5e-4-entropy": (
        "rl",
        ["extractor.score=sampled", "extractor.lr=5e-4", "extractor.entropy_coef=0.1"],
    ),
}


def run(rungs: list[str], variants: list[str], max_updates: int, seed: int) -> list[RungResult]:
    results = []
    for rung in rungs:
        for name in variants:
            learner, overrides = VARIANTS[name]
            config = TrainConfig.from_yaml(CONFIG, [f"seed={seed}", *overrides])
            start = time.perf_counter()

            def show(result: RungResult, name: str = name, start: float = start) -> None:
                p = result.curve[-1]
                print(
                    f"  {result.rung} {name} update {p.updates}: greedy {p.greedy_right}/"
                    f"{p.episodes}, P(target) {p.mean_p_target:.2f}, entropy "
                    f"{p.mean_choice_entropy:.2f} ({time.perf_counter() - start:.0f} s)\n"
                    f"    greedy right by kind: {p.greedy_right_by_kind}; update entropy "
                    f"{p.update_entropy}, reward mean {p.reward_mean}",
                    flush=True,
                )

            result = climb(
                rung,
                learner,  # type: ignore[arg-type]
                config.extractor,
                config.experience,
                max_updates=max_updates,
                seed=seed,
                progress=show,
            )
            result.settings["variant"] = name
            results.append(result)
            print(ladder_table([result]), flush=True)
    return results


#: The variants the plot draws (every climb is in the table): the supervised control, the
#: committed learner, the first context learner and the one that passes.
PLOTTED = ("supervised", "raw", "context-choices-t3", "context-choices-t10-positive")


def ordered(results: list[RungResult]) -> list[RungResult]:
    """Easiest rung first; in a rung the supervised control first, then in the order run."""
    rungs = list(EXTRACTOR_RUNGS)
    return sorted(results, key=lambda r: (rungs.index(r.rung), r.learner != "supervised"))


def plot(results: list[RungResult], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = [r for r in ordered(results) if r.settings.get("variant", r.learner) in PLOTTED]
    rungs = list(dict.fromkeys(r.rung for r in results))
    fig, axes = plt.subplots(2, len(rungs), figsize=(4.5 * len(rungs), 6.5), squeeze=False)
    for column, rung in enumerate(rungs):
        for result in (r for r in results if r.rung == rung):
            xs = [p.updates for p in result.curve]
            variant = result.settings.get("variant", result.learner)
            # One colour per variant, one line style per seed, the same in every panel.
            style = {
                "color": f"C{PLOTTED.index(variant)}",
                "linestyle": ("-", "--", ":")[result.seed % 3],
                "marker": "o",
                "label": f"{variant} (seed {result.seed})",
            }
            axes[0][column].plot(xs, [p.greedy_right / p.episodes for p in result.curve], **style)
            axes[1][column].plot(xs, [p.mean_choice_entropy for p in result.curve], **style)
        axes[0][column].set_title(f"{rung}: {EXTRACTOR_RUNGS[rung].asks}", fontsize=9)
        axes[0][column].set_ylim(-0.02, 1.02)
        axes[0][column].set_ylabel("greedy right on 32 probe episodes")
        axes[1][column].set_ylabel("choice entropy (nats)")
        axes[1][column].set_xlabel("updates")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


#: A progress line ``run`` prints at each evaluation.
PROGRESS = re.compile(
    r"^  (?P<rung>\w+) (?P<variant>[\w.-]+) update (?P<updates>\d+): greedy (?P<right>\d+)/"
    r"(?P<episodes>\d+), P\(target\) (?P<p>[\d.]+), entropy (?P<entropy>[\d.]+) \((?P<t>\d+) s\)$"
)


#: The line under it: greedy right per kind of probe episode.
BY_KIND = re.compile(r"^    greedy right by kind: (?P<by_kind>\{[^}]*\});")


def from_log(path: Path, seed: int) -> list[dict]:
    """The curves of runs stopped before they wrote their result (killed for time), read back
    from the progress lines they printed: their evaluations as printed (two decimals), marked
    ``stopped``. The update-0 evaluation is not printed, so a curve starts at update 5."""
    curves: dict[tuple[str, str], list[dict]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        match = PROGRESS.match(line)
        if match:
            curves.setdefault((match["rung"], match["variant"]), []).append(match.groupdict())
        kinds = BY_KIND.match(line)
        if kinds and curves:
            last = list(curves.values())[-1][-1]
            last["by_kind"] = ast.literal_eval(kinds["by_kind"])
    rows = []
    for (rung, variant), points in curves.items():
        learner, overrides = VARIANTS[variant]
        curve = [
            LadderPoint(
                int(p["updates"]),
                int(p["right"]),
                int(p["episodes"]),
                float(p["p"]),
                float(p["entropy"]),
                greedy_right_by_kind=p.get("by_kind", {}),
            )
            for p in points
        ]
        result = RungResult(rung, learner, {"variant": variant, "overrides": overrides}, curve)
        result.time_s = float(points[-1]["t"])
        rows.append(
            {
                **result.to_dict(),
                "seed": seed,
                "stopped": f"killed after update {curve[-1].updates}: read from its log {path.name}",
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rungs", default=",".join(EXTRACTOR_RUNGS))
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--max-updates", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULT)
    parser.add_argument(
        "--from-log",
        type=Path,
        help="add the curves of runs killed before they finished, from their printed progress",
    )
    parser.add_argument(
        "--replot", action="store_true", help="only redraw the plot and table from --out"
    )
    args = parser.parse_args(argv)
    if args.replot:
        added = []
    elif args.from_log:
        added = from_log(args.from_log, args.seed)
    else:
        results = run(args.rungs.split(","), args.variants.split(","), args.max_updates, args.seed)
        added = [{**r.to_dict(), "seed": args.seed} for r in results]
    previous = json.loads(args.out.read_text())["results"] if args.out.exists() else []
    fresh = {(r["rung"], r["settings"]["variant"], args.seed) for r in added}
    kept = [
        r for r in previous if (r["rung"], r["settings"]["variant"], r.get("seed", 0)) not in fresh
    ]
    rows = kept + added
    atomic_write_json(
        args.out,
        {
            "config": str(CONFIG.relative_to(REPO)),
            "variants": {k: {"learner": v[0], "overrides": v[1]} for k, v in VARIANTS.items()},
            "eval": "32 held-out probe episodes, greedy choice and P(target) at temperature 1",
            "results": rows,
        },
    )
    everything = ordered([RungResult.from_dict(r) for r in rows])
    plot(everything, args.out.with_suffix(".png"))
    print(ladder_table(everything))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
