"""The actor's known-answer ladder (comprl_gym.trainers.ladder.climb_actor), measured.

Each rung of ``comprl/Ladder-v0`` (a constant answer, an answer that depends on the
observation, an answer given in context, a two-step episode) is climbed by the library's GRPO
trainer with ``configs/actor-ladder.yaml`` (the env's perfect reward) and by the supervised
control (cross-entropy on the first right branch, the same prompts and LoRA, lr 2e-3, 16
tasks a step), evaluated every 2 updates (``--eval-every``) on the 32 held-out tasks: won greedily, the mean
P(right) of the first choice and its entropy. Each climb is added to
``benchmarks/results/actor_ladder.json`` as it ends, with a plot.

    python -m benchmarks.ladder.actor                     # every rung, both learners (~1 h)
    python -m benchmarks.ladder.actor --rungs lesson --learners rl --seed 1
    python -m benchmarks.ladder.actor --rungs lesson --learners rl \
        --set positive_advantages_only=true --variant rl-positive
    python -m benchmarks.ladder.actor --learners rl --variant rl-choices-t10-positive
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from benchmarks.common import REPO, RESULTS
from comprl_gym.trainers.config import TrainConfig
from comprl_gym.trainers.ladder import RungResult, actor_rungs, climb_actor, ladder_table
from comprl_gym.utils import atomic_write_json

CONFIG = REPO / "configs" / "actor-ladder.yaml"
RESULT = RESULTS / "actor_ladder.json"
LEARNERS = ("supervised", "rl")
#: The actor's choice (one token among the listed numbers, the loss over them), lr 2e-3,
#: 4 tasks x 4 episodes: what every choice variant below shares.
CHOICE = [
    "choose_listed_action=true",
    "actor.score=choices",
    "actor.lr=2e-3",
    "groups_per_iteration=4",
    "group_size=4",
]
#: Named RL variants: their config overrides (``--variant NAME`` applies them before ``--set``).
VARIANTS = {
    # The actor's side of the extractor's passing learner: the choice drawn near-uniformly
    # (temperature 10) so both sides keep being tried, and only the episodes that beat their
    # task's mean pushed.
    "rl-choices-t10-positive": [
        *CHOICE,
        "actor.temperature=10",
        "positive_advantages_only=true",
    ],
    # Ablations of it, one part each: signed advantages; the sampler at the model's own
    # temperature (1), so the side it prefers is drawn most.
    "rl-choices-t10": [*CHOICE, "actor.temperature=10"],
    "rl-choices-t1-positive": [*CHOICE, "actor.temperature=1", "positive_advantages_only=true"],
}


def ordered(results: list[RungResult]) -> list[RungResult]:
    """Easiest rung first; in a rung the supervised controls first, then by seed."""
    rungs = list(actor_rungs())
    return sorted(
        results,
        key=lambda r: (rungs.index(r.rung), not r.learner.startswith("supervised"), r.seed),
    )


def plot(results: list[RungResult], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rungs = list(dict.fromkeys(r.rung for r in ordered(results)))
    variants = list(dict.fromkeys(r.learner for r in ordered(results)))
    fig, axes = plt.subplots(2, len(rungs), figsize=(4 * len(rungs), 6), squeeze=False)
    for column, rung in enumerate(rungs):
        for result in (r for r in results if r.rung == rung):
            xs = [p.updates for p in result.curve]
            style = {
                "color": f"C{variants.index(result.learner)}",
                "linestyle": ("-", "--", ":")[result.seed % 3],
                "marker": "o",
                "label": f"{result.learner} (seed {result.seed})",
            }
            axes[0][column].plot(xs, [p.greedy_right / p.episodes for p in result.curve], **style)
            axes[1][column].plot(xs, [p.mean_choice_entropy for p in result.curve], **style)
        axes[0][column].set_title(rung)
        axes[0][column].set_ylim(-0.02, 1.02)
        axes[0][column].set_ylabel("won greedily, 32 held-out tasks")
        axes[1][column].set_ylabel("first choice's entropy (nats)")
        axes[1][column].set_xlabel("updates")
    # The legend where most lines are: the colours are the same in every panel.
    busiest = max(range(len(rungs)), key=lambda c: sum(r.rung == rungs[c] for r in results))
    legend = {}  # every line's label once, from whichever panel draws it
    for axis in axes[0]:
        legend.update(zip(*reversed(axis.get_legend_handles_labels())))
    axes[0][busiest].legend(list(legend.values()), list(legend), fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def row_key(row: dict) -> tuple[str, str, int]:
    """A result row's (rung, variant, seed): a new climb replaces the row of the same key."""
    return row["rung"], row["settings"].get("variant", row["learner"]), row["seed"]


def save(rows: list[dict], out: Path) -> None:
    """Write the rows and redraw the plot (after every climb: a stopped run keeps its rows)."""
    atomic_write_json(
        out,
        {
            "config": str(CONFIG.relative_to(REPO)),
            "eval": "32 held-out tasks of comprl/Ladder-v0 split test, played greedily; "
            "P(right) and entropy of the first choice at temperature 1 over the two branches",
            "results": rows,
        },
    )
    plot([RungResult.from_dict(r) for r in rows], out.with_suffix(".png"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rungs", default=",".join(actor_rungs()))
    parser.add_argument(
        "--learners",
        default=",".join(LEARNERS),
        help="rl, supervised (the first reply's label) or supervised_every_fork (every "
        "fork's, in the actor's own conversation)",
    )
    parser.add_argument("--max-updates", type=int, default=20)
    parser.add_argument("--eval-every", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set", action="append", default=[], help="config override KEY=VALUE")
    parser.add_argument(
        "--variant",
        default="",
        help=f"the name the rows go by (default: the learner); {sorted(VARIANTS)} also "
        "apply their overrides",
    )
    parser.add_argument("--out", type=Path, default=RESULT)
    parser.add_argument("--replot", action="store_true", help="only redraw the plot and table")
    args = parser.parse_args(argv)
    rows = json.loads(args.out.read_text())["results"] if args.out.exists() else []
    if not args.replot:
        overrides = [*VARIANTS.get(args.variant, []), *args.set]
        config = TrainConfig.from_yaml(CONFIG, overrides)
        for rung in args.rungs.split(","):
            for learner in args.learners.split(","):
                start = time.perf_counter()

                def show(result: RungResult, start: float = start) -> None:
                    p = result.curve[-1]
                    print(
                        f"  {result.rung} {result.learner} update {p.updates}: won "
                        f"{p.greedy_right}/{p.episodes} {p.greedy_right_by_kind}, P(right) "
                        f"{p.mean_p_target:.2f}, entropy {p.mean_choice_entropy:.2f}, update "
                        f"entropy {p.update_entropy}, reward {p.reward_mean} "
                        f"({time.perf_counter() - start:.0f} s)",
                        flush=True,
                    )

                result = climb_actor(
                    rung,
                    learner,  # type: ignore[arg-type]
                    config,
                    max_updates=args.max_updates,
                    eval_every=args.eval_every,
                    seed=args.seed,
                    progress=show,
                )
                result.settings["overrides"] = overrides
                result.settings["variant"] = args.variant or learner
                # Read again: another climb running beside this one may have written since.
                rows = json.loads(args.out.read_text())["results"] if args.out.exists() else []
                key = (rung, result.settings["variant"], args.seed)
                rows = [r for r in rows if row_key(r) != key]
                rows.append(result.to_dict())
                save(rows, args.out)
                print(ladder_table([result]), flush=True)
    save(rows, args.out)
    print(ladder_table(ordered([RungResult.from_dict(r) for r in rows])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
