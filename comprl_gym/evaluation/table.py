"""``comprl-gym table``: the paper's method table, each method's runs pooled over seeds.

One row per method (GRPO, static experience, experience-only, Complementary RL, ...), each
given as one streamed run per seed. A method's *deployed* arm is what a user of it gets on a
held-out task: its own store's lessons (``own``), or no lessons for a method without an
extractor (GRPO's ``none``). Per method:

- success of each arm (``none``, ``own``, ``oracle``, and the family's scripted ceiling
  ``outcome_aware`` where it was streamed) at the last visit and over all visits,
  the seeds' episodes pooled (Wilson), and each seed's own rate at the last visit;
- the deployed arm minus each ``versus`` method's deployed arm, paired episode by episode on
  common random numbers (the same reset and sampling seed per (seed, task, visit)), per seed
  and pooled over the seeds both ran (Newcombe's interval, McNemar's exact p; :func:`pooled`),
  and between seeds (each seed's paired difference one observation, a t interval: the
  training seed as the unit, which the pooled interval is not);
- the deployed arm minus the same runs' ``none`` (what its lessons do to its own actor);
- where the family judges lessons, what its extractor wrote: lessons naming the right side in
  the training store and in the held-out store, and the CISPO batches that carried a gradient.

A run is a ``comprl-gym stream`` run folder (of a ``--run`` training run: the trainer, its
store's verdicts and its extractor's updates are read from that run's folder) or a result
file of ``benchmarks/experience_transfer/run.py`` (the committed
``benchmarks/results/extractor_memory_*.json``); :func:`load_run` reads either.
:func:`write_table` writes ``<out>.json``, ``<out>.md`` (the table) and ``<out>.png``
(success with intervals, one dot per seed).

Example (two seeds of a method with a store against GRPO's, by hand: static's own arm wins 3
of 4 at visit 1, GRPO's none 2 of 4; paired, +0.25):
    >>> def run(seed, algorithm, arms):
    ...     episodes = [{"arm": arm, "visit": 1, "task_index": t, "won": w, "reset_seed": t,
    ...                  "sampling_seed": seed} for arm, won in arms.items()
    ...                 for t, w in enumerate(won)]
    ...     return Run(seed, algorithm, "stem", episodes)
    >>> grpo = [run(0, "grpo", {"none": [1, 0]}), run(1, "grpo", {"none": [0, 1]})]
    >>> static = [run(0, "static_experience", {"none": [0, 0], "own": [1, 1]}),
    ...           run(1, "static_experience", {"none": [0, 0], "own": [0, 1]})]
    >>> out = method_table({"GRPO": grpo, "static": static}, against=["GRPO"])
    >>> row = out["rows"][1]
    >>> row["deployed_arm"], row["success"]["own"]["1"]["mean"]
    ('own', 0.75)
    >>> row["versus"]["GRPO"]["this_minus_that"]["1"]["difference"]["mean"]
    0.25

    With the training seed as the unit, the seeds' differences are +0.5 and 0.0: mean 0.25,
    and Student's t with one degree of freedom (12.7 x 0.354 / sqrt 2 = 3.18) spans every
    difference there is:
    >>> cell = row["versus"]["GRPO"]["between_seeds"]["1"]
    >>> cell["mean"], cell["low"], cell["high"], cell["n"], cell["method"]
    (0.25, -1.0, 1.0, 2, 'student-t')
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from comprl_gym.core import DataError
from comprl_gym.evaluation.stats import mean_ci
from comprl_gym.evaluation.stream import compare_runs, streaming_summary
from comprl_gym.utils import atomic_write_bytes

#: The arms a row reports: no lessons, the run's own store, the benchmark's oracle lesson, and
#: the family's scripted ceiling of any extractor (the memory family's ``outcome_aware``).
ARMS = ("none", "own", "oracle", "outcome_aware")
#: The column of the scripted ceiling, shown where a row streamed it.
CEILING = "outcome_aware"
#: The stores whose lessons a row counts: the one the run trained with, the held-out one.
STORES = ("training_run", "own")


@dataclass
class Run:
    """One method's streamed run at one seed, as the table reads it.

    Attributes:
        seed: the run's seed (training and streaming).
        algorithm: the trainer (``grpo``, ``complementary``, ...).
        extractor_format: ``experience.extractor_format`` of its training config (``""``:
            not recorded).
        episodes: one record per streamed episode (``arm``, ``visit``, ``task_index``, ``won``,
            ``reset_seed``, ``sampling_seed``).
        store_sides: per store (``training_run``, ``own``) the count of its lessons per
            verdict of the family's lesson judge (``right``, ``wrong``, ...); empty where
            nothing judged them.
        cispo_batches: the extractor's CISPO batches under the credit rule it trained with,
            ``batches`` and ``batches_with_signal`` (some advantage nonzero: a gradient);
            ``None``: no extractor trained.
        source: the file or folder it was read from (its name goes into the table).
    """

    seed: int
    algorithm: str
    extractor_format: str
    episodes: list[dict[str, Any]]
    store_sides: dict[str, dict[str, int]] = field(default_factory=dict)
    cispo_batches: dict[str, int] | None = None
    source: str = ""


def run_from_result(result: dict[str, Any], source: str = "") -> Run:
    """A :class:`Run` from a ``benchmarks/experience_transfer/run.py`` result (its ``config``
    key is the run's :class:`~comprl_gym.trainers.TrainConfig` as a mapping)."""
    config = result["config"]
    experience = config.get("experience", {})
    # Both credit rules are judged in the file; the batches are those of the rule it trained with.
    agreement = result.get("credit_agreement") or {}
    rule = agreement.get(experience.get("extractor_baseline", "batch"))
    return Run(
        seed=int(config["seed"]),
        algorithm=str(config["algorithm"]),
        extractor_format=str(experience.get("extractor_format", "operations")),
        episodes=result["episodes"],
        store_sides=result.get("store_sides") or {},
        cispo_batches={k: rule[k] for k in ("batches", "batches_with_signal")} if rule else None,
        source=source,
    )


def training_facts(run_dir: Path) -> dict[str, Any]:
    """What a table reads of a ``comprl-gym train`` run folder: its trainer and config
    (``summary.json``, written when the run ends), the verdicts of its store's lessons
    at the last iteration that logged them (``metrics.jsonl``'s ``store/<family>/<verdict>``,
    summed over families) and its extractor's CISPO updates (one per iteration that took
    one: ``extractor/batch``; with a gradient where ``extractor/samples`` is nonzero)."""
    facts: dict[str, Any] = {"algorithm": "", "config": {}, "verdicts": {}, "cispo": None}
    summary = run_dir / "summary.json"
    if summary.is_file():
        written = json.loads(summary.read_text())
        facts["algorithm"] = written.get("algorithm", "")
        facts["config"] = written.get("config", {})
    metrics = run_dir / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    updates = [r for r in rows if "extractor/batch" in r]
    if updates:
        signal = sum(1 for r in updates if r.get("extractor/samples", 0) > 0)
        facts["cispo"] = {"batches": len(updates), "batches_with_signal": signal}
    for row in reversed(rows):
        verdicts = {k: v for k, v in row.items() if k.startswith("store/")}
        if verdicts:
            for key, count in verdicts.items():
                verdict = key.rsplit("/", 1)[1]
                facts["verdicts"][verdict] = facts["verdicts"].get(verdict, 0) + count
            break
    return facts


def run_from_stream(folder: Path) -> Run:
    """A :class:`Run` from a ``comprl-gym stream`` run folder: its episodes, its seed, the
    verdicts of its ``own`` arm's store (``summary.json``'s ``store_verdicts``) and, for a
    stream of a ``--run`` training run, that run's :func:`training_facts`."""
    from comprl_gym.evaluation.eval import CONFIG_FILE, SUMMARY_FILE, load_episodes

    config = json.loads((folder / CONFIG_FILE).read_text())["config"]
    summary = json.loads((folder / SUMMARY_FILE).read_text())
    facts: dict[str, Any] = {"algorithm": config["agent"], "config": {}, "verdicts": {}}
    if config.get("run"):
        run_dir = Path(config["run"])
        if not (run_dir / "metrics.jsonl").is_file():
            raise DataError(
                folder, f"streamed the training run {run_dir}, which is not there to read"
            )
        facts = training_facts(run_dir)
    store_sides = {}
    if "own" in summary.get("store_verdicts", {}):
        store_sides = {"own": summary["store_verdicts"]["own"], "training_run": facts["verdicts"]}
    experience = facts["config"].get("experience", {})
    return Run(
        seed=int(config["seed"]),
        algorithm=facts["algorithm"],
        extractor_format=experience.get("extractor_format", ""),
        episodes=load_episodes(folder, repair=False),
        store_sides=store_sides,
        cispo_batches=facts.get("cispo"),
        source=folder.name,
    )


def load_run(path: str | Path) -> Run:
    """A run from a ``comprl-gym stream`` run folder or a result JSON file
    (``benchmarks/results/extractor_memory_*.json``).

    Raises:
        DataError: the path is missing or is neither.
    """
    path = Path(path)
    if not path.exists():
        raise DataError(path, "no such run folder or result file")
    try:
        if path.is_dir():
            return run_from_stream(path)
        return run_from_result(json.loads(path.read_text()), path.name)
    except (ValueError, KeyError, TypeError, OSError) as exc:
        raise DataError(path, f"not a streamed run's results ({exc!r})") from exc


def keyed(run: Run, key: Any, arm: str | None = None) -> list[dict[str, Any]]:
    """The run's episodes (of ``arm``, or all), each task index made ``(key, task)``, so that
    several runs pool without one run's task overwriting another's of the same index.

    Example:
        >>> keyed(Run(1, "grpo", "stem", [{"arm": "own", "task_index": 3}]), 1)
        [{'arm': 'own', 'task_index': (1, 3)}]
    """
    return [
        dict(e, task_index=(key, e["task_index"]))
        for e in run.episodes
        if arm is None or e["arm"] == arm
    ]


def pooled(pairs: list[tuple[Run, Run]], arm: str) -> dict[str, Any]:
    """``arm`` of each pair's first run minus its second, pooled over the pairs, per visit
    (:func:`~comprl_gym.evaluation.stream.summary.compare_runs`: a :class:`ValueError`
    unless each pair shares its episodes' seeds).

    Example (two pairs of one task each; visit 1 won 1-0 in the first pair, 0-0 in the second):
        >>> def run(won):
        ...     return Run(0, "grpo", "stem", [{"arm": "own", "visit": 1,
        ...                "task_index": 0, "won": won, "reset_seed": 0, "sampling_seed": 0}])
        >>> out = pooled([(run(1), run(0)), (run(0), run(0))], "own")
        >>> out["1"]["pairs"], out["1"]["difference"]["mean"]
        (2, 0.5)
    """
    mine = [e for k, (this, _) in enumerate(pairs) for e in keyed(this, k, arm)]
    theirs = [e for k, (_, that) in enumerate(pairs) for e in keyed(that, k, arm)]
    return compare_runs(mine, theirs, arm)


def deployed_arm(run: Run) -> str:
    """``own`` where the run streamed its own store, else ``none`` (a method without one)."""
    return "own" if any(e["arm"] == "own" for e in run.episodes) else "none"


def as_deployed(run: Run) -> Run:
    """The run with its deployed episodes only, relabelled ``deployed``: two methods' pair."""
    arm = deployed_arm(run)
    episodes = [dict(e, arm="deployed") for e in run.episodes if e["arm"] == arm]
    return Run(run.seed, run.algorithm, run.extractor_format, episodes)


def extractor_row(runs: list[Run]) -> dict[str, Any] | None:
    """Right-side lessons written (training and held-out stores; a lesson naming both sides
    or none counts as written, not right) and the CISPO batches with a gradient under the
    credit rule each run trained with; ``None`` for a method whose held-out store nobody
    judged (no extractor, or a family without a lesson judge)."""
    if not any("own" in r.store_sides for r in runs):
        return None
    out: dict[str, Any] = {}
    for store in STORES:
        sides = [r.store_sides.get(store, {}) for r in runs]
        out[store] = {
            "right": sum(s.get("right", 0) for s in sides),
            "lessons": sum(sum(s.values()) for s in sides),
        }
    batches = [r.cispo_batches for r in runs if r.cispo_batches]
    out["batches_with_signal"] = sum(b["batches_with_signal"] for b in batches)
    out["batches"] = sum(b["batches"] for b in batches)
    return out


def method_row(name: str, runs: list[Run]) -> dict[str, Any]:
    """One method's row: its arms' success pooled over seeds and per seed, its deployed arm
    minus its none, what its extractor wrote (the ``versus`` cells are :func:`method_table`'s).
    """
    if not runs:
        raise ValueError(f"{name}: no runs")
    seeds = [r.seed for r in runs]
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"{name}: each seed once, got seeds {seeds}")
    deployed = deployed_arm(runs[0])
    if any(deployed_arm(r) != deployed for r in runs):
        raise ValueError(f"{name}: its seeds' runs stream different arms")
    last = str(max(int(e["visit"]) for r in runs for e in r.episodes))
    summary = streaming_summary([e for r in runs for e in keyed(r, r.seed)])
    per_seed = {
        str(r.seed): {
            arm: cell["visits"][last]["success"]["mean"]
            for arm, cell in streaming_summary(r.episodes).items()
            if arm in ARMS
        }
        for r in runs
    }
    return {
        "method": name,
        "trainer": runs[0].algorithm,
        "extractor_format": runs[0].extractor_format,
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
        "extractor": extractor_row(runs),
    }


