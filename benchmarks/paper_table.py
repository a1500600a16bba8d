"""The paper's table on the memory family: each trainer's held-out success, pooled over seeds.

One row per method (GRPO, static experience, experience-only, Complementary RL, the exemplar
memory), each given as the ``bench_experience_transfer.py`` result files of its seeds. A method's
*deployed* arm is what a user of it gets on a held-out dungeon: its own store's lessons
(``own``), or no lessons for a method without a store (GRPO's ``none``). Per method:

- success of each arm (``none``, ``own``, ``oracle``) at the last visit and over all visits,
  the seeds' episodes pooled (Wilson), and each seed's own rate;
- the deployed arm minus each ``--versus`` method's deployed arm, paired episode by episode on
  common random numbers (the same reset and sampling seed per (seed, dungeon, visit)), pooled
  over the seeds both have (Newcombe's interval, McNemar's exact p; ``pool_runs.pooled``);
- the deployed arm minus the same run's ``none`` (what its lessons do to its own actor);
- what its extractor wrote: lessons naming the right side in the training store and in the
  held-out store, and the CISPO batches that carried a gradient.

Writes ``<out>.json``, ``<out>.md`` (the table) and ``<out>.png`` (success with intervals, one
dot per seed).

    R=benchmarks/results
    python benchmarks/paper_table.py \\
        --method GRPO $R/extractor_memory_grpo{,_seed1,_seed2}.json \\
        --method "static experience" $R/extractor_memory_stem_static{,_seed1,_seed2}.json \\
        --method "experience-only" $R/extractor_memory_stem_experience_only{,_seed1,_seed2}.json \\
        --method "Complementary RL" $R/extractor_memory_stem_complementary{,_seed1,_seed2}.json \\
        --method "Complementary RL, paired credit" \\
            $R/extractor_memory_stem_complementary_paired{,_seed1,_seed2}.json \\
        --method "exemplar memory" $R/extractor_memory_exemplar{,_seed1,_seed2}.json \\
        --versus "static experience" --versus GRPO --out $R/extractor_memory_table
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pool_runs import keyed, pooled

from comprl_gym.evaluation.streaming import streaming_summary
from comprl_gym.utils import atomic_write_bytes

ARMS = ("none", "own", "oracle")


def deployed_arm(result: dict[str, Any]) -> str:
    """``own`` where the run streamed its own store, else ``none`` (a method without one)."""
    return "own" if any(e["arm"] == "own" for e in result["episodes"]) else "none"


def as_deployed(result: dict[str, Any]) -> dict[str, Any]:
    """The run's deployed episodes relabelled ``deployed``, so two methods' pair up."""
    arm = deployed_arm(result)
    return {"episodes": [dict(e, arm="deployed") for e in result["episodes"] if e["arm"] == arm]}


def seed_of(result: dict[str, Any]) -> int:
    return int(result["config"]["seed"])


def pooled_summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    """``streaming_summary`` over several seeds' episodes, each keyed by (seed, task)."""
    return streaming_summary([e for r in results for e in keyed(r, seed_of(r))])


