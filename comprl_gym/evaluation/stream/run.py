"""``comprl-gym stream``: a stream played and written as a run folder.

:func:`run_stream` streams any env id, ``tasks`` held-out tasks (reset seeds ``0..tasks-1``
of the env's pool; a ``split`` env argument chooses the pool where the family has one),
``visits`` visits each, one arm per lesson source (:mod:`~comprl_gym.evaluation.stream.arms`),
every (task, visit) episode on the same seeds in every arm
(:func:`~comprl_gym.evaluation.stream.play.episode_seeds`).

The folder is the one ``comprl-gym eval`` writes (``config.json``, ``episodes.jsonl`` whose
records also carry ``arm``, ``visit``, ``reset_seed`` and ``sampling_seed``, ``summary.json`` /
``summary.md``, ``provenance.json``), plus ``stream.png`` (success by visit per arm) and
``stores/<arm>/`` (each arm's store as the stream left it). ``summary.json`` is eval's summary
(one group per arm: the arm is the record's ``condition``) with ``streaming``
(:func:`~comprl_gym.evaluation.stream.summary.streaming_summary`), ``stream`` (what was
streamed) and, for a family that judges lessons, ``store_verdicts`` (per store, its lessons'
verdicts) and ``shown_verdicts``
(:func:`~comprl_gym.evaluation.stream.summary.shown_verdicts`: what each arm showed a task at
a later visit, by how its previous visit ended). ``comprl-gym leaderboard`` reads it, with a
per-visit table.

Example (a random agent; no arm carries information, so every arm plays like ``none``):
    >>> import tempfile
    >>> config = StreamConfig("comprl/Memory-Fork-v0", "random", tasks=1, visits=2,
    ...                       arms=["exemplar"], env_kwargs={"split": "test"},
    ...                       out_dir=tempfile.mkdtemp(), progress=False)
    >>> summary = run_stream(config)
    >>> list(summary["streaming"]), summary["streaming"]["exemplar"]["visits"]["2"]["episodes"]
    (['none', 'exemplar'], 1)
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from comprl_gym.agents.base import make_agent
from comprl_gym.agents.llm_agent import agent_from_spec
from comprl_gym.core import ConfigurationError
from comprl_gym.env_factory import EnvSpec, make_env
from comprl_gym.evaluation.eval import (
    CONFIG_FILE,
    EPISODES_FILE,
    SUMMARY_MD,
    _is_llm_spec,
    summarize,
    summary_markdown,
    write_run,
)
from comprl_gym.evaluation.provenance import PROVENANCE_FILE, write_provenance
from comprl_gym.evaluation.stream.arms import build_arms, check_arms, env_family
from comprl_gym.evaluation.stream.config import StreamConfig
from comprl_gym.evaluation.stream.play import run_streaming
from comprl_gym.evaluation.stream.report import plot_streaming, stream_markdown
from comprl_gym.evaluation.stream.summary import (
    shown_verdicts,
    streaming_summary,
    versus_summary,
)
from comprl_gym.experience import ExperienceManager
from comprl_gym.families import env_pool, held_out_kwargs, verdict_counts
from comprl_gym.rollouts import Trajectory, append_jsonl
from comprl_gym.utils import atomic_write_json, atomic_write_text, jsonable

PLOT_FILE = "stream.png"
STORES = "stores"


def run_stream(
    config: StreamConfig,
    agent: Any = None,
    own: Callable[[ExperienceManager], Callable[[Trajectory], None]] | None = None,
    run: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Stream ``config`` and write its run folder; returns the summary.

    ``agent`` defaults to ``config.agent`` read as an eval spec (:func:`spec_agent`); ``own``
    makes the ``own`` arm's ``learn`` from its store (a trained extractor's ``write``);
    ``run`` is the agent's origin for ``provenance.json``
    (:meth:`comprl_gym.trainers.run.Run.origin` or
    :func:`~comprl_gym.evaluation.provenance.config_provenance`).
    """
    started = time.time()
    out = Path(config.out_dir)
    if (out / EPISODES_FILE).exists():
        raise ConfigurationError(
            f"{out} already holds results; a stream cannot resume (its memories learn in "
            "order): choose another --output-dir"
        )
    family = env_family(config)
    check_arms(config, family, own is not None)
    # A family with pools streams its held-out pool unless a split is named; the split is
    # then in env_kwargs, so config.json and the summary record the pool played.
    pool = env_pool(config.env_id, config.env_kwargs)
    config.env_kwargs = held_out_kwargs(config.env_id, config.env_kwargs)
    spec = config.env_spec()
    if agent is None:
        agent = spec_agent(config.agent, spec, config.seed)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(
        out / CONFIG_FILE,
        {
            "kind": "stream",
            "identity": {"agent": config.agent},
            "config": jsonable(asdict(config)),
            "env_ids": [config.env_id],
            "pool": asdict(pool) if pool else None,
        },
    )
    arms = build_arms(config, family, own, out / STORES)
    try:
        records = run_streaming(
            spec,
            config.task_seeds,
            config.visits,
            arms,
            agent,
            inject_top_k=config.inject_top_k,
            seed=config.seed,
            agent_label=config.agent,
            progress=config.progress,
            parallel=config.parallel,
            # Saved as played; write_run rewrites the file whole at the end.
            on_visit=lambda played: append_jsonl(out / EPISODES_FILE, jsonable(played)),
        )
        texts = {
            a.name: [e.text for e in a.manager.experiences()] for a in arms if a.manager is not None
        }
    finally:
        for arm in arms:
            if arm.manager is not None:
                arm.manager.close()
    summary = summarize(records)
    summary["stream"] = {
        "env_id": config.env_id,
        "env_kwargs": config.env_kwargs,
        "tasks": config.tasks,
        "first_task": config.first_task,
        "visits": config.visits,
        "arms": config.arms,
        "seed": config.seed,
        "run": config.run,
        "pool": asdict(pool) if pool else None,
    }
    summary["streaming"] = streaming_summary(records)
    if config.versus:
        summary["versus"] = versus_summary(records, config.versus)
    if family is not None and family.lessons.judge is not None:
        summary["store_verdicts"] = {
            name: verdict_counts(family, lessons) for name, lessons in texts.items()
        }
        summary["shown_verdicts"] = shown_verdicts(records, family)
    write_run(out, records, summary)
    atomic_write_text(out / SUMMARY_MD, summary_markdown(summary) + stream_markdown(summary))
    plot_streaming(
        summary["streaming"], out / PLOT_FILE, f"{config.env_id}: success by visit, per arm"
    )
    write_provenance(out, config, time.time() - started, run=run)
    return summary


def spec_agent(spec: str, env_spec: EnvSpec, seed: int) -> Any:
    """The agent of an eval spec, as :func:`~comprl_gym.evaluation.stream.play.run_streaming`
    takes it: a batched LLM agent, or a factory of one scripted agent per episode (seeded by
    the episode's sampling seed)."""
    if _is_llm_spec(spec):
        env = make_env(env_spec)
        try:
            return agent_from_spec(spec, env, seed=seed)
        finally:
            env.close()
    return lambda env, sampling_seed: make_agent(spec, env, seed=sampling_seed)


def stream_result(folder: str | os.PathLike[str], keys: tuple[str, ...]) -> dict[str, Any]:
    """A finished stream folder as a benchmark commits it: the ``keys`` of its
    ``summary.json`` (``streaming``, ``versus``, ``store_verdicts``, ...; a key the stream did
    not write is ``{}``) and its ``provenance.json``. Its episodes are
    :func:`~comprl_gym.evaluation.eval.load_episodes`."""
    folder = Path(folder)
    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    provenance = json.loads((folder / PROVENANCE_FILE).read_text(encoding="utf-8"))
    return {**{k: summary.get(k, {}) for k in keys}, "provenance": provenance}