def versus(mine: list[Run], theirs: list[Run]) -> dict[str, Any] | None:
    """Deployed minus deployed over the seeds both methods ran, paired per (seed, task,
    visit): pooled, per seed, and ``between_seeds`` per visit: the mean of the seeds' paired
    differences with a Student-t interval over the seeds (:func:`~comprl_gym.evaluation.stats.
    mean_ci`, bounded by -1 and 1), the training seed as the unit. ``None`` when they share no
    seed."""
    by_seed = {r.seed: r for r in theirs}
    shared = [r for r in mine if r.seed in by_seed]
    if not shared:
        return None
    pairs = [(as_deployed(r), as_deployed(by_seed[r.seed])) for r in shared]
    per_seed = {str(r.seed): pooled([pair], "deployed") for r, pair in zip(shared, pairs)}
    this_minus_that = pooled(pairs, "deployed")
    return {
        "seeds": [r.seed for r in shared],
        "this_minus_that": this_minus_that,
        "per_seed": per_seed,
        "between_seeds": {
            visit: mean_ci(
                [cells[visit]["difference"]["mean"] for cells in per_seed.values()],
                bounds=(-1.0, 1.0),
            ).to_dict()
            for visit in this_minus_that
        },
    }


def method_table(methods: dict[str, list[Run]], against: list[str]) -> dict[str, Any]:
    """Every method's row (:func:`method_row`), each with its deployed arm minus each of
    ``against``' (:func:`versus`; not against itself)."""
    unknown = [m for m in against if m not in methods]
    if unknown:
        raise ValueError(f"versus {unknown}: not a method of the table ({sorted(methods)})")
    rows = [method_row(name, runs) for name, runs in methods.items()]
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


