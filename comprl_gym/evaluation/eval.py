"""``comprl-gym eval``: env ids x agent x tasks x seeds, with honest, resumable results.

A run writes into one folder:

* ``config.json`` — what was asked (env ids, agent spec, tasks, seeds, env kwargs);
* ``episodes.jsonl`` — one line per finished episode: the :class:`Trajectory` plus its ``key``
  (``env_id|task=I|seed=S|exp=C``). Lines are appended and fsynced as episodes end, so an
  interrupted run loses only the episodes in flight;
* ``summary.json`` / ``summary.md`` — per env id (and per experience condition): success rate
  with a 95% Wilson score interval, mean score with its interval, steps, tokens, invalid actions,
  format errors, wall time; with several agent seeds the per-seed rates, their spread and the
  pooled interval; with ``paired_experience`` the paired difference (with - without experience)
  of success and its Newcombe interval, per env id and overall; ``warnings`` where an interval
  is too wide to exclude a difference of 0.1, with the episodes that would. The methods are
  described in :mod:`comprl_gym.evaluation.stats`.

Episodes: task ``I`` in ``0..episodes-1`` is ``env.reset(seed=task_seed_offset + I)``; each task
is played once per agent seed ``S`` (the LLM's sampling seed). ``--resume`` skips the keys
already in ``episodes.jsonl``; a corrupt line there (a crash mid-write) is moved to
``episodes.corrupt-<time>.jsonl`` with a warning naming it, and the good lines are kept.

Example:
    >>> import tempfile
    >>> config = EvalConfig(env_ids=["comprl/MiniHack-Room-5x5-v0"], agent="expert",
    ...                     episodes=2, out_dir=tempfile.mkdtemp())
    >>> summary = run_eval(config)
    >>> summary["groups"][0]["success"]["mean"]
    1.0
"""

from __future__ import annotations

import fnmatch
import json
import logging
import math
import os
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym

import comprl_gym  # noqa: F401 - registers the ids
from comprl_gym.agents.base import make_agent
from comprl_gym.agents.llm_agent import LLM_SPEC_KINDS, agent_from_spec
from comprl_gym.core import ComprlGymError, ConfigurationError, DataError
from comprl_gym.env_factory import EnvSpec, ExperienceSpec, make_env
from comprl_gym.evaluation.stats import (
    RESOLVABLE_DIFFERENCE,
    Interval,
    episodes_needed,
    mean_ci,
    paired_comparison,
    paired_outcomes,
    pairs_needed,
    proportion_ci,
    resolution_warning,
    seed_summary,
)
from comprl_gym.experience import ExperienceManager
from comprl_gym.families import env_pool, held_out_kwargs
from comprl_gym.registration import ENV_TABLE
from comprl_gym.rollouts import RolloutConfig, RolloutWorker, Trajectory, append_jsonl
from comprl_gym.utils import atomic_write_json, atomic_write_text, jsonable

logger = logging.getLogger(__name__)

EPISODES_FILE = "episodes.jsonl"
CONFIG_FILE = "config.json"
SUMMARY_FILE = "summary.json"
SUMMARY_MD = "summary.md"
#: Experience conditions: plain runs, and the two halves of a paired run.
PLAIN, WITH_EXPERIENCE, WITHOUT_EXPERIENCE = "none", "with", "without"


class EvalInterrupted(ComprlGymError):
    """An eval run stopped early; finished episodes are on disk and ``--resume`` continues."""


