"""The statistics of a stream's records: success per arm and visit, arms paired.

Every function reads the records :func:`~comprl_gym.evaluation.stream.play.run_streaming`
writes (``arm``, ``visit``, ``task_index``, ``won``, the seeds, the lessons shown): Wilson
intervals per arm and visit, and paired differences episode by episode (Newcombe's interval,
McNemar's exact p) of an arm against ``none`` (:func:`streaming_summary`), against its placebo
(:func:`versus_summary`) or against the same arm of another run (:func:`compare_runs`);
:func:`shown_verdicts` says what an arm showed after a win and after a loss.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from comprl_gym.evaluation.stats import paired_comparison, proportion_ci
from comprl_gym.evaluation.stream.config import NONE
from comprl_gym.families import FamilySpec


def streaming_summary(records: list[dict[str, Any]], reference: str = NONE) -> dict[str, Any]:
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


#: How :func:`shown_verdicts` counts an episode (its verdict,
#: :func:`~comprl_gym.lessons.core.episode_verdict`, when ``right`` or ``wrong``; any other,
#: no side, both, only other tasks or no lesson, is ``no_side``).
SHOWN_KINDS = ("right", "wrong", "no_side")


def shown_verdicts(records: list[dict[str, Any]], family: FamilySpec) -> dict[str, Any]:
    """Per arm with lessons, what it showed each task at visits after the first, by how the
    arm's previous visit to that task ended: ``{"after_won": {"right": n, "wrong": n,
    "no_side": n}, "after_lost": {...}}``, each episode's verdict from the family's judge on
    the lessons it was shown (:func:`~comprl_gym.lessons.core.episode_verdict`). An
    outcome-aware memory shows the right side after a win and after a loss; one that copies
    the walked side is right after wins only; a constant side is right about half the time
    either way. The check behind any sentence on why an arm helped.

    Example:
        >>> from comprl_gym.envs.memory import inverted_lesson, oracle_lesson
        >>> from comprl_gym.families import family_spec
        >>> task = "You are in the Vault of Marrow."
        >>> shown = lambda text: [{"content": text}] if text else []
        >>> records = [
        ...     {"arm": "copy", "visit": 1, "task_index": 0, "won": False, "task": task,
        ...      "experiences": []},
        ...     {"arm": "copy", "visit": 2, "task_index": 0, "won": False, "task": task,
        ...      "experiences": shown(inverted_lesson("fork/vault-of-marrow"))}]
        >>> shown_verdicts(records, family_spec("memory"))["copy"]["after_lost"]
        {'right': 0, 'wrong': 1, 'no_side': 0}
    """
    from comprl_gym.lessons.core import episode_verdict

    outcome = {(r["arm"], r["task_index"], int(r["visit"])): bool(r["won"]) for r in records}
    out: dict[str, Any] = {}
    for r in records:
        visit = int(r["visit"])
        if r["arm"] == NONE or visit < 2:
            continue
        task = family.judge(r["task"])
        lessons = [family.judge(e["content"]) for e in r.get("experiences") or []]
        verdict = episode_verdict(lessons, None if task is None else task.task_id)
        after = "after_won" if outcome[(r["arm"], r["task_index"], visit - 1)] else "after_lost"
        row = out.setdefault(
            r["arm"], {a: dict.fromkeys(SHOWN_KINDS, 0) for a in ("after_won", "after_lost")}
        )
        row[after][verdict if verdict in SHOWN_KINDS else "no_side"] += 1
    return out


def _outcomes(records: list[dict[str, Any]], arm: str, visit: int | None) -> dict[tuple, float]:
    return {
        (r["task_index"], r["visit"]): float(bool(r["won"]))
        for r in records
        if r["arm"] == arm and (visit is None or r["visit"] == visit)
    }


def _by_task(outcomes: dict[tuple, float]) -> dict[int, float]:
    """``(task, visit) -> won`` of one visit, keyed by task alone."""
    return {task: won for (task, _), won in outcomes.items()}