def extractor_row(results: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Right-side lessons written (training and held-out stores), CISPO batches with a gradient."""
    if not any("own" in r.get("store_sides", {}) for r in results):
        return None
    out: dict[str, Any] = {}
    for store in ("training_run", "own"):
        sides = [r["store_sides"].get(store, {}) for r in results]
        out[store] = {
            "right": sum(s.get("right", 0) for s in sides),
            "lessons": sum(sum(s.values()) for s in sides),  # both sides or none count too
        }
    # The batches of the credit rule the run trained with (its gradient; both rules are logged).
    agreement = [
        r["credit_agreement"][r["config"]["experience"].get("extractor_baseline", "batch")]
        for r in results
        if r.get("credit_agreement")
    ]
    out["batches_with_signal"] = sum(a["batches_with_signal"] for a in agreement)
    out["batches"] = sum(a["batches"] for a in agreement)
    return out


def method_row(name: str, results: list[dict[str, Any]]) -> dict[str, Any]:
    seeds = [seed_of(r) for r in results]
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"{name}: each seed once, got seeds {seeds}")
    last = str(max(int(e["visit"]) for r in results for e in r["episodes"]))
    summary = pooled_summary(results)
    deployed = deployed_arm(results[0])
    if any(deployed_arm(r) != deployed for r in results):
        raise ValueError(f"{name}: its seeds' runs stream different arms")
    per_seed = {
        str(seed_of(r)): {
            arm: cell["visits"][last]["success"]["mean"]
            for arm, cell in streaming_summary(r["episodes"]).items()
            if arm in ARMS
        }
        for r in results
    }
    return {
        "method": name,
        "trainer": results[0]["config"]["algorithm"],
        "extractor_format": results[0]["config"]["experience"]["extractor_format"],
        "seeds": seeds,
        "deployed_arm": deployed,
        "last_visit": last,
        "success": {
            arm: {visit: summary[arm]["visits"][visit]["success"] for visit in (last, "all")}
            for arm in ARMS
            if arm in summary
        },
        "per_seed": per_seed,
        "deployed_minus_none": summary["own"]["minus_none"] if deployed == "own" else None,
        "extractor": extractor_row(results),
    }


def versus(mine: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Deployed minus deployed over the seeds both methods ran, paired per (seed, task, visit)."""
    by_seed = {seed_of(r): r for r in theirs}
    shared = [r for r in mine if seed_of(r) in by_seed]
    if not shared:
        return None
    seeds = [seed_of(r) for r in shared]
    pairs = [(as_deployed(r), as_deployed(by_seed[seed])) for r, seed in zip(shared, seeds)]
    return {
        "seeds": seeds,
        "this_minus_that": pooled(pairs, "deployed"),
        "per_seed": {str(seed): pooled([pair], "deployed") for seed, pair in zip(seeds, pairs)},
    }


def table(methods: dict[str, list[dict[str, Any]]], against: list[str]) -> dict[str, Any]:
    rows = [method_row(name, results) for name, results in methods.items()]
    for row in rows:
        row["versus"] = {
            other: versus(methods[row["method"]], methods[other])
            for other in against
            if other != row["method"]
        }
    return {"benchmark": "paper_table", "versus": against, "rows": rows}


def _ci(cell: dict[str, Any] | None, signed: bool = False) -> str:
    if not cell:
        return "-"
    fmt = "{:+.2f}" if signed else "{:.2f}"
    return f"{fmt.format(cell['mean'])} [{fmt.format(cell['low'])}, {fmt.format(cell['high'])}]"


def markdown(result: dict[str, Any]) -> str:
    rows = result["rows"]
    last = rows[0]["last_visit"]
    head = [
        "method",
        "seeds",
        f"deployed, visit {last}",
        f"none, visit {last}",
        f"oracle, visit {last}",
        "deployed − none",
        *(f"deployed − {other}'s" for other in result["versus"]),
        "lessons naming the right side (training / held-out store)",
        "CISPO batches with a gradient",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        success = row["success"]
        own_minus_none = row["deployed_minus_none"]
        diffs = []
        for other in result["versus"]:
            cell = row["versus"].get(other)
            if cell is None:
                diffs.append("-")
                continue
            d = cell["this_minus_that"][last]
            diffs.append(f"{_ci(d['difference'], True)}, p {d['mcnemar_p']:.3f}")
        ex = row["extractor"]
        lessons = (
            f"{ex['training_run']['right']}/{ex['training_run']['lessons']} / "
            f"{ex['own']['right']}/{ex['own']['lessons']}"
            if ex
            else "-"
        )
        steps = f"{ex['batches_with_signal']} of {ex['batches']}" if ex and ex["batches"] else "-"
        lines.append(
            "| "
            + " | ".join(
                [
                    row["method"],
                    ",".join(map(str, row["seeds"])),
                    _ci(success[row["deployed_arm"]][last]),
                    _ci(success.get("none", {}).get(last)),
                    _ci(success.get("oracle", {}).get(last)),
                    _ci(own_minus_none[last]["difference"], True) if own_minus_none else "-",
                    *diffs,
                    lessons,
                    steps,
                ]
            )
            + " |"
        )
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    last = rows[0]["last_visit"]
    fig, ax = plt.subplots(figsize=(9, 4.2))
    width = 0.26
    for k, (arm, colour) in enumerate(
        (("none", "tab:grey"), ("deployed", "tab:blue"), ("oracle", "tab:green"))
    ):
        label = {"deployed": "own lessons", "none": "no lessons", "oracle": "oracle lesson"}[arm]
        for i, row in enumerate(rows):
            name = row["deployed_arm"] if arm == "deployed" else arm
            cell = row["success"].get(name, {}).get(last)
            if cell is None or (arm == "deployed" and name == "none"):
                continue
            x = i + (k - 1) * width
            first = label not in ax.get_legend_handles_labels()[1]
            ax.bar(x, cell["mean"], width, color=colour, label=label if first else None)
            ax.errorbar(
                x,
                cell["mean"],
                yerr=[[cell["mean"] - cell["low"]], [cell["high"] - cell["mean"]]],
                color="black",
                capsize=3,
                lw=1,
            )
            seeds = [s[name] for s in row["per_seed"].values() if name in s]
            ax.scatter([x] * len(seeds), seeds, color="black", s=8, zorder=3)
    ax.set_xticks(range(len(rows)), [r["method"] for r in rows], fontsize=8)
    ax.set_ylabel(f"held-out success, visit {last}")
    ax.set_ylim(0, 1.02)
    ax.axhline(0.5, color="grey", lw=0.6, ls=":")
    ax.set_title("Memory-Fork held-out dungeons: the trainers, seeds pooled (dots: each seed)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--method",
        nargs="+",
        action="append",
        required=True,
        metavar="NAME_THEN_FILES",
        help="a method's name, then its result files, one per seed (repeat per method)",
    )
    parser.add_argument(
        "--versus",
        action="append",
        default=[],
        help="a method every row's deployed arm is paired against (repeatable)",
    )
    parser.add_argument("--out", required=True, help="JSON/MD/PNG stem")
    args = parser.parse_args()
    methods: dict[str, list[dict[str, Any]]] = {}
    for name, *files in args.method:
        if not files:
            parser.error(f"--method {name!r}: give its result files after the name")
        missing = [f for f in files if not Path(f).is_file()]
        if missing:
            parser.error(f"--method {name!r}: no file {missing[0]}")
        methods[name] = [json.loads(Path(f).read_text()) for f in files]
    unknown = set(args.versus) - set(methods)
    if unknown:
        parser.error(f"--versus: {sorted(unknown)} is not a --method")
    result = table(methods, args.versus)
    result["files"] = {name: [Path(f).name for f in files] for name, *files in args.method}
    out = Path(args.out)
    atomic_write_bytes(out.with_suffix(".json"), (json.dumps(result, indent=1) + "\n").encode())
    text = markdown(result)
    atomic_write_bytes(out.with_suffix(".md"), text.encode())
    plot(result, out.with_suffix(".png"))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
