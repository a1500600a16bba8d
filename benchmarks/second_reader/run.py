"""An independent reader (issue 44, item 7): does the exemplar memory's lift replicate on a
reader trained from scratch with another seed, against its format-matched placebo?

Every lesson result of the memory family was measured on one reader, the committed
``assets/memory-reader/reader.pt`` (seed 0 of ``configs/memory-reader.yaml``'s two
warm-ups). This trains the same two warm-ups with ``seed=1`` (another LoRA initialisation and
another draw of warm-up batches; about 30 minutes on 2 cores) and streams both readers on the
same held-out dungeons, visits and sampling seeds (common random numbers) with four arms:

* ``none``: no lesson;
* ``oracle``: the family's true sentence for the dungeon (does this reader read?);
* ``exemplar``: the exemplar memory (each won episode's moves, stored between visits);
* ``coin_exemplar``: its format-matched placebo, the same records on a side a coin drew per
  (stream seed, dungeon).

The contrast asked for is ``exemplar minus coin_exemplar`` at visit 2, paired. Because the
exemplar memory's gain on the committed reader was a lookup of each dungeon's own past win,
the visit-2 contrasts are also split by whether the dungeon was won at visit 1 (visit 1 is
played with an empty store, so it is the same in the three memory arms), and each visit-2
episode's first move is set beside the record it was shown (``visit_2_moves``): which way a
record sends the actor, and how often the actor finishes once on the stairs' side.

The pool is ``test_large`` (256 dungeons), used in development: three streams of the
committed results and the probe's 16 dungeons; not the sealed pool. Writes
``benchmarks/results/second_reader.json`` and ``.png``.

Run:  python -m benchmarks.second_reader.run          # ~70 min on 2 cores (warm-ups ~30)
      python -m benchmarks.second_reader.run --reuse  # summarise streams already in runs/
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.common import REPO, RESULTS, ReaderStudy, warmup_summaries
from comprl_gym.envs.memory import dungeon
from comprl_gym.envs.memory.dungeons import SIDES
from comprl_gym.envs.memory.replay import record_moves
from comprl_gym.evaluation.stats import paired_comparison
from comprl_gym.evaluation.stream import compare_runs

CONFIG = "configs/memory-reader.yaml"
#: The recipe's two warm-ups (``configs/memory-reader.yaml``'s header), for ``seed=1``.
SEED_1_WARMUPS = (
    (
        "--set", "warmup.steps=80", "--set", 'warmup.formats=["oracle","exemplar"]',
        "--set", "warmup.lr=1e-3", "--set", "actor.init_weights=", "--set", "seed=1",
        "--output-dir", "runs/memory-reader-seed1-oe80",
    ),
    (
        "--set", "seed=1", "--set", "actor.init_weights=runs/memory-reader-seed1-oe80/warmup/reader.pt",
        "--output-dir", "runs/memory-reader-seed1",
    ),
)  # fmt: skip
ARMS = ("none", "oracle", "exemplar", "coin_exemplar")
#: The paired comparisons, treatment minus control.
VERSUS = (("exemplar", "coin_exemplar"), ("exemplar", "none"), ("coin_exemplar", "none"))
POOL, TASKS, VISITS = "test_large", 256, 2
STUDY = ReaderStudy(
    name="second-reader",
    config=CONFIG,
    # the committed reader (seed 0) and the same recipe's seed 1
    readers={
        "seed_0": "assets/memory-reader/reader.pt",
        "seed_1": "runs/memory-reader-seed1/warmup/reader.pt",
    },
    arms=ARMS,
    versus=VERSUS,
    pool_args=(
        "--env", "comprl/Memory-Fork-v0", "--split", POOL, "--tasks", str(TASKS),
        "--visits", str(VISITS), "--env-arg", "observation_mode=compact",
        "--env-arg", "branch_length=2", "--env-arg", "moves=open", "--max-steps", "5",
        "--temperature", "1.0", "--seed", "0",
    ),
    warmups=SEED_1_WARMUPS,
)  # fmt: skip
READERS = STUDY.readers


def by_own_past(records: list[dict]) -> dict:
    """The visit-2 comparisons of :data:`VERSUS`, split by whether the dungeon was won at
    visit 1 (in the ``none`` arm: visit 1 has an empty store, so the memory arms play it as
    ``none`` does). A lookup helps only the dungeons already won; a lesson that transfers
    would help the others too."""
    won_first = own_past(records)
    visit_2 = {
        arm: {
            r["task_index"]: float(r["won"]) for r in records if r["arm"] == arm and r["visit"] == 2
        }
        for arm in ARMS
    }
    out: dict = {}
    for group, keep in (("won_at_visit_1", True), ("lost_at_visit_1", False)):
        tasks = {t for t, w in won_first.items() if w == keep}
        out[group] = {"dungeons": len(tasks)}
        for t, c in VERSUS:
            treated = {k: v for k, v in visit_2[t].items() if k in tasks}
            control = {k: v for k, v in visit_2[c].items() if k in tasks}
            out[group][f"{t} minus {c}"] = paired_comparison(treated, control)
    return out


def own_past(records: list[dict]) -> dict[int, bool]:
    """Each dungeon (task index): whether it was won at visit 1, in the ``none`` arm (visit 1
    has an empty store, so the memory arms play it as ``none`` does)."""
    return {
        r["task_index"]: bool(r["won"]) for r in records if r["arm"] == "none" and r["visit"] == 1
    }


def first_action(record: dict) -> str:
    """The episode's first move, ``""`` when it made none."""
    return record["turns"][0]["action"] if record["turns"] else ""


