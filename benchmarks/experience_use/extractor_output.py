"""What does a small extractor write? Parse rate and lesson quality per format and temperature.

Issue 12 ("the store must not fill with noise"). A fixed set of real MiniHack trajectories
(Room-Random-5x5, max 8 steps: the expert's wins, the random agent's wins and losses; half
wins, half losses; seeded, generated once) is shown to SmolLM2-135M-Instruct, the only
offline model, as the trainer's extractor shows it (:mod:`comprl_gym.lessons.formats`):

* ``operations``: the reference's input (interaction, SUCCESS/FAILURE, the lessons shown) and
  output (JSON add / update / return in ``<answer>``, memories as ``<title>..</title><content>
  ..</content>``); every other trajectory is shown one hand-written lesson so that ``update``
  is possible;
* ``plain``: one sentence of advice.

For each (format, temperature) it reports, over the trajectories: the parse rate (an answer
the extractor code accepts: operations that parse, or a plain lesson of 8+ characters), the
decline rate (``return``), the lessons written, and the fraction of written lessons that pass
:func:`~comprl_gym.lessons.quality.lesson_quality`'s four fixed checks (5-60 words, 80%
dictionary words, no 3-gram loop, a word of the family's vocabulary) and the mean score; the
yield is passing lessons per trajectory. Results: ``benchmarks/results/extractor_output.json``
and ``.png``.

Run (CPU; about 40 min on 2 cores shared with other jobs, where SmolLM2 prefills ~80 prompt
tokens/s and decodes ~1 token/s per sequence):
    python -m benchmarks.experience_use.extractor_output
Run (larger):
    python -m benchmarks.experience_use.extractor_output --episodes 24 --operations-temperatures 1.0 0.7 0.3 \\
        --max-tokens 192 48 --transcript-chars 6000
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path
from typing import Any

import gymnasium as gym

import comprl_gym  # noqa: F401  (registers the comprl/* ids)
from benchmarks.common import RESULTS
from comprl_gym.agents import RandomAgent, make_agent
from comprl_gym.experience.operations import ExtractorOutputError, parse_extractor_output
from comprl_gym.experience.records import Experience
from comprl_gym.lessons.formats import (
    operations_messages,
    plain_extractor_messages,
    plain_lesson,
)
from comprl_gym.lessons.quality import lesson_quality
from comprl_gym.llm import SamplingParams, make_backend
from comprl_gym.rollouts import Trajectory, run_episode

ENV_ID = "comprl/MiniHack-Room-Random-5x5-v0"
SHOWN = Experience(
    1,
    "Walk to the stairs",
    "",
    "The observation says where the staircase down is; every turn, move one step toward it.",
)


def trajectories(n: int, seed: int, max_steps: int = 8) -> list[Trajectory]:
    """``n`` episodes: n/4 expert wins, n/4 random wins, n/2 random losses (seeded)."""
    env = gym.make(ENV_ID, max_steps=max_steps)
    wanted = {"expert-win": n // 4, "random-win": n // 4, "random-loss": n - 2 * (n // 4)}
    found: dict[str, list[Trajectory]] = {k: [] for k in wanted}
    expert = make_agent("expert", env)
    task_seed = seed * 10_000
    while any(len(found[k]) < wanted[k] for k in wanted):
        task_seed += 1
        if len(found["expert-win"]) < wanted["expert-win"]:
            t = run_episode(env, expert, seed=task_seed)
            if t.won:
                found["expert-win"].append(t)
        t = run_episode(env, RandomAgent(seed=task_seed), seed=task_seed)
        key = "random-win" if t.won else "random-loss"
        if len(found[key]) < wanted[key]:
            found[key].append(t)
    env.close()
    out = [t for k in wanted for t in found[k]]
    for i, t in enumerate(out):
        t.episode_id = f"bench-{i}"
        t.experience_ids = [SHOWN.id] if i % 2 else []
    return out


def written_lessons(text: str, output_format: str, n_shown: int) -> tuple[str, list[str]]:
    """``(status, lessons)``: status ``parsed`` / ``declined`` / ``malformed``."""
    if output_format == "plain":
        lesson = plain_lesson(text)
        return ("parsed", [lesson]) if lesson else ("malformed", [])
    try:
        ops = parse_extractor_output(text, n_shown)
    except ExtractorOutputError:
        return "malformed", []
    lessons = [f"{op.text.title}. {op.text.content}" for op in ops if op.text is not None]
    return ("parsed", lessons) if ops else ("declined", [])


def measure(
    backend: Any,
    episodes: list[Trajectory],
    output_format: str,
    temperature: float,
    max_tokens: int,
    seed: int,
    transcript_chars: int,
) -> dict[str, Any]:
    conversations = [
        plain_extractor_messages(t)
        if output_format == "plain"
        else operations_messages(t, [SHOWN] if t.experience_ids else [], transcript_chars)
        for t in episodes
    ]
    params = SamplingParams(max_tokens=max_tokens, temperature=temperature, seed=seed)
    start = time.perf_counter()
    generations = backend.chat(conversations, params)
    elapsed = time.perf_counter() - start
    rows = []
    for t, g in zip(episodes, generations):
        status, written = written_lessons(g.text, output_format, len(t.experience_ids))
        rows.append(
            {
                "episode": t.episode_id,
                "won": t.won,
                "status": status,
                "prompt_tokens": len(g.prompt_token_ids),
                "completion_tokens": len(g.completion_token_ids),
                "lessons": [{"text": text} for text in written],
                "output": g.text[:600],
            }
        )
    n = len(episodes)
    cell = {
        "format": output_format,
        "temperature": temperature,
        "episodes": n,
        "parse_rate": sum(r["status"] != "malformed" for r in rows) / n,
        "decline_rate": sum(r["status"] == "declined" for r in rows) / n,
        "mean_prompt_tokens": sum(r["prompt_tokens"] for r in rows) / n,
        "gen_seconds": elapsed,
        "rows": rows,
    }
    score_cell(cell)
    return cell


def score_cell(cell: dict[str, Any]) -> None:
    """(Re)compute a cell's quality figures from its stored lessons with the current check."""
    lessons = []
    for row in cell["rows"]:
        for lesson in row["lessons"]:
            q = lesson_quality(lesson["text"], "minihack")
            lesson.update(score=q.score, passed=q.passed)
            lessons.append(q)
    n = cell["episodes"]
    cell["lessons_written"] = len(lessons)
    cell["lesson_pass_rate"] = sum(q.passed for q in lessons) / len(lessons) if lessons else 0.0
    cell["lesson_mean_score"] = sum(q.score for q in lessons) / len(lessons) if lessons else 0.0
    cell["checks_passed"] = {
        check: sum(getattr(q, check) for q in lessons)
        for check in ("length_ok", "dictionary_ok", "no_loop", "relevant")
    }
    cell["yield_per_episode"] = sum(q.passed for q in lessons) / n