def streamed_ceiling(rows: list[dict[str, Any]]) -> bool:
    """Whether any row streamed the scripted ceiling, so the table shows its column."""
    return any(CEILING in row["success"] for row in rows)


def markdown(result: dict[str, Any]) -> str:
    """The table as Markdown: one line per method, the last visit's cells."""
    rows = result["rows"]
    last = rows[0]["last_visit"]
    ceiling = streamed_ceiling(rows)
    head = [
        "method",
        "seeds",
        f"deployed, visit {last}",
        f"none, visit {last}",
        f"oracle, visit {last}",
        *([f"scripted ceiling ({CEILING}), visit {last}"] if ceiling else []),
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
        cells = [
            row["method"],
            ",".join(map(str, row["seeds"])),
            _ci(success[row["deployed_arm"]][last]),
            _ci(success.get("none", {}).get(last)),
            _ci(success.get("oracle", {}).get(last)),
            *([_ci(success.get(CEILING, {}).get(last))] if ceiling else []),
            _ci(own_minus_none[last]["difference"], True) if own_minus_none else "-",
            *diffs,
            lessons,
            steps,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], path: Path) -> None:
    """Success at the last visit per method: no lessons, its own lessons, the oracle lesson (and
    the scripted ceiling where streamed), with Wilson intervals and one dot per seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    last = rows[0]["last_visit"]
    fig, ax = plt.subplots(figsize=(9, 4.2))
    labels = {
        "deployed": "own lessons",
        "none": "no lessons",
        "oracle": "oracle lesson",
        CEILING: "scripted ceiling",
    }
    bars = [("none", "tab:grey"), ("deployed", "tab:blue"), ("oracle", "tab:green")]
    if streamed_ceiling(rows):
        bars.append((CEILING, "tab:olive"))
    width = 0.78 / len(bars)
    for k, (arm, colour) in enumerate(bars):
        for i, row in enumerate(rows):
            name = row["deployed_arm"] if arm == "deployed" else arm
            cell = row["success"].get(name, {}).get(last)
            if cell is None or (arm == "deployed" and name == "none"):
                continue
            x = i + (k - (len(bars) - 1) / 2) * width
            first = labels[arm] not in ax.get_legend_handles_labels()[1]
            ax.bar(x, cell["mean"], width, color=colour, label=labels[arm] if first else None)
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
    ax.set_title("Held-out tasks: the trainers, seeds pooled (dots: each seed)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_table(
    out: str | Path,
    methods: dict[str, list[Run]],
    against: list[str],
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """:func:`method_table` written to ``<out>.json`` (with each method's source names and any
    ``extra`` keys), ``<out>.md`` and ``<out>.png``, each atomically; returns the table."""
    result = method_table(methods, against)
    result["files"] = {name: [r.source for r in runs] for name, runs in methods.items()}
    result.update(extra or {})
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out.with_suffix(".json"), (json.dumps(result, indent=1) + "\n").encode())
    atomic_write_bytes(out.with_suffix(".md"), markdown(result).encode())
    plot(result, out.with_suffix(".png"))
    return result
