"""The capable-extractor table's page (``docs/results/capable-table.md``), from
``capable_table.json`` and the per-episode records committed beside it
(``benchmarks/results/capable-table/``): the primary and secondary comparisons with the
training seed as the unit, every run's lesson sensitivity by iteration, the refined
extractors' probes, and what each run ran."""

from __future__ import annotations

import argparse
import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import REPO, RESULTS
from benchmarks.tables import interval, p_value, result, table
from comprl_gym.evaluation.table import markdown as method_table_markdown

RESULT = "capable_table.json"


def capable_table() -> str:
    """Every method's row (``comprl-gym table``'s Markdown of the registered runs)."""
    return method_table_markdown(result(RESULT)).rstrip("\n")


def comparisons_table(name: str) -> str:
    """A registered table's comparisons at its plan's visit (result file ``name``, either
    plan's): the primary first, then the secondary ones; between seeds where the result has it
    (a t interval over the seeds' paired differences, the unit), pooled (Newcombe, McNemar)
    and per seed."""
    registered = result(name)
    primary = registered["plan"]["content"]["primary"]
    visit = str(primary["visit"])
    seeds = [str(s) for s in registered["plan"]["content"]["seeds"]]
    treatment = next(row for row in registered["rows"] if row["method"] == primary["treatment"])
    cells = {other: treatment["versus"][other] for other in registered["versus"]}
    between = all("between_seeds" in cell for cell in cells.values())
    rows = []
    for other, cell in cells.items():
        pooled = cell["this_minus_that"][visit]
        per_seed = [f"{cell['per_seed'][s][visit]['difference']['mean']:+.2f}" for s in seeds]
        rows.append(
            [
                f"{primary['treatment']} − {other}",
                "primary" if other == primary["control"] else "secondary",
                *([interval(cell["between_seeds"][visit], True)] if between else []),
                str(pooled["pairs"]),
                interval(pooled["difference"], True),
                p_value(pooled["mcnemar_p"]),
                ", ".join(per_seed),
            ]
        )
    head = [
        f"visit {visit}, deployed arms",
        "",
        *([f"between {len(seeds)} seeds (t, 95%)"] if between else []),
        "pairs",
        "difference [95%]",
        "McNemar",
        f"per seed ({', '.join(seeds)})",
    ]
    return table(head, rows)


def capable_comparisons_table() -> str:
    """Complementary RL against every other method (:func:`comparisons_table`)."""
    return comparisons_table(RESULT)


def record(name: str) -> str:
    """A committed record file of the table (gzipped), as text."""
    folder = REPO / result(RESULT)["plan"]["content"]["records"]
    return gzip.decompress((folder / f"{name}.gz").read_bytes()).decode()


def records(name: str) -> list[dict[str, Any]]:
    """A committed JSON-lines record of the table, as its rows."""
    return [json.loads(line) for line in record(name).splitlines() if line.strip()]


def slug(name: str) -> str:
    from benchmarks.sealed_table.run import slug as folder_slug

    return folder_slug(name)


def capable_sensitivity_table() -> str:
    """Per (method, seed): on how many of the 16 unseen dungeons an inverted lesson changed
    the actor's greedy first move, at the first iteration, the lowest and the last; and the
    first iteration where fewer than half did (the actor stopped reading), if any."""
    capable = result(RESULT)
    rows = []
    for method in capable["plan"]["content"]["methods"]:
        for seed in capable["plan"]["content"]["seeds"]:
            metrics = records(f"{slug(method['name'])}-seed{seed}-metrics.jsonl")
            logged = [m for m in metrics if "sensitivity/inverted" in m]
            tasks = int(logged[0]["sensitivity/tasks"])
            moved = [round(m["sensitivity/inverted"] * tasks) for m in logged]
            stopped = next((m["step"] for m, k in zip(logged, moved) if k < tasks / 2), None)
            rows.append(
                [
                    method["name"],
                    str(seed),
                    f"{moved[0]}/{tasks}",
                    f"{min(moved)}/{tasks}",
                    f"{moved[-1]}/{tasks}",
                    "never" if stopped is None else f"iteration {stopped}",
                ]
            )
    head = [
        "method",
        "seed",
        "inverted lesson moved the first step: iteration 1",
        "lowest",
        "last",
        "stopped reading (under half)",
    ]
    return table(head, rows)


