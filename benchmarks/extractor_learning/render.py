"""The extractor-learning page's tables (``docs/results/extractor-learning.md``), from
``extractor_learning.json`` and ``probe-rescored/``."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from benchmarks.common import RESULTS
from benchmarks.tables import interval, result, table
from comprl_gym.evaluation.stream import paired_cell

#: The extractor-learning study's lesson writers, in the order its tables print them.
LEARNING_WRITERS = {
    "trained": "trained",
    "frozen": "frozen",
    "outcome_aware": "scripted outcome-aware rule",
}


def _overridden(overrides: list[str]) -> str:
    """A run's config overrides as a label's tail: ``, extractor.lr=5e-4``, or nothing."""
    return "".join(f", {o}" for o in overrides)


def _learning_runs() -> dict[str, dict[str, Any]]:
    """The extractor-learning study's probed runs: each seed, each try with a probe, then the
    perfect-credit diagnostics."""
    study = result("extractor_learning.json")
    runs = {f"seed {seed}": data for seed, data in study["seeds"].items()}
    runs.update(
        {
            f"seed {seed}, to iteration {d['iterations']}": d
            for seed, d in study.get("continued", {}).items()
        }
    )
    runs.update({name.replace("_", " "): t for name, t in study["tries"].items() if "trained" in t})
    runs.update(
        {
            f"perfect credit, {d['steps']} updates{_overridden(d['overrides'])} (diagnostic)": d
            for d in study["perfect_credit"].values()
        }
    )
    return runs


def _rate_cells(writer: dict, rate: str) -> list[str]:
    """A writer's ``rate`` (``right``: sampled, ``greedy_right``: its likeliest side) after a
    win and after a loss: the Wilson interval and the count."""
    c = writer["counts"]
    return [
        f"{interval(writer[f'{rate}_after_{o}'])} ({c[f'{rate}_{o}']}/{c[o]})"
        for o in ("won", "lost")
    ]


def _versus_cells(data: dict, key: str) -> list[str]:
    """The trained writer's row tail: minus the frozen one after a win and after a loss
    (paired), and the bar; blank for the other writers."""
    if key != "trained":
        return ["", "", ""]
    versus = data["trained_minus_frozen"]
    bar = "yes" if data["meets_the_bar"] else "no"
    return [paired_cell(versus["after_won"]), paired_cell(versus["after_lost"]), bar]


def extractor_learning_table() -> str:
    """Per run: each writer's P(right | won) and P(right | lost) on the probe episodes, and
    the trained extractor minus the frozen one, paired (``extractor_learning.json``)."""
    rows = []
    for run, data in _learning_runs().items():
        for key, label in LEARNING_WRITERS.items():
            rows.append([run, label, *_rate_cells(data[key], "right"), *_versus_cells(data, key)])
    head = [
        "run",
        "lesson writer",
        "right after a win",
        "right after a loss",
        "trained minus frozen, after a win",
        "trained minus frozen, after a loss",
        "meets the bar",
    ]
    return table(head, rows)


def extractor_learning_sides_table() -> str:
    """Per run: the side each extractor named on the probe, per (walked side, outcome) cell
    (``extractor_learning.json``), as east / west."""
    runs = _learning_runs()
    cells = sorted({cell for d in runs.values() for cell in d["trained"]["sides_named"]})
    rows = []
    for run, data in runs.items():
        for key in ("frozen", "trained", "outcome_aware"):
            named = data[key]["sides_named"]
            rows.append(
                [run, LEARNING_WRITERS[key]]
                + [f"{named[c]['east']} / {named[c]['west']}" if c in named else "" for c in cells]
            )
    return table(["run", "lesson writer", *cells], rows)


def _longest_run(study: dict, seed: str) -> dict:
    """A seed's extractor-learning run as trained longest: its continuation when there is one
    (whose logs hold the first iterations too), else the run."""
    return study.get("continued", {}).get(seed) or study["seeds"][seed]


def extractor_learning_curve_table() -> str:
    """The probe each extractor-learning run logged every few iterations, right after a win /
    after a loss of 16 each: the seeds (their continuation's log when there is one, which
    holds the first iterations too) and the perfect-credit diagnostics
    (``extractor_learning.json``)."""
    study = result("extractor_learning.json")
    columns = {}
    for seed in study["seeds"]:
        columns[f"seed {seed}"] = _longest_run(study, seed)["curve"]
    for d in study["perfect_credit"].values():
        columns[f"perfect credit{_overridden(d['overrides'])}"] = d["curve"]
    logged = {
        name: {r["iteration"]: f"{r['probe_right_won']} / {r['probe_right_lost']}" for r in curve
               if "probe_right_won" in r}
        for name, curve in columns.items()
    }  # fmt: skip
    iterations = sorted({i for cells in logged.values() for i in cells})
    rows = [[str(i)] + [logged[name].get(i, "") for name in columns] for i in iterations]
    return table(["iteration", *columns], rows)


def extractor_learning_windows_table() -> str:
    """Per seed (its continuation when there is one), per ten iterations: the trained samples,
    how many named the stairs' side and east, and how often the credit's sign agreed with the
    lesson's correctness (``extractor_learning.json``, ``trained_lessons.by_window``)."""
    study = result("extractor_learning.json")
    rows = []
    for seed in study["seeds"]:
        for w in _longest_run(study, seed)["trained_lessons"]["by_window"]:
            rows.append(
                [
                    f"seed {seed}",
                    w["iterations"],
                    str(w["samples"]),
                    f"{w['right']} ({w['right'] / w['samples']:.2f})",
                    str(w["east"]),
                    f"{w['agree']} of {w['signed']}",
                ]
            )
    head = ["run", "iterations", "samples", "naming the stairs' side", "naming east",
            "credit's sign agrees"]  # fmt: skip
    return table(head, rows)