def plot(cells: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(12, 3.5))
    for metric, ax in zip(("parse_rate", "lesson_pass_rate", "yield_per_episode"), axes):
        for fmt in sorted({c["format"] for c in cells}):
            mine = sorted((c for c in cells if c["format"] == fmt), key=lambda c: c["temperature"])
            ax.plot([c["temperature"] for c in mine], [c[metric] for c in mine], "o-", label=fmt)
        ax.set_title(metric)
        ax.set_xlabel("temperature")
        ax.set_ylim(-0.05, 1.05)
    axes[0].legend()
    n = cells[0]["episodes"] if cells else 0
    fig.suptitle(f"SmolLM2-135M as extractor on {n} MiniHack Room-Random-5x5 trajectories")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=12)
    parser.add_argument("--plain-temperatures", type=float, nargs="*", default=[1.0, 0.7, 0.3])
    parser.add_argument("--operations-temperatures", type=float, nargs="*", default=[0.3, 1.0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument(
        "--max-tokens", type=int, nargs=2, default=[96, 32], metavar=("OPERATIONS", "PLAIN")
    )
    parser.add_argument(
        "--transcript-chars",
        type=int,
        default=1500,
        help="experience.extractor_transcript_chars of the operations prompt",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch", type=int, default=12)
    parser.add_argument("--out", default=str(RESULTS / "extractor_output.json"))
    parser.add_argument(
        "--rescore",
        action="store_true",
        help="recompute the quality figures of --out from its stored lessons",
    )
    args = parser.parse_args()
    if args.rescore:
        out = Path(args.out)
        summary = json.loads(out.read_text())
        for cell in summary["cells"]:
            score_cell(cell)
        out.write_text(json.dumps(summary, indent=1))
        plot(summary["cells"], out.with_suffix(".png"))
        return
    random.seed(args.seed)
    episodes = trajectories(args.episodes, args.seed)
    backend = (
        make_backend(f"hf:{args.model}") if ":" not in args.model else make_backend(args.model)
    )
    if hasattr(backend, "max_batch_size"):
        backend.max_batch_size = args.batch
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {
        "env_id": ENV_ID,
        "model": args.model,
        "episodes": {
            "count": len(episodes),
            "wins": sum(t.won for t in episodes),
            "mean_steps": sum(t.steps for t in episodes) / len(episodes),
        },
        "max_tokens": {"operations": args.max_tokens[0], "plain": args.max_tokens[1]},
        "transcript_chars": args.transcript_chars,
        "cells": [],
    }
    plan = [("plain", t) for t in args.plain_temperatures]
    plan += [("operations", t) for t in args.operations_temperatures]
    for output_format, temperature in plan:
        max_tokens = args.max_tokens[0 if output_format == "operations" else 1]
        cell = measure(
            backend,
            episodes,
            output_format,
            temperature,
            max_tokens,
            args.seed,
            args.transcript_chars,
        )
        summary["cells"].append(cell)
        print(json.dumps({k: v for k, v in cell.items() if k != "rows"}), flush=True)
        out.write_text(json.dumps(summary, indent=1))  # every finished cell is kept
    plot(summary["cells"], out.with_suffix(".png"))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