@dataclass
class EvalConfig:
    """One evaluation run.

    Attributes:
        env_ids: ids or patterns (``comprl/MiniHack-*``).
        agent: agent spec: ``random``, ``expert``, ``module:Class`` or an LLM spec
            (``hf:smollm2``, ``vllm:smollm2``, ``openai:URL#MODEL``; see
            :mod:`comprl_gym.agents.llm_agent`).
        episodes: tasks per env id.
        seeds: agent seeds; every task is played once per seed.
        out_dir: results folder.
        parallel: episodes played at once per env id (an LLM agent decides for all of them in
            one generation call).
        max_steps: the env's step limit (``None`` = the env's default).
        env_kwargs: extra ``gym.make`` keyword arguments.
        task_seed_offset: task ``I`` is ``reset(seed=task_seed_offset + I)``.
        paired_experience: play every task with and without experience
            (:class:`~comprl_gym.wrappers.ExperienceAugmentedEnv`).
        experience: the experience store folder (needed with ``paired_experience``).
        inject_top_k / search_budget: the experience wrapper's settings.
        resume: continue a run in ``out_dir``.
        keep_tokens: keep token ids and logprobs in ``episodes.jsonl`` (big; off by default).
        progress: show a progress bar.
    """

    env_ids: list[str]
    agent: str
    episodes: int = 10
    seeds: list[int] = field(default_factory=lambda: [0])
    out_dir: str | os.PathLike[str] = "results"
    parallel: int = 8
    max_steps: int | None = None
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    task_seed_offset: int = 0
    paired_experience: bool = False
    experience: str | None = None
    inject_top_k: int = 3
    search_budget: int = 2
    resume: bool = False
    keep_tokens: bool = False
    progress: bool = True
    #: a versioned suite ``NAME@VERSION`` (:mod:`comprl_gym.evaluation.suites`): it pins the
    #: env ids, arguments, step limits and task seeds; ``env_ids`` stays empty.
    suite: str | None = None

    def identity(self) -> dict[str, Any]:
        """The settings a resumed run must share with the original."""
        return {
            "agent": self.agent,
            "max_steps": self.max_steps,
            "env_kwargs": self.env_kwargs,
            "task_seed_offset": self.task_seed_offset,
            "paired_experience": self.paired_experience,
            "inject_top_k": self.inject_top_k,
            "search_budget": self.search_budget,
        }


@dataclass(frozen=True)
class EpisodeKey:
    env_id: str
    task: int
    seed: int
    condition: str

    def __str__(self) -> str:
        return f"{self.env_id}|task={self.task}|seed={self.seed}|exp={self.condition}"


def expand_env_ids(patterns: list[str]) -> list[str]:
    """Expand shell-style patterns (``comprl/MiniHack-*``) against the registered ids.

    When several ids match, the generic ``comprl/MiniHack-v0`` is left out: it repeats a named
    one.

    Example:
        >>> expand_env_ids(["comprl/MiniHack-Room-5x5*"])
        ['comprl/MiniHack-Room-5x5-v0']
    """
    ids: list[str] = []
    for pattern in patterns:
        matched = [env_id for env_id in ENV_TABLE if fnmatch.fnmatchcase(env_id, pattern)]
        if not matched:
            raise ConfigurationError(
                f"no comprl id matches {pattern!r}; `comprl-gym envs` lists them"
            )
        ids.extend(m for m in matched if m not in ids)
    if len(ids) > 1 and "comprl/MiniHack-v0" in ids:
        ids.remove("comprl/MiniHack-v0")
    return ids