def extractor_learning_representation_table() -> str:
    """Per extractor: held-out accuracy of a linear read-out of its features at the answer
    position (fitted on scripted `train` walks, scored on the 32 probe episodes) for the
    stairs' side, the walked side and the outcome, per layer; and its own greedy choice
    (``extractor_learning.json``, ``representation``)."""
    study = result("extractor_learning.json")["representation"]
    n = study["test_episodes"]
    rows = []
    for name, writer in study["writers"].items():
        for layer in study["layers"]:
            decoded = writer["decoded"][str(layer)]
            rows.append(
                [
                    name,
                    f"{layer}",
                    *(
                        f"{round(decoded[t] * n)}/{n}"
                        for t in ("stairs_side", "walked_side", "won")
                    ),
                    f"{writer['greedy_names_stairs']}/{n}",
                ]
            )
    head = ["extractor", "layer", "stairs' side (the rule)", "walked side", "outcome",
            "its own greedy choice names the stairs' side"]  # fmt: skip
    return table(head, rows)


def probe_rescored_table() -> str:
    """The frozen extractor probed again with one draw per episode
    (``benchmarks/results/probe-rescored/``): sampled, greedy and mean-probability rates."""
    rows = []
    for path in sorted((RESULTS / "probe-rescored").glob("*.json")):
        report = json.loads(path.read_text(encoding="utf-8"))["families"]["memory"][0]
        seed = path.stem.rsplit("seed", 1)[-1]
        cells = []
        for key in ("right_after", "greedy_right_after", "p_right_after"):
            for outcome in ("won", "lost"):
                cells.append(interval(report[f"{key}_{outcome}"]))
        rows.append([f"frozen SmolLM2, temperature 1.5, seed {seed}", *cells])
    head = [
        "extractor",
        "sampled right after a win",
        "after a loss",
        "greedy right after a win",
        "after a loss",
        "P(right) after a win",
        "after a loss",
    ]
    return table(head, rows)


