"""Streaming evaluation: does experience change what the actor does on tasks it revisits?

The protocol of the memory-agent literature (test-time learning). Each held-out task is
visited ``visits`` times, in order (every task once, then every task again, ...). An arm is a
source of lessons: none, a store the arm fills online between visits (the extractor distils
each finished episode, or the winning actions are stored verbatim), or a store the benchmark
fills once (an oracle lesson, its inversion, a placebo). With no lessons the success curve
over visits is flat; with lessons that carry information it should rise.

Arms are compared on **common random numbers**: every (task, visit) episode has one reset
seed and one sampling seed, the same in every arm, and its replies are drawn from its own
sampling seed (:meth:`~comprl_gym.rollouts.RolloutWorker.run`'s ``sampling_seeds``), so the
other episodes of its batch never change its draws. Each record carries
both seeds and the lessons the episode was shown, and :func:`streaming_summary` reports per
arm and visit the success rate with its Wilson interval and, paired episode by episode with
a reference arm, the difference (Newcombe's interval) and McNemar's exact p.

Example (scripted agents, a store that learns nothing, so both curves are flat):
    >>> from comprl_gym.agents import make_agent
    >>> from comprl_gym.env_factory import EnvSpec
    >>> spec = EnvSpec.of("comprl/Memory-Fork-v0", {"split": "test"})
    >>> agent = lambda env, seed: make_agent("random", env, seed=seed)
    >>> records = run_streaming(spec, tasks=[0, 1], visits=2, arms=[Arm("none")],
    ...                         agent=agent, progress=False)
    >>> [(r["arm"], r["visit"], r["task_index"]) for r in records]
    [('none', 1, 0), ('none', 1, 1), ('none', 2, 0), ('none', 2, 1)]
    >>> records[0]["sampling_seed"] != records[2]["sampling_seed"]  # a new draw per visit
    True
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from comprl_gym.env_factory import EnvSpec, ExperienceSpec, make_env
from comprl_gym.evaluation.eval import EpisodeKey, episode_record
from comprl_gym.evaluation.stats import paired_comparison, proportion_ci
from comprl_gym.rollouts import RolloutConfig, RolloutWorker, Trajectory, run_episode

logger = logging.getLogger(__name__)


@dataclass
class Arm:
    """One source of lessons.

    Attributes:
        name: the arm's label in the records (``none``, ``oracle``, ``own``, ...).
        manager: the store its episodes read (``None``: no lessons, no experience wrapper).
        learn: called with every finished episode of the arm, before the next one starts: the
            store's online learning (``None``: the store stays as it is).
    """

    name: str
    manager: Any = None
    learn: Callable[[Trajectory], None] | None = None


def episode_seeds(task: int, visit: int, base: int = 0) -> tuple[int, int]:
    """The (reset seed, sampling seed) of visit ``visit`` to task ``task``: the reset seed is
    the task's (every visit plays the same task), the sampling seed a new draw per visit;
    neither depends on the arm.

    Example:
        >>> episode_seeds(3, 1), episode_seeds(3, 2)
        ((3, 1003001), (3, 2003001))
    """
    return task, (base * 7919 + visit * 1_000_000 + task * 1000 + 1) % 2**31


def run_streaming(
    spec: EnvSpec,
    tasks: Sequence[int],
    visits: int,
    arms: Sequence[Arm],
    agent: Any,
    inject_top_k: int = 1,
    seed: int = 0,
    agent_label: str = "",
    progress: bool = True,
    parallel: int = 32,
    on_visit: Callable[[list[dict[str, Any]]], None] | None = None,
) -> list[dict[str, Any]]:
    """Play every arm's visits; one record per episode (:func:`~comprl_gym.evaluation.eval.
    episode_record`'s, its ``condition`` the arm and its ``agent_seed`` ``seed``, plus
    ``arm``, ``visit``, ``reset_seed``, ``sampling_seed``).

    ``agent`` is a batched LLM agent (an :class:`~comprl_gym.agents.llm_agent.LLMAgent`:
    a visit's episodes are played ``parallel`` at once, each drawing from its own sampling
    seed) or ``agent(env, sampling_seed) -> Agent``, a factory of one agent per episode
    (played one at a time). ``tasks`` are reset seeds of ``spec``'s env (its held-out split).
    The arms' envs read their store with ``inject_top_k`` lessons and never report outcomes;
    an arm's ``learn`` sees a visit's episodes after the visit, in task order (not after the
    last visit, which nothing reads). ``on_visit`` gets each arm's visit's records as soon as
    they are played (a caller saves them, so an interrupted stream keeps what it played).
    """
    from tqdm import tqdm

    if visits < 1 or not tasks or not arms:
        raise ValueError("streaming needs at least one task, one visit and one arm")
    bar = tqdm(
        total=len(arms) * visits * len(tasks), desc="streaming", unit="ep", disable=not progress
    )
    records: list[dict[str, Any]] = []
    try:
        for arm in arms:
            experience = None
            if arm.manager is not None:
                experience = ExperienceSpec(inject_top_k, 0, report_outcomes=False)
            arm_spec = spec.with_experience(experience)
            envs = [
                make_env(arm_spec, manager=arm.manager)
                for _ in range(max(1, min(parallel, len(tasks))))
            ]
            try:
                for visit in range(1, visits + 1):
                    bar.set_postfix_str(f"{arm.name} visit {visit}")
                    pairs = [episode_seeds(task, visit, seed) for task in tasks]
                    trajectories = _play_visit(envs, agent, pairs, bar)
                    for task, (reset_seed, sampling_seed), trajectory in zip(
                        tasks, pairs, trajectories
                    ):
                        # The extractor reads with-experience episodes (``distill``'s mode).
                        trajectory.meta.update(with_experience=arm.manager is not None, group=task)
                        record = episode_record(
                            trajectory,
                            EpisodeKey(spec.env_id, task, sampling_seed, arm.name),
                            agent_label,
                            arm.manager,
                        )
                        # The key names the episode by its sampling seed (one per visit);
                        # the agent's seed is the stream's, as an eval's summary counts seeds.
                        record.update(
                            arm=arm.name,
                            visit=visit,
                            reset_seed=reset_seed,
                            sampling_seed=sampling_seed,
                            agent_seed=seed,
                        )
                        record.setdefault("experiences", [])
                        records.append(record)
                    if on_visit is not None:
                        on_visit(records[-len(tasks) :])
                    # The store learns between visits; after the last, nothing reads it (the
                    # own arm's extractor would distil a whole visit for nobody).
                    if arm.learn is not None and visit < visits:
                        for trajectory in trajectories:
                            if not trajectory.error:
                                arm.learn(trajectory)
            finally:
                for env in envs:
                    env.close()
    finally:
        bar.close()
    return records


def _play_visit(
    envs: list[Any], agent: Any, pairs: list[tuple[int, int]], bar: Any
) -> list[Trajectory]:
    """One visit's episodes, in task order, each on its own (reset seed, sampling seed)."""
    resets = [reset for reset, _ in pairs]
    if hasattr(agent, "act_batch"):
        worker = RolloutWorker(envs, agent=agent, config=RolloutConfig(max_turns=None))
        return worker.run(
            resets, sampling_seeds=[s for _, s in pairs], on_episode=lambda _: bar.update()
        )
    played = []
    for reset, sampling in pairs:
        played.append(run_episode(envs[0], agent(envs[0], sampling), reset))
        bar.update()
    return played


def _outcomes(records: list[dict[str, Any]], arm: str, visit: int | None) -> dict[tuple, float]:
    return {
        (r["task_index"], r["visit"]): float(bool(r["won"]))
        for r in records
        if r["arm"] == arm and (visit is None or r["visit"] == visit)
    }


def streaming_summary(records: list[dict[str, Any]], reference: str = "none") -> dict[str, Any]:
    """Per arm: success at each visit and over all visits (Wilson intervals); against the
    ``reference`` arm the paired difference (same task, same visit, same seeds) with
    Newcombe's interval and McNemar's exact p, per visit and pooled (``minus_<reference>``);
    and each later visit minus the first, paired task by task within the arm
    (``minus_visit_1``: whether the arm learns between visits). A visit draws new sampling
    seeds shared by every arm, so a lucky visit lifts every arm's ``minus_visit_1``, the
    reference's too; that an arm's memory helps is its ``minus_<reference>`` at that visit
    (equal first visits make it the arm's rise minus the reference's).

    Example:
        >>> records = [{"arm": arm, "visit": 1, "task_index": t, "won": won}
        ...            for arm, outcomes in (("none", [0, 0, 1, 0]), ("oracle", [1, 1, 1, 0]))
        ...            for t, won in enumerate(outcomes)]
        >>> s = streaming_summary(records)
        >>> s["oracle"]["visits"]["1"]["success"]["mean"], s["oracle"]["minus_none"]["all"]["difference"]["mean"]
        (0.75, 0.5)
        >>> later = [dict(r, visit=2, won=1) for r in records if r["arm"] == "none"]
        >>> streaming_summary(records + later)["none"]["minus_visit_1"]["2"]["difference"]["mean"]
        0.75
    """
    arms = list(dict.fromkeys(r["arm"] for r in records))
    visits = sorted({int(r["visit"]) for r in records})
    summary: dict[str, Any] = {}
    for arm in arms:
        row: dict[str, Any] = {"visits": {}}
        for visit in [*visits, None]:
            won = list(_outcomes(records, arm, visit).values())
            label = "all" if visit is None else str(visit)
            row["visits"][label] = {"success": proportion_ci(won).to_dict(), "episodes": len(won)}
        if arm != reference and reference in arms:
            row[f"minus_{reference}"] = {
                ("all" if visit is None else str(visit)): paired_comparison(
                    _outcomes(records, arm, visit), _outcomes(records, reference, visit)
                )
                for visit in [*visits, None]
            }
        if 1 in visits and len(visits) > 1:
            # Test-time learning: each later visit against the first, task by task.
            first = _by_task(_outcomes(records, arm, 1))
            row["minus_visit_1"] = {
                str(visit): paired_comparison(_by_task(_outcomes(records, arm, visit)), first)
                for visit in visits
                if visit != 1
            }
        summary[arm] = row
    return summary


def versus_summary(
    records: list[dict[str, Any]], pairs: Sequence[tuple[str, str]]
) -> dict[str, Any]:
    """Each ``(treatment, control)`` pair of arms: treatment minus control, per visit and over
    all visits, paired episode by episode (same task, visit and seeds), with Newcombe's
    interval and McNemar's exact p. The placebo comparison: a memory against a memory that
    writes the same words with no information (``own`` against ``coin``), where
    :func:`streaming_summary` compares every arm with ``none`` only. Keyed
    ``"<treatment> minus <control>"``; a :class:`ValueError` names an arm that was not streamed.

    Example:
        >>> records = [{"arm": arm, "visit": 1, "task_index": t, "won": won}
        ...            for arm, outcomes in (("own", [1, 1, 1, 0]), ("coin", [1, 0, 0, 0]))
        ...            for t, won in enumerate(outcomes)]
        >>> out = versus_summary(records, [("own", "coin")])["own minus coin"]
        >>> out["1"]["difference"]["mean"], out["all"]["pairs"]
        (0.5, 4)
    """
    streamed = set(r["arm"] for r in records)
    missing = sorted({arm for pair in pairs for arm in pair} - streamed)
    if missing:
        raise ValueError(
            f"--versus names arm(s) {missing} that were not streamed: {sorted(streamed)}"
        )
    visits = sorted({int(r["visit"]) for r in records})
    return {
        f"{treatment} minus {control}": {
            ("all" if visit is None else str(visit)): paired_comparison(
                _outcomes(records, treatment, visit), _outcomes(records, control, visit)
            )
            for visit in [*visits, None]
        }
        for treatment, control in pairs
    }


def versus_markdown(versus: dict[str, Any]) -> str:
    """:func:`versus_summary` as a Markdown table: each comparison's paired difference at each
    visit and over all visits, with its interval and McNemar's p.

    Example:
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


def compare_runs(
    records: list[dict[str, Any]], other: list[dict[str, Any]], arm: str
) -> dict[str, Any]:
    """``arm`` of one run minus ``arm`` of another (two trained agents streamed on the same
    tasks, visits and seed): per visit and pooled, paired episode by episode with Newcombe's
    interval and McNemar's exact p. Both runs' episodes must share their (reset, sampling)
    seeds: common random numbers, or a :class:`ValueError`.

    Example:
        >>> a = [{"arm": "own", "visit": 1, "task_index": t, "won": w, "reset_seed": t,
        ...       "sampling_seed": 9} for t, w in enumerate([1, 1, 0, 1])]
        >>> b = [dict(r, won=0) for r in a]
        >>> compare_runs(a, b, "own")["all"]["difference"]["mean"]
        0.75
    """

    def seeds(rs: list[dict[str, Any]]) -> dict[tuple, tuple]:
        return {
            (r["task_index"], r["visit"]): (r.get("reset_seed"), r.get("sampling_seed"))
            for r in rs
            if r["arm"] == arm
        }

    mine, theirs = seeds(records), seeds(other)
    shared = set(mine) & set(theirs)
    if not shared or any(mine[k] != theirs[k] for k in shared):
        raise ValueError(
            f"the two runs' {arm!r} episodes do not share their seeds: stream both with the "
            "same tasks and seed"
        )
    visits = sorted({visit for _, visit in shared})
    return {
        ("all" if visit is None else str(visit)): paired_comparison(
            _outcomes(records, arm, visit), _outcomes(other, arm, visit)
        )
        for visit in [*visits, None]
    }


def _by_task(outcomes: dict[tuple, float]) -> dict[int, float]:
    """``(task, visit) -> won`` of one visit, keyed by task alone."""
    return {task: won for (task, _), won in outcomes.items()}


def _cell(ci: dict[str, Any]) -> str:
    if not ci.get("n") or ci["mean"] != ci["mean"]:  # no episodes, or NaN
        return "n/a"
    return f"{ci['mean']:.2f} [{ci['low']:.2f}, {ci['high']:.2f}]"


def streaming_markdown(summary: dict[str, Any], reference: str = "none") -> str:
    """:func:`streaming_summary` as a Markdown table: per arm the success at each visit and
    over all (Wilson intervals), and over all visits its difference from ``reference``
    (Newcombe's interval, McNemar's exact p).

    Example:
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