def capable_probes_table() -> str:
    """The probed extractors (``probe: true``) after training beside their start: right after
    a win and after a loss, one sampled lesson per episode (Wilson), and the mean probability
    of the right side."""
    capable = result(RESULT)
    rows = []
    for method in capable["plan"]["content"]["methods"]:
        if not method.get("probe"):
            continue
        for seed in capable["plan"]["content"]["seeds"]:
            runs_folder = capable["plan"]["content"]["runs"].rsplit("/", 1)[-1]
            probe = json.loads(
                record(f"{runs_folder}-probe-{slug(method['name'])}-seed{seed}.json")
            )
            for report in probe["families"]["memory"]:
                if report["name"].startswith("scripted"):
                    continue
                rows.append(
                    [
                        method["name"],
                        str(seed),
                        "after training" if report["name"].startswith("trained") else "start",
                        interval(report["right_after_won"]),
                        interval(report["right_after_lost"]),
                        f"{report['p_right_after_won']['mean']:.2f} / "
                        f"{report['p_right_after_lost']['mean']:.2f}",
                    ]
                )
    head = [
        "method",
        "seed",
        "extractor",
        "right after a win",
        "right after a loss",
        "mean P(right), win / loss",
    ]
    return table(head, rows)


def runs_table(name: str) -> str:
    """Each (method, seed) of a registered table (result file ``name``, either plan's): whether
    both its runs ran the registered inputs, the minutes each took, the dungeons it trained on
    and its streamed checkpoint's hash."""
    rows = []
    for method, by_seed in result(name)["runs"].items():
        for seed, run in by_seed.items():
            trainer = run["checkpoint"]["files"]["trainer.pt"]
            tasks = run["training_tasks"].values()
            rows.append(
                [
                    method,
                    seed,
                    "yes" if all(c["inputs_as_registered"] for c in run["code"].values()) else "no",
                    f"{run['time_s']['train'] / 60:.1f}",
                    f"{run['time_s']['stream'] / 60:.1f}",
                    ", ".join(f"{len(t['played'])} {t['env_kwargs']['split']}" for t in tasks),
                    f"`{trainer[:12]}…`",
                ]
            )
    head = [
        "method",
        "seed",
        "inputs as registered",
        "train (min)",
        "stream (min)",
        "dungeons trained on",
        "trainer.pt sha256",
    ]
    return table(head, rows)


def capable_runs_table() -> str:
    """What each (method, seed) of the capable table ran (:func:`runs_table`)."""
    return runs_table(RESULT)


def plot_sensitivity(path: Path) -> None:
    """Every run's lesson sensitivity by iteration (one panel a method, one line a seed): the
    fraction of the unseen dungeons on which an inverted lesson changed the greedy first
    move, and the placebo's dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    content = result(RESULT)["plan"]["content"]
    methods = content["methods"]
    fig, axes = plt.subplots(1, len(methods), figsize=(3.2 * len(methods), 3), sharey=True)
    for ax, method in zip(list(getattr(axes, "flat", [axes])), methods):
        for seed in content["seeds"]:
            metrics = records(f"{slug(method['name'])}-seed{seed}-metrics.jsonl")
            logged = [m for m in metrics if "sensitivity/inverted" in m]
            steps = [m["step"] for m in logged]
            (line,) = ax.plot(
                steps,
                [m["sensitivity/inverted"] for m in logged],
                marker="o",
                ms=3,
                label=f"seed {seed}",
            )
            ax.plot(
                steps,
                [m["sensitivity/placebo"] for m in logged],
                "--",
                color=line.get_color(),
                alpha=0.5,
            )
        ax.set_title(method["name"], fontsize=9)
        ax.set_xlabel("iteration")
        ax.set_ylim(-0.05, 1.05)
    first = list(getattr(axes, "flat", [axes]))[0]
    first.set_ylabel("first move changed\n(inverted lesson; placebo dashed)")
    first.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    """Writes the sensitivity plot beside the result: ``capable_table_sensitivity.png``."""
    argparse.ArgumentParser(
        description="Plot every run's lesson sensitivity by iteration from the capable "
        "table's committed records: benchmarks/results/capable_table_sensitivity.png"
    ).parse_args(argv)
    out = RESULTS / "capable_table_sensitivity.png"
    plot_sensitivity(out)
    print(f"wrote {out}")
    return 0


#: Table name (the page's ``<!-- generated: NAME -->``) -> its renderer.
TABLES: dict[str, Callable[[], str]] = {
    "capable-table": capable_table,
    "capable-comparisons": capable_comparisons_table,
    "capable-sensitivity": capable_sensitivity_table,
    "capable-probes": capable_probes_table,
    "capable-runs": capable_runs_table,
}


if __name__ == "__main__":
    raise SystemExit(main())