def _passing_runs(study: dict) -> dict[str, dict[str, Any]]:
    """The passing-learner study's probed runs: each seed, then each seed's continuation."""
    runs = {f"seed {seed}": data for seed, data in study["seeds"].items()}
    runs.update(
        {
            f"seed {seed}, to iteration {d['iterations']}": d
            for seed, d in study.get("continued", {}).items()
        }
    )
    return {run: data for run, data in runs.items() if "trained" in data}


def passing_learner_table() -> str:
    """The rerun with the learner that passed the ladder (``extractor_learning_context.json``):
    per run, the trained extractor's and the frozen one's greedy choice right after a win and
    after a loss (Wilson), the mean P(right), the trained minus the frozen one paired over the
    probe episodes, and the bar."""
    rows = []
    for run, data in _passing_runs(result("extractor_learning_context.json")).items():
        for key in ("trained", "frozen"):
            w = data[key]
            rows.append(
                [
                    run,
                    key,
                    *_rate_cells(w, "greedy_right"),
                    f"{w['p_right_after_won']['mean']:.2f} / {w['p_right_after_lost']['mean']:.2f}",
                    *_versus_cells(data, key),
                ]
            )
    head = [
        "run",
        "extractor",
        "greedy right after a win",
        "greedy right after a loss",
        "mean P(right), win / loss",
        "trained minus frozen, after a win",
        "after a loss",
        "meets the bar",
    ]
    return table(head, rows)


def passing_learner_curve_table() -> str:
    """The probe each passing-learner run logged every 5 iterations (its continuation's log
    when there is one, which holds the first iterations too): greedy right after a win / after
    a loss (16 each), beside the ladder's perfect-credit climb of the same learner (greedy
    right of all 32, at the same number of updates: iteration - 1)."""
    study = result("extractor_learning_context.json")
    columns: dict[str, dict[int, str]] = {}
    for seed in study["seeds"]:
        columns[f"seed {seed}"] = {
            r["iteration"]: f"{round(16 * r['probe_greedy_won'])} / "
            f"{round(16 * r['probe_greedy_lost'])}"
            for r in _longest_run(study, seed)["curve"]
            if r.get("probe_greedy_won") is not None
        }
    for seed, data in study["perfect_credit"].items():
        columns[f"perfect credit (ladder), seed {seed}, of 32"] = {
            p["updates"] + 1: str(p["greedy_right"]) for p in data["curve"]
        }
    iterations = sorted({i for cells in columns.values() for i in cells})
    rows = [[str(i)] + [cells.get(i, "") for cells in columns.values()] for i in iterations]
    return table(["iteration", *columns], rows)


def passing_learner_sides_table() -> str:
    """The side each passing-learner run's extractor names greedily per (walked side,
    outcome) cell, as east / west, beside the frozen one's (``extractor_learning_context.
    json``; the sampled sides are near a coin at temperature 10 and are not shown)."""
    runs = _passing_runs(result("extractor_learning_context.json"))
    cells = sorted(next(iter(runs.values()))["greedy_sides"]["trained"])
    rows = [
        [run, key] + [f"{named[c]['east']} / {named[c]['west']}" for c in cells]
        for run, data in runs.items()
        for key, named in data["greedy_sides"].items()
    ]
    return table(["run", "extractor", *cells], rows)


#: Table name (the page's ``<!-- generated: NAME -->``) -> its renderer.
TABLES: dict[str, Callable[[], str]] = {
    "extractor-learning": extractor_learning_table,
    "extractor-learning-sides": extractor_learning_sides_table,
    "extractor-learning-curve": extractor_learning_curve_table,
    "extractor-learning-windows": extractor_learning_windows_table,
    "extractor-learning-representation": extractor_learning_representation_table,
    "probe-rescored": probe_rescored_table,
    "extractor-learning-passing": passing_learner_table,
    "extractor-learning-passing-curve": passing_learner_curve_table,
    "extractor-learning-passing-sides": passing_learner_sides_table,
}
