"""What a training run reports: the evaluation table and the learning-curve plot.

One owner for the run's end products, read by ``comprl-gym train`` and the benchmarks:

* :func:`compare_with_before`: each after-training mode minus the untrained actor on the same
  evaluation tasks (paired by task, Newcombe's interval);
* :func:`format_results_table`: that table as Markdown;
* :func:`plot_learning_curve`: training success per iteration (each half of the groups) and
  the evaluations with their Wilson intervals, as a PNG.

Example:
    >>> before = {"env": {"without_experience": {"success": 0.25, "won": [1, 0, 0, 0]}}}
    >>> after = {"env": {"without_experience": {"success": 0.75, "won": [1, 1, 1, 0]}}}
    >>> comparison = compare_with_before(before, after)
    >>> round(comparison["env"]["without_experience"]["mean"], 2)
    0.5
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from comprl_gym.evaluation.stats import paired_difference_interval

logger = logging.getLogger(__name__)

MODES = ("without_experience", "with_experience")


def compare_with_before(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Per env id and after-training mode: success after minus before, with a 95% interval.

    Both evaluations play the same evaluation tasks in the same order, so the outcomes pair up
    task by task (Newcombe's paired interval). Env ids missing from either side are left out.
    """
    comparison: dict[str, Any] = {}
    for env_id, row in after.items():
        base = before.get(env_id, {}).get("without_experience")
        if not base or "won" not in base:
            continue
        comparison[env_id] = {
            mode: paired_difference_interval(row[mode]["won"], base["won"]).to_dict()
            for mode in MODES
            if mode in row and "won" in row[mode]
        }
    return comparison


def format_results_table(summary: dict[str, Any]) -> str:
    """The evaluation success table of a run (before training when measured), as Markdown."""

    def cell(result: dict[str, Any] | None) -> str:
        if not result:
            return "n/a"
        ci = result.get("success_ci") or {}
        if "low" in ci:
            return f"{result['success']:.2f} [{ci['low']:.2f}, {ci['high']:.2f}]"
        return f"{result['success']:.2f}"

    def diff(interval: dict[str, Any] | None) -> str:
        if not interval:
            return "n/a"
        return f"{interval['mean']:+.2f} [{interval['low']:+.2f}, {interval['high']:+.2f}]"

    before = summary.get("evaluation_before") or {}
    comparison = summary.get("comparison") or {}
    lines = [
        "| env id | before training | after, without experience | after, with experience "
        "| with experience - before | episodes |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for env_id, row in summary.get("evaluation", {}).items():
        base = before.get(env_id, {}).get("without_experience")
        lines.append(
            f"| {env_id} | {cell(base)} | {cell(row.get('without_experience'))} "
            f"| {cell(row.get('with_experience'))} "
            f"| {diff(comparison.get(env_id, {}).get('with_experience'))} "
            f"| {row.get('without_experience', {}).get('episodes', 0)} |"
        )
    return "\n".join(lines)


def plot_learning_curve(
    metrics: list[dict[str, Any]], summary: dict[str, Any], path: str | Path
) -> Path | None:
    """Training success per iteration and the evaluations, written to ``path``.

    Returns the path, or None when matplotlib is missing (the ``train`` extra has it).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover - matplotlib is in the train extra
        logger.warning("matplotlib is not installed; no learning-curve plot")
        return None
    fig, (ax_train, ax_health, ax_eval) = plt.subplots(
        1, 3, figsize=(15, 4), gridspec_kw={"width_ratios": [2, 1.4, 1]}
    )
    for key, label in (
        ("success", "all rollouts"),
        ("without_experience/success", "rollouts without experience"),
        ("with_experience/success", "rollouts with experience"),
    ):
        points = [(m["step"], m[key]) for m in metrics if key in m]
        if points:
            xs, ys = zip(*points)
            ax_train.plot(xs, ys, marker="o", label=label)
    ax_train.set_xlabel("iteration")
    ax_train.set_ylabel("training success")
    ax_train.set_ylim(-0.02, 1.02)
    ax_train.set_title(f"{summary.get('algorithm', '')}: training rollouts")
    ax_train.legend(fontsize=8)
    plot_training_health(ax_health, metrics)
    bars: list[tuple[str, dict[str, Any]]] = []
    env_ids = {*(summary.get("evaluation_before") or {}), *(summary.get("evaluation") or {})}

    def bar_label(when: str, env_id: str) -> str:
        # One env: its name goes in the title, the bars say only when (labels stay short).
        return when if len(env_ids) == 1 else f"{when}\n{env_id.split('/')[-1]}"

    for env_id, row in (summary.get("evaluation_before") or {}).items():
        bars.append((bar_label("before\ntraining", env_id), row["without_experience"]))
    for env_id, row in (summary.get("evaluation") or {}).items():
        for mode in MODES:
            if mode in row:
                when = f"after, {mode.replace('_experience', '')}\nexperience"
                bars.append((bar_label(when, env_id), row[mode]))
    for x, (name, result) in enumerate(bars):
        ci = result.get("success_ci", {})
        low, high = ci.get("low", result["success"]), ci.get("high", result["success"])
        ax_eval.bar(x, result["success"], color="C7" if name.startswith("before") else "C0")
        ax_eval.errorbar(
            x,
            result["success"],
            yerr=[[result["success"] - low], [high - result["success"]]],
            color="black",
            capsize=4,
        )
    ax_eval.set_xticks(range(len(bars)), [name for name, _ in bars], fontsize=7)
    ax_eval.set_ylim(0, 1)
    ax_eval.set_ylabel("evaluation success (95% Wilson)")
    episodes = bars[0][1].get("episodes", "?") if bars else "?"
    where = f"{next(iter(env_ids)).split('/')[-1]}\n" if len(env_ids) == 1 else ""
    ax_eval.set_title(f"{where}evaluation seeds, {episodes} episodes each", fontsize=10)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


#: What the health panel draws: metric -> (label, axis). Entropy on the left axis, the
#: zero-variance fraction on the right.
HEALTH = {
    "actor/entropy": ("actor entropy (nats/token)", "left"),
    "extractor/entropy": ("extractor entropy (nats/token)", "left"),
    "actor/zero_variance_groups": ("actor groups with one reward", "right"),
    "sensitivity/inverted": ("first move changed by an inverted lesson", "right"),
}


def plot_training_health(ax: Any, metrics: list[dict[str, Any]]) -> None:
    """The signs of a collapsing learner per iteration: the actor's and the extractor's policy
    entropy at their trained tokens, and the fraction of actor task groups whose rollouts all
    earned one reward (no signal)."""
    right = ax.twinx()
    lines = []
    for index, (key, (label, side)) in enumerate(HEALTH.items()):
        points = [(m["step"], m[key]) for m in metrics if m.get(key) is not None]
        if points:
            xs, ys = zip(*points)
            axis = ax if side == "left" else right
            style = "o-" if side == "left" else "s--"
            lines += axis.plot(xs, ys, style, color=f"C{index + 3}", label=label)
    ax.set_xlabel("iteration")
    ax.set_ylabel("entropy (nats per trained token)")
    right.set_ylabel("fraction of groups")
    right.set_ylim(-0.02, 1.02)
    ax.set_title("training health", fontsize=10)
    if lines:
        ax.legend(lines, [line.get_label() for line in lines], fontsize=7)


__all__ = [
    "compare_with_before",
    "format_results_table",
    "plot_learning_curve",
    "plot_training_health",
]