# --------------------------------------------------------------------------------------------
# Results file
# --------------------------------------------------------------------------------------------
def load_episodes(out_dir: str | os.PathLike[str], repair: bool = True) -> list[dict[str, Any]]:
    """Episode records of a run. Corrupt lines are moved aside (``repair``) or raise."""
    path = Path(out_dir) / EPISODES_FILE
    if not path.exists():
        return []
    good: list[str] = []
    bad: list[tuple[int, str]] = []
    records: list[dict[str, Any]] = []
    with open(path, encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                if not isinstance(record, dict) or "key" not in record or "won" not in record:
                    raise ValueError("not an episode record")
            except ValueError:
                bad.append((number, line))
                continue
            good.append(line if line.endswith("\n") else line + "\n")
            records.append(record)
    if bad:
        numbers = ", ".join(str(n) for n, _ in bad[:10]) + (" ..." if len(bad) > 10 else "")
        if not repair:
            raise DataError(
                path,
                f"{len(bad)} corrupt line(s) ({numbers})",
                "run with --resume to set them aside",
            )
        aside = path.with_name(f"episodes.corrupt-{time.strftime('%Y%m%d-%H%M%S')}.jsonl")
        atomic_write_text(
            aside, "".join(line if line.endswith("\n") else line + "\n" for _, line in bad)
        )
        atomic_write_text(path, "".join(good))
        logger.warning(
            "%s: %d corrupt line(s) (%s) moved to %s; %d finished episode(s) kept; their "
            "episodes will be played again",
            path,
            len(bad),
            numbers,
            aside.name,
            len(records),
        )
    return records


# --------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------
def _is_llm_spec(spec: str) -> bool:
    return ":" in spec and spec.split(":", 1)[0] in LLM_SPEC_KINDS


def _make_manager(config: EvalConfig) -> Any:
    if not config.experience:
        raise ConfigurationError(
            "--paired-experience needs --experience STORE_FOLDER (an experience store)"
        )
    return ExperienceManager(config.experience)


def _make_env(env_id: str, config: EvalConfig, condition: str, manager: Any) -> gym.Env:
    experience = None
    if condition == WITH_EXPERIENCE:
        # Outcomes are not reported: evaluation must not change the store it measures.
        experience = ExperienceSpec(
            config.inject_top_k, config.search_budget, report_outcomes=False
        )
    # A family with pools plays its held-out pool unless --env-arg split=... names one.
    kwargs = held_out_kwargs(env_id, {**config.env_kwargs, "max_steps": config.max_steps})
    return make_env(EnvSpec.of(env_id, kwargs, experience=experience), manager=manager)


def _record(traj: Trajectory, key: EpisodeKey, config: EvalConfig, manager: Any) -> dict[str, Any]:
    return episode_record(traj, key, config.agent, manager, keep_tokens=config.keep_tokens)


def episode_record(
    traj: Trajectory,
    key: EpisodeKey,
    agent: str,
    manager: Any = None,
    keep_tokens: bool = False,
) -> dict[str, Any]:
    """One line of ``episodes.jsonl``: the trajectory, its key and, when it was shown
    experiences, their ids and texts (read from ``manager``)."""
    record = traj.to_dict()
    if not keep_tokens:
        for turn in record["turns"]:
            turn["prompt_token_ids"], turn["completion_token_ids"], turn["completion_logprobs"] = (
                [],
                [],
                None,
            )
    record.update(
        key=str(key),
        agent=agent,
        task_index=key.task,
        agent_seed=key.seed,
        condition=key.condition,
    )
    if manager is not None and traj.experience_ids:
        try:
            shown = manager.get([int(i) for i in traj.experience_ids])
            record["experiences"] = [
                {"id": e.id, "title": e.title, "description": e.description, "content": e.content}
                for e in shown
            ]
        except Exception:  # the record matters more than the decoration
            logger.warning("could not read experiences %s", traj.experience_ids, exc_info=True)
    return record


def write_run(
    out_dir: str | os.PathLike[str], records: list[dict[str, Any]], summary: dict[str, Any]
) -> None:
    """A finished run's folder in one go (``episodes.jsonl`` and the summary), as ``run_eval``
    leaves it: ``comprl-gym leaderboard`` reads either."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    lines = "".join(json.dumps(jsonable(r), ensure_ascii=False) + "\n" for r in records)
    atomic_write_text(out / EPISODES_FILE, lines)
    write_summary(out, summary)


#: The arms of :func:`arm_table`, by condition.
ARM_LABELS = {WITHOUT_EXPERIENCE: "without_experience", WITH_EXPERIENCE: "with_experience"}


def arm_table(records: list[dict[str, Any]], summary: dict[str, Any]) -> dict[str, Any]:
    """Per env id and arm (``without_experience`` / ``with_experience``): success, its Wilson
    interval, score, steps, episodes and the outcome of each task in task order (``won``, to
    pair with another evaluation of the same tasks); with both arms, the with-experience
    row's ``difference`` is :func:`summarize`'s paired difference with - without (Newcombe).

    Example:
        >>> records = [{"key": f"e|task={t}|seed=0|exp={c}", "env_id": "e", "won": w,
        ...             "task_index": t, "agent_seed": 0, "condition": c, "steps": 2}
        ...            for c, outcomes in (("with", [1, 1]), ("without", [1, 0]))
        ...            for t, w in enumerate(outcomes)]
        >>> table = arm_table(records, summarize(records, paired=True))
        >>> table["e"]["without_experience"]["won"], table["e"]["with_experience"]["success"]
        ([1.0, 0.0], 1.0)
        >>> table["e"]["with_experience"]["difference"]["mean"]
        0.5
    """
    table: dict[str, Any] = {}
    for group in summary["groups"]:
        label = ARM_LABELS.get(group["condition"])
        if label is None:
            continue
        mine = sorted(
            (
                r
                for r in records
                if r["env_id"] == group["env_id"] and r["condition"] == group["condition"]
            ),
            key=lambda r: (r["task_index"], r["agent_seed"]),
        )
        table.setdefault(group["env_id"], {})[label] = {
            "success": group["success"]["mean"],
            "success_ci": group["success"],
            "score": group["score"]["mean"],
            "steps": group["steps_mean"],
            "episodes": group["episodes"],
            "won": [float(bool(r["won"])) for r in mine],
        }
    for env_id, paired in (summary.get("paired") or {}).get("per_env", {}).items():
        row = table.get(env_id, {})
        if "with_experience" in row and "without_experience" in row:
            row["with_experience"]["difference"] = paired["difference"]
    return table


def run_eval(config: EvalConfig) -> dict[str, Any]:
    """Run (or resume) an evaluation; returns the summary (also written to ``out_dir``)."""
    if config.suite:  # suites.py runs this function once per pinned task
        raise ConfigurationError(
            f"a suite ({config.suite}) is played by comprl_gym.evaluation.suites.run_suite "
            "(comprl-gym eval --suite), which runs one evaluation per pinned task"
        )
    started = time.time()
    out = Path(config.out_dir)
    env_ids = expand_env_ids(config.env_ids)
    if config.episodes < 1 or not config.seeds:
        raise ConfigurationError("episodes must be >= 1 and at least one seed is needed")
    config_path = out / CONFIG_FILE
    if (out / EPISODES_FILE).exists() and not config.resume:
        raise ConfigurationError(
            f"{out} already holds results; pass --resume to continue that run, or choose another --out"
        )
    if config.resume and config_path.exists():
        try:
            saved = json.loads(config_path.read_text())
        except json.JSONDecodeError as exc:
            raise DataError(
                config_path,
                f"not valid JSON ({exc})",
                "delete it to resume with the settings given now",
            ) from exc
        mismatched = {
            k: (saved.get("identity", {}).get(k), v)
            for k, v in config.identity().items()
            if saved.get("identity", {}).get(k) != v
        }
        if mismatched:
            detail = "; ".join(f"{k}: was {a!r}, now {b!r}" for k, (a, b) in mismatched.items())
            raise ConfigurationError(
                f"--resume with different settings than the run in {out}: {detail}"
            )
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(
        config_path,
        {
            "identity": config.identity(),
            "config": jsonable(asdict(config)),
            "env_ids": env_ids,
            # the pool each id plays (its family's held-out one unless a split was given)
            "pools": {
                env_id: asdict(pool)
                for env_id in env_ids
                if (pool := env_pool(env_id, config.env_kwargs)) is not None
            },
        },
    )

    done = {r["key"] for r in load_episodes(out)} if config.resume else set()
    conditions = [WITH_EXPERIENCE, WITHOUT_EXPERIENCE] if config.paired_experience else [PLAIN]
    manager = _make_manager(config) if config.paired_experience else None
    plan: list[tuple[str, str, int, list[EpisodeKey]]] = []
    for env_id in env_ids:
        for condition in conditions:
            for seed in config.seeds:
                keys = [
                    EpisodeKey(env_id, task, seed, condition) for task in range(config.episodes)
                ]
                pending = [k for k in keys if str(k) not in done]
                if pending:
                    plan.append((env_id, condition, seed, pending))
    total = sum(len(p[3]) for p in plan)
    logger.info("%d episode(s) to play, %d already done", total, len(done))
    bar = None
    if config.progress and total:
        from tqdm import tqdm

        bar = tqdm(total=total, desc="eval", unit="ep")
    finished = len(done)
    try:
        for env_id, condition, seed, keys in plan:
            if bar is not None:
                bar.set_postfix_str(f"{env_id.split('/')[-1]} exp={condition} seed={seed}")
            finished += _run_group(env_id, condition, seed, keys, config, manager, out, bar)
    except KeyboardInterrupt:
        raise EvalInterrupted(
            f"interrupted; finished episodes are saved in {out / EPISODES_FILE}; rerun with --resume"
        ) from None
    except ComprlGymError as exc:
        raise EvalInterrupted(
            f"{exc}\n{_count(out)} finished episode(s) are saved in {out / EPISODES_FILE}; "
            f"fix the cause and rerun the same command with --resume"
        ) from exc
    finally:
        if bar is not None:
            bar.close()
        if manager is not None:
            manager.close()
    summary = summarize(load_episodes(out), paired=config.paired_experience)
    write_summary(out, summary)
    from comprl_gym.evaluation.provenance import write_provenance

    write_provenance(out, config, time.time() - started)
    return summary


def _count(out: Path) -> int:
    path = out / EPISODES_FILE
    if not path.exists():
        return 0
    with open(path, encoding="utf-8", errors="replace") as handle:
        return sum(1 for line in handle if line.strip())


def _run_group(
    env_id: str,
    condition: str,
    seed: int,
    keys: list[EpisodeKey],
    config: EvalConfig,
    manager: Any,
    out: Path,
    bar: Any,
) -> int:
    n_envs = max(1, min(config.parallel, len(keys)))
    envs = [_make_env(env_id, config, condition, manager) for _ in range(n_envs)]
    try:
        if _is_llm_spec(config.agent):
            worker = RolloutWorker(envs, agent=agent_from_spec(config.agent, envs[0], seed=seed))
        else:
            # Scripted agents keep per-episode state: one fresh agent per episode, seeded by it.
            def factory(env: gym.Env, episode_seed: int) -> Any:
                return make_agent(config.agent, env, seed=seed * 1_000_003 + episode_seed)

            worker = RolloutWorker(envs, agent_factory=factory, config=RolloutConfig())
        by_seed = {config.task_seed_offset + k.task: k for k in keys}

        def on_episode(traj: Trajectory) -> None:
            key = by_seed[traj.seed]
            append_jsonl(out / EPISODES_FILE, [_record(traj, key, config, manager)])
            if bar is not None:
                bar.update()

        worker.run(
            seeds=[config.task_seed_offset + k.task for k in keys],
            meta=[{"key": str(k)} for k in keys],
            on_episode=on_episode,
        )
    finally:
        for env in envs:
            env.close()
    return len(keys)


# --------------------------------------------------------------------------------------------
# Summaries
# --------------------------------------------------------------------------------------------
def _mean(values: list[float]) -> float:
    return float(sum(values) / len(values)) if values else float("nan")


def _group_summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    won = [float(bool(r["won"])) for r in records]
    score = [float(r.get("score", 0.0)) for r in records]
    success = proportion_ci(won)
    by_seed: dict[int, list[float]] = defaultdict(list)
    for r, outcome in zip(records, won):
        by_seed[int(r.get("agent_seed", 0))].append(outcome)
    return {
        "episodes": len(records),
        "success": success.to_dict(),
        "episodes_needed": episodes_needed(success.mean) if records else None,
        "seeds": seed_summary(by_seed) if len(by_seed) > 1 else None,
        "score": mean_ci(score).to_dict(),
        "steps_mean": _mean([float(r.get("steps", 0)) for r in records]),
        "invalid_actions_mean": _mean([float(r.get("invalid_actions", 0)) for r in records]),
        "format_errors_mean": _mean([float(r.get("format_errors", 0)) for r in records]),
        "prompt_tokens_mean": _mean([float(r.get("prompt_tokens", 0)) for r in records]),
        "completion_tokens_mean": _mean([float(r.get("completion_tokens", 0)) for r in records]),
        "errors": sum(1 for r in records if r.get("error")),
        "timing": {
            "wall_time_s_mean": _mean([float(r.get("wall_time_s", 0.0)) for r in records]),
            "wall_time_s_total": float(sum(float(r.get("wall_time_s", 0.0)) for r in records)),
            "gen_time_s_total": float(sum(float(r.get("gen_time_s", 0.0)) for r in records)),
            "env_time_s_total": float(sum(float(r.get("env_time_s", 0.0)) for r in records)),
        },
    }


def summarize(records: list[dict[str, Any]], paired: bool = False) -> dict[str, Any]:
    """The summary of a run's episode records (deterministic apart from ``timing``)."""
    latest: dict[str, dict[str, Any]] = {}
    for record in records:
        latest[record["key"]] = record  # a replayed key keeps its last result
    ordered = [latest[k] for k in sorted(latest)]
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for record in ordered:
        groups[
            (record["env_id"], record.get("env_family", ""), record.get("condition", PLAIN))
        ].append(record)
    agents = sorted({r.get("agent", "") for r in ordered})
    summary: dict[str, Any] = {
        "agent": agents[0] if len(agents) == 1 else agents,
        "episodes": len(ordered),
        "groups": [
            {"env_id": env_id, "env_family": family, "condition": condition, **_group_summary(rs)}
            for (env_id, family, condition), rs in sorted(groups.items())
        ],
        "overall": {},
    }
    conditions = sorted({r.get("condition", PLAIN) for r in ordered})
    for condition in conditions:
        summary["overall"][condition] = _group_summary(
            [r for r in ordered if r.get("condition", PLAIN) == condition]
        )
    if paired:
        summary["paired"] = _paired(ordered)
    summary["warnings"] = _warnings(summary)
    return summary


def _warnings(summary: dict[str, Any]) -> list[str]:
    """One sentence per interval too wide to exclude a difference of 0.1."""
    found = [
        resolution_warning(
            f"{g['env_id']} ({g['condition']}): success",
            Interval(**g["success"]),
            g["episodes_needed"],
        )
        for g in summary["groups"]
    ]
    paired = summary.get("paired") or {}
    rows = list(paired.get("per_env", {}).items())
    if len(rows) > 1:  # with one env id the overall difference repeats it
        rows.append(("all env ids", paired["overall"]))
    found += [
        resolution_warning(
            f"{env_id}: paired difference", Interval(**p["difference"]), p["pairs_needed"], "pairs"
        )
        for env_id, p in rows
        if p
    ]
    return [w for w in found if w]


def _paired(records: list[dict[str, Any]]) -> dict[str, Any]:
    """With minus without experience, per env id and overall, paired by (env id, task, seed):
    :func:`~comprl_gym.evaluation.stats.paired_comparison` plus each side's success and the
    pairs that would resolve a difference of 0.1."""
    outcomes: dict[str, dict[tuple[str, int, int], float]] = {
        WITH_EXPERIENCE: {},
        WITHOUT_EXPERIENCE: {},
    }
    for r in records:
        if r.get("condition") in outcomes:
            key = (r["env_id"], r["task_index"], r["agent_seed"])
            outcomes[r["condition"]][key] = float(bool(r["won"]))

    def compared(env_id: str | None) -> dict[str, Any]:
        with_, without = (
            {k: v for k, v in outcomes[c].items() if env_id is None or k[0] == env_id}
            for c in (WITH_EXPERIENCE, WITHOUT_EXPERIENCE)
        )
        w, wo = paired_outcomes(with_, without)
        return {
            **paired_comparison(with_, without),
            "success_with": _mean(w),
            "success_without": _mean(wo),
            "pairs_needed": pairs_needed(w, wo) if w else None,
        }

    env_ids = sorted({key[0] for table in outcomes.values() for key in table})
    return {"per_env": {env_id: compared(env_id) for env_id in env_ids}, "overall": compared(None)}


def _fmt_ci(ci: dict[str, float]) -> str:
    if ci["n"] == 0 or math.isnan(ci["mean"]):
        return "n/a"
    return f"{ci['mean']:.2f} [{ci['low']:.2f}, {ci['high']:.2f}]"


def summary_markdown(summary: dict[str, Any]) -> str:
    """The summary as Markdown tables."""
    lines = [
        f"# Evaluation of `{summary['agent']}`\n",
        "| env id | experience | episodes | success (95% Wilson CI) | score (95% CI) | steps | invalid | format errors | tokens (prompt+completion) | wall s/episode |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for g in summary["groups"]:
        tokens = g["prompt_tokens_mean"] + g["completion_tokens_mean"]
        lines.append(
            f"| {g['env_id']} | {g['condition']} | {g['episodes']} | {_fmt_ci(g['success'])} | "
            f"{_fmt_ci(g['score'])} | {g['steps_mean']:.1f} | {g['invalid_actions_mean']:.1f} | "
            f"{g['format_errors_mean']:.1f} | {tokens:.0f} | {g['timing']['wall_time_s_mean']:.2f} |"
        )
    paired = summary.get("paired")
    if paired:
        lines += [
            "\n## With vs without experience (paired)\n",
            "| env id | pairs | success with | success without | difference (95% Newcombe CI) |",
            "| --- | --- | --- | --- | --- |",
        ]
        rows = [*paired["per_env"].items(), ("all", paired["overall"])]
        for env_id, p in rows:
            lines.append(
                f"| {env_id} | {p['pairs']} | {p['success_with']:.2f} | {p['success_without']:.2f} | "
                f"{_fmt_ci(p['difference'])} |"
            )
    lines += _seeds_markdown([(f"{g['env_id']} ({g['condition']})", g) for g in summary["groups"]])
    lines += _warnings_markdown(summary.get("warnings", []))
    return "\n".join(lines) + "\n"


def _warnings_markdown(warnings: list[str]) -> list[str]:
    if not warnings:
        return []
    heading = f"\n## Too few episodes to resolve a difference of {RESOLVABLE_DIFFERENCE:g}\n"
    return [heading, *(f"- {w}" for w in warnings)]


def _seeds_markdown(rows: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """Per-seed success, spread and pooled interval of the rows run with several seeds."""
    rows = [(label, r["seeds"]) for label, r in rows if r.get("seeds")]
    if not rows:
        return []
    lines = [
        "\n## Across agent seeds\n",
        "| run | per-seed success | sd across seeds | between seeds (95% CI) | pooled (95% CI) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for label, s in rows:
        per_seed = ", ".join(f"{k}: {v['mean']:.2f}" for k, v in s["per_seed"].items())
        lines.append(
            f"| {label} | {per_seed} | {s['spread']['sd']:.2f} | {_fmt_ci(s['between_seeds'])} | "
            f"{_fmt_ci(s['pooled'])} |"
        )
    return lines


def write_summary(out_dir: str | os.PathLike[str], summary: dict[str, Any]) -> None:
    atomic_write_json(Path(out_dir) / SUMMARY_FILE, jsonable(summary))
    atomic_write_text(Path(out_dir) / SUMMARY_MD, summary_markdown(summary))
