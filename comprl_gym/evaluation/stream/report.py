"""A stream's summary shown: Markdown tables (``summary.md``) and the success-by-visit plot."""

from __future__ import annotations

from typing import Any


def stream_markdown(summary: dict[str, Any]) -> str:
    """The stream's part of ``summary.md``: success by visit per arm and, where the family
    judges lessons, each store's verdicts."""
    lines = [
        "\n## Success by visit, per arm (paired with none)\n",
        streaming_markdown(summary["streaming"]),
    ]
    if summary.get("versus"):
        lines += [
            "\n## Treatment minus placebo (paired episode by episode)\n",
            versus_markdown(summary["versus"]),
        ]
    verdicts = summary.get("store_verdicts")
    if verdicts:
        lines += [
            "\n## What each store's lessons say (the family's judge)\n",
            "| store | " + " | ".join(next(iter(verdicts.values()))) + " |",
            "| --- |" + " --- |" * len(next(iter(verdicts.values()))),
        ]
        lines += [
            f"| {name} | " + " | ".join(str(n) for n in counts.values()) + " |"
            for name, counts in verdicts.items()
        ]
    shown = summary.get("shown_verdicts")
    if shown:
        lines += [
            "\n## What each arm showed at a later visit, by how its previous visit ended\n",
            "| arm | after a win: right | wrong | no side | after a loss: right | wrong | no side |",
            "| --- |" + " --- |" * 6,
        ]
        lines += [
            f"| {arm} | "
            + " | ".join(str(n) for after in row.values() for n in after.values())
            + " |"
            for arm, row in shown.items()
        ]
    return "\n".join(lines) + "\n"


def streaming_markdown(summary: dict[str, Any], reference: str = "none") -> str:
    """:func:`~comprl_gym.evaluation.stream.summary.streaming_summary` as a Markdown table:
    per arm the success at each visit and over all (Wilson intervals), and over all visits its
    difference from ``reference`` (Newcombe's interval, McNemar's exact p).

    Example:
        >>> from comprl_gym.evaluation.stream.summary import streaming_summary
        >>> records = [{"arm": arm, "visit": v, "task_index": t, "won": arm == "oracle"}
        ...            for arm in ("none", "oracle") for v in (1, 2) for t in range(4)]
        >>> print(streaming_markdown(streaming_summary(records)))
        | arm | visit 1 | visit 2 | all visits | minus none (all visits) | McNemar p |
        | --- | --- | --- | --- | --- | --- |
        | none | 0.00 [0.00, 0.49] | 0.00 [0.00, 0.49] | 0.00 [0.00, 0.32] |  |  |
        | oracle | 1.00 [0.51, 1.00] | 1.00 [0.51, 1.00] | 1.00 [0.68, 1.00] | +1.00 [+0.54, +1.00] | 0.00781 |
    """
    visits = sorted({v for row in summary.values() for v in row["visits"] if v != "all"}, key=int)
    lines = [
        "| arm | "
        + " | ".join(f"visit {v}" for v in visits)
        + f" | all visits | minus {reference} (all visits) | McNemar p |",
        "| --- | " + " | ".join("---" for _ in visits) + " | --- | --- | --- |",
    ]
    for arm, row in summary.items():
        cells = [_cell(row["visits"][v]["success"]) if v in row["visits"] else "" for v in visits]
        paired = row.get(f"minus_{reference}", {}).get("all")
        difference = p = ""
        if paired and paired["pairs"]:
            d = paired["difference"]
            difference = f"{d['mean']:+.2f} [{d['low']:+.2f}, {d['high']:+.2f}]"
            p = f"{paired['mcnemar_p']:.3g}"
        lines.append(
            f"| {arm} | "
            + " | ".join(cells)
            + f" | {_cell(row['visits']['all']['success'])} | {difference} | {p} |"
        )
    return "\n".join(lines)


def _cell(ci: dict[str, Any]) -> str:
    if not ci.get("n") or ci["mean"] != ci["mean"]:  # no episodes, or NaN
        return "n/a"
    return f"{ci['mean']:.2f} [{ci['low']:.2f}, {ci['high']:.2f}]"


def versus_markdown(versus: dict[str, Any]) -> str:
    """:func:`~comprl_gym.evaluation.stream.summary.versus_summary` as a Markdown table: each
    comparison's paired difference at each visit and over all visits, with its interval and
    McNemar's p.

    Example:
        >>> from comprl_gym.evaluation.stream.summary import versus_summary
        >>> records = [{"arm": arm, "visit": 1, "task_index": t, "won": won}
        ...            for arm, outcomes in (("own", [1, 1, 1, 0]), ("coin", [1, 0, 0, 0]))
        ...            for t, won in enumerate(outcomes)]
        >>> print(versus_markdown(versus_summary(records, [("own", "coin")])))
        | comparison | visit 1 | all visits |
        | --- | --- | --- |
        | own minus coin | +0.50 [-0.14, +0.79] (p 0.5) | +0.50 [-0.14, +0.79] (p 0.5) |
    """
    labels = list(next(iter(versus.values()))) if versus else []
    header = [f"visit {v}" if v != "all" else "all visits" for v in labels]
    lines = [
        "| comparison | " + " | ".join(header) + " |",
        "| --- | " + " | ".join("---" for _ in header) + " |",
    ]
    for name, by_visit in versus.items():
        cells = [paired_cell(by_visit[label]) for label in labels]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def paired_cell(paired: dict[str, Any]) -> str:
    """One paired comparison as the stream prints it: ``+0.50 [-0.14, +0.79] (p 0.5)``."""
    if not paired["pairs"]:
        return "n/a"
    d = paired["difference"]
    return f"{d['mean']:+.2f} [{d['low']:+.2f}, {d['high']:+.2f}] (p {paired['mcnemar_p']:.3g})"


def plot_streaming(summary: dict[str, Any], path: Any, title: str = "success by visit") -> None:
    """Success by visit, one line per arm, with Wilson intervals (a PNG at ``path``)."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from comprl_gym.utils import atomic_write_bytes

    fig, ax = plt.subplots(figsize=(7, 4.2))
    visits = sorted({int(v) for row in summary.values() for v in row["visits"] if v != "all"})
    for i, (arm, row) in enumerate(summary.items()):
        cells = [row["visits"][str(v)]["success"] for v in visits]
        # Arms side by side at each visit, so their intervals do not hide each other.
        shifted = [v + (i - len(summary) / 2) * 0.03 for v in visits]
        ax.errorbar(
            shifted,
            [c["mean"] for c in cells],
            yerr=[[c["mean"] - c["low"] for c in cells], [c["high"] - c["mean"] for c in cells]],
            marker="o",
            capsize=3,
            label=arm,
        )
    ax.set_xticks(visits)
    ax.set_xlabel("visit to the held-out task")
    ax.set_ylabel("success (95% Wilson interval)")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(title)
    ax.legend(ncol=3, fontsize=8)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120)
    plt.close(fig)
    atomic_write_bytes(path, buffer.getvalue())
