"""A rule at the first visit (issue 44, item 5): does an actor act on a lesson that transfers?

On ``comprl/Memory-Landmark-v0`` a fountain, altar, sink or grave beside the start always
marks the stairs' side, so one sentence, "the staircase down is at the end of the branch on
the same side as the fountain, altar, sink or grave beside the start", helps every dungeon at
its first visit, where no memory of that dungeon exists and no lookup can. Before an extractor
can be asked to distil such a rule, the actor has to act on it when it is written down: this
measures that ceiling. Each reader streams the same held-out dungeons once (visit 1) with four
arms on common random numbers: ``none``, ``rule``, ``inverted_rule`` (the rule turned round)
and ``rule_placebo`` (the rule's words with no relation, as many tokens).

Readers: ``memory_reader``, the committed fork reader (``assets/memory-reader/reader.pt``);
``landmark_reader``, that reader after ``configs/landmark-reader.yaml``'s warm-up (rule and
inverted rule on the 192 training dungeons, both sides; rebuilt when absent). Both stream
through ``comprl-gym stream --config configs/landmark-reader.yaml`` with ``actor.init_weights``
set to the reader file, on the ``test_large`` pool (never used for the landmark variant; its
fork dungeons were streamed in three development runs).

Per reader it writes the stream's summary keys (success, ``rule`` and ``inverted_rule``
minus the placebo, paired, McNemar's p) and, because a first step on the landmark's side
is what the rule says and the later steps are the actor's own competence, the **first move at
the fork** per arm (landmark side, other side, any other move) with the same paired
comparison on "the first move is the landmark's side". ``landmark_minus_memory`` pairs the two
readers arm by arm. Writes ``benchmarks/results/landmark_rule.json`` and ``.png``.

Run:  python -m benchmarks.landmark_rule.run          # ~45 min on 2 cores (the warm-up ~30)
      python -m benchmarks.landmark_rule.run --reuse  # summarise streams already in runs/
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.common import RESULTS, RUNS, ReaderStudy, warmup_summaries
from comprl_gym.envs.memory import dungeon
from comprl_gym.evaluation.stats import paired_comparison, proportion_ci
from comprl_gym.evaluation.stream import compare_runs

ARMS = ("none", "rule", "rule_placebo", "inverted_rule")
#: The treatments, each against the rule's placebo.
VERSUS = (("rule", "rule_placebo"), ("inverted_rule", "rule_placebo"), ("rule", "none"))
POOL, TASKS = "test_large", 128
STUDY = ReaderStudy(
    name="landmark-rule",
    config="configs/landmark-reader.yaml",
    readers={
        "memory_reader": "assets/memory-reader/reader.pt",
        "landmark_reader": "runs/landmark-reader/warmup/reader.pt",
    },
    arms=ARMS,
    versus=VERSUS,
    pool_args=(
        "--env", "comprl/Memory-Landmark-v0", "--split", POOL, "--tasks", str(TASKS),
        "--visits", "1", "--env-arg", "observation_mode=compact", "--env-arg", "branch_length=2",
        "--env-arg", "moves=open", "--max-steps", "5", "--temperature", "1.0", "--seed", "0",
    ),
)  # fmt: skip
READERS = STUDY.readers
STREAM_KEYS = ("streaming", "versus", "store_verdicts")
#: The warm-ups' records: the reader streamed, and a first try (40 steps at lr 3e-4 with the
#: oracle's sentence as a third format) that the config's comment describes.
WARMUPS = {"rule_reader": RUNS / "landmark-reader", "first_try": RUNS / "landmark-reader-try1"}
#: Where a first move goes (:func:`first_move`).
MOVES = ("landmark_side", "other_side", "other")


def first_move(record: dict) -> str:
    """Where the episode's first move went: the landmark's (= the stairs') side, the other
    side, or elsewhere (into the landmark's alcove, a wall)."""
    move = record["turns"][0]["action"] if record["turns"] else ""
    side = dungeon(record["task_id"]).side
    return (
        "landmark_side" if move == side else "other_side" if move in ("east", "west") else "other"
    )


def first_moves(records: list[dict]) -> dict:
    """Per arm: first-move counts, the wins among episodes whose first move was the landmark's
    side, the landmark-side rate (Wilson) and, for each treatment of :data:`VERSUS`, the
    paired difference of that rate."""
    toward = {
        arm: {r["task_index"]: first_move(r) == "landmark_side" for r in records if r["arm"] == arm}
        for arm in ARMS
    }
    counts = {
        arm: {k: sum(first_move(r) == k for r in records if r["arm"] == arm) for k in MOVES}
        for arm in ARMS
    }
    # After a first step on the right side the stairs are in view: what the actor does then is
    # its own competence, which a lesson in the prompt can disturb.
    won_after = {
        arm: sum(
            bool(r["won"]) for r in records if r["arm"] == arm and first_move(r) == "landmark_side"
        )
        for arm in ARMS
    }
    return {
        "counts": counts,
        "won_after_landmark_side": won_after,
        "landmark_side": {arm: proportion_ci(list(toward[arm].values())).to_dict() for arm in ARMS},
        "versus": {f"{t} minus {c}": paired_comparison(toward[t], toward[c]) for t, c in VERSUS},
    }


def summarise() -> dict:
    out, streams = STUDY.summary(STREAM_KEYS, lambda records: {"first_moves": first_moves(records)})
    out.update(
        question="does the actor act on a written rule at a dungeon's first visit?",
        pool=POOL,
        pool_note="test_large: never streamed in the landmark variant before; its fork "
        "dungeons were used in three development runs",
    )
    out["landmark_minus_memory"] = {
        arm: compare_runs(streams["landmark_reader"], streams["memory_reader"], arm)["all"]
        for arm in ARMS
    }
    out["warmups"] = warmup_summaries(WARMUPS)
    return out


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    width = 0.8 / len(ARMS)
    for ax, (title, key) in zip(
        axes, (("success at visit 1", "success"), ("first move to the landmark's side", "move"))
    ):
        for k, arm in enumerate(ARMS):
            xs, ys, lo, hi = [], [], [], []
            for x, reader in enumerate(READERS):
                r = result["readers"][reader]
                rate = (
                    r["streaming"][arm]["visits"]["1"]["success"]
                    if key == "success"
                    else r["first_moves"]["landmark_side"][arm]
                )
                xs.append(x + (k - 1.5) * width)
                ys.append(rate["mean"])
                lo.append(rate["mean"] - rate["low"])
                hi.append(rate["high"] - rate["mean"])
            ax.bar(xs, ys, width, yerr=[lo, hi], capsize=3, label=arm)
        ax.set_xticks(range(len(READERS)), ["fork reader", "rule reader"])
        ax.set_title(title)
        ax.axhline(0.5, color="grey", lw=0.5, ls=":")
        ax.set_ylim(0, 1)
    axes[0].set_ylabel(f"rate, {TASKS} held-out dungeons ({POOL}), 95% Wilson")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    return STUDY.main(__doc__, RESULTS / "landmark_rule.json", summarise, plot, argv)


if __name__ == "__main__":
    raise SystemExit(main())