#: The counts :func:`visit_2_moves` keeps per own-past group and arm.
MOVE_COUNTS = (
    "episodes", "won", "first_move_to_stairs", "won_after_first_move_to_stairs",
    "record_names_stairs", "record_names_other", "first_move_as_record",
)  # fmt: skip


def visit_2_moves(records: list[dict]) -> dict:
    """Where a visit-2 lift comes from, per own-past group and arm: which way the first move
    went (to the stairs' side or not), how often the episode was won after a first move to the
    stairs' side (the actor's competence once the stairs are in view), and, where a record
    was shown, whether the record's first move names the dungeon's stairs side (a record
    retrieved for another dungeon names that dungeon's walk) and whether the episode's first
    move was the record's."""
    won_first = own_past(records)
    groups = {True: "won_at_visit_1", False: "lost_at_visit_1"}
    out = {g: {arm: dict.fromkeys(MOVE_COUNTS, 0) for arm in ARMS} for g in groups.values()}
    for r in records:
        if r["visit"] != 2:
            continue
        row = out[groups[won_first[r["task_index"]]]][r["arm"]]
        stairs, move, won = dungeon(r["task_id"]).side, first_action(r), bool(r["won"])
        row["episodes"] += 1
        row["won"] += won
        row["first_move_to_stairs"] += move == stairs
        row["won_after_first_move_to_stairs"] += move == stairs and won
        shown = [e["content"] for e in r.get("experiences") or []]
        sides = [m for m in (record_moves(shown[0]) if shown else []) if m in SIDES]
        if sides:
            row["record_names_stairs" if sides[0] == stairs else "record_names_other"] += 1
            row["first_move_as_record"] += move == sides[0]
    return out


def visit_1_sides(records: list[dict]) -> dict:
    """Visit 1 without a lesson (``none``): the first moves, and the stairs' side of the
    dungeons won and of those lost. A reader that prefers one side blind wins mostly the
    dungeons with the stairs on that side, so the records a memory of won episodes holds name
    that side, and the dungeons it has no record of mostly have the stairs on the other."""
    first = [r for r in records if r["arm"] == "none" and r["visit"] == 1]
    moves = [first_action(r) for r in first]
    out: dict = {"first_moves": {side: moves.count(side) for side in SIDES}}
    out["first_moves"]["other"] = len(moves) - sum(out["first_moves"].values())
    for outcome, won in (("won", True), ("lost", False)):
        sides = [dungeon(r["task_id"]).side for r in first if bool(r["won"]) == won]
        out[f"stairs_side_of_{outcome}"] = {side: sides.count(side) for side in SIDES}
    return out


def first_visit_identical(records: list[dict]) -> dict:
    """How many visit-1 episodes of each memory arm made exactly the ``none`` arm's moves (an
    empty store shows no lesson, so on common random numbers they should all)."""
    moves = {
        (r["arm"], r["task_index"]): [t["action"] for t in r["turns"]]
        for r in records
        if r["visit"] == 1
    }
    tasks = [t for arm, t in moves if arm == "none"]
    return {
        arm: sum(moves[(arm, t)] == moves[("none", t)] for t in tasks)
        for arm in ARMS
        if arm not in ("none", "oracle")
    }


def measures(records: list[dict]) -> dict:
    """What a reader's episodes say beside the stream's summary."""
    return {
        "by_own_past": by_own_past(records),
        "visit_1_sides": visit_1_sides(records),
        "visit_2_moves": visit_2_moves(records),
        "first_visit_same_moves_as_none": first_visit_identical(records),
    }


def summarise() -> dict:
    out, streams = STUDY.summary(("streaming", "versus"), measures)
    out.update(
        question="does the exemplar memory's lift over its format-matched placebo replicate "
        "on a reader trained from scratch with another seed?",
        warmup_commands=[
            "comprl-gym train --config " + CONFIG + " " + " ".join(args) for args in SEED_1_WARMUPS
        ],
        pool=POOL,
        pool_note="test_large: used in development (three committed streams of the fork "
        "variant, and the probe's 16 dungeons); not the sealed pool",
    )
    out["seed_1_minus_seed_0"] = {
        arm: compare_runs(streams["seed_1"], streams["seed_0"], arm) for arm in ARMS
    }
    out["seed_1_warmups"] = warmup_summaries(
        {Path(args[-1]).name: REPO / args[-1] for args in SEED_1_WARMUPS}
    )
    return out


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(READERS), figsize=(11, 4), sharey=True)
    for ax, reader in zip(axes, READERS):
        streaming = result["readers"][reader]["streaming"]
        for k, arm in enumerate(ARMS):
            rates = [streaming[arm]["visits"][str(v)]["success"] for v in range(1, VISITS + 1)]
            xs = [v + (k - 1.5) * 0.18 for v in range(1, VISITS + 1)]
            ax.errorbar(
                xs,
                [r["mean"] for r in rates],
                yerr=[
                    [r["mean"] - r["low"] for r in rates],
                    [r["high"] - r["mean"] for r in rates],
                ],
                fmt="o",
                capsize=3,
                label=arm,
            )
        ax.set_xticks(range(1, VISITS + 1), [f"visit {v}" for v in range(1, VISITS + 1)])
        ax.set_title(f"reader {reader.replace('_', ' ')}")
        ax.set_ylim(0, 1)
    axes[0].set_ylabel(f"success ({TASKS} {POOL} dungeons, 95% Wilson)")
    axes[-1].legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    return STUDY.main(__doc__, RESULTS / "second_reader.json", summarise, plot, argv)


if __name__ == "__main__":
    raise SystemExit(main())
