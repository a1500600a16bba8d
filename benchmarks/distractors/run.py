"""Distractor stress test: does usefulness-aware retrieval recover a polluted store?

Streamed on held-out dungeons of ``comprl/Memory-Fork-v0`` (``branch_length=2``, compact
observations, ``moves="open"``: east and west are the only choices, so a blind walker wins
half the time and a reader of a right lesson always). Eight arms, every (dungeon, visit)
episode on the same reset and sampling seeds (:func:`~comprl_gym.evaluation.stream.
episode_seeds`, common random numbers):

* ``none``: no lessons;
* ``clean``: the oracle lesson of every dungeon;
* ``polluted``: the oracle lesson of half the dungeons and the inverted lesson of the other
  half (a fixed half drawn from each of ``--seeds``), usefulness off;
* ``polluted_useful``: the same store with ``usefulness_weight`` on (``--usefulness-weight``,
  default 4, the docs' worked example; prior (1, 1), the default);
* ``polluted_outcomes`` and ``polluted_outcomes_useful``: the same pair with a store that
  learns outcome tallies only (no cases memory), so that nothing but usefulness can move an
  inverted lesson;
* ``polluted_useful_agreed`` and ``polluted_outcomes_useful_agreed``: the two usefulness arms
  with the other use credit: an episode's outcome goes only to the shown lessons its actions
  agreed with (:func:`~comprl_gym.trainers.credit.agreed_lessons`: the lesson's content names
  the side walked), not to every lesson shown (which, with three shown, charges a right
  lesson for the loss a wrong one caused).

Every store arm is a *learning* store: after each visit the arm's ``learn`` reports each
episode's outcome for the lessons it was shown (:func:`~comprl_gym.trainers.credit.
credit_uses`, the trainer's tallies: ``manager.report_outcome``) and, except the ``outcomes``
pair, stores the episode in the cases memory (:class:`~comprl_gym.lessons.memories.
CasesMemory`: the task and the actions that won or lost it), so new evidence competes with the
old lesson at retrieval.

All the stores retrieve diversified (usefulness enters only the diversified score) with
the other diversification terms off: ``diversity_lambda=0`` (no retrieval-count penalty),
``diversity_recent_penalty=0`` and ``diversity_dropout_p=0`` (no random drop of a recently
shown top hit). So a candidate's score is ``-rank - w * (1 - posterior win rate)``, and the
only difference between an arm and its ``_useful`` twin is ``w``.

**The reader is scripted, not an LLM** (:class:`ScriptedReader`): it isolates the store
(retrieval, ranking, usefulness) from whether a model reads. It reads the lessons it is shown
(``info["experiences"]``, best first), takes the first that names its own dungeon (the
family's judge, :meth:`~comprl_gym.families.FamilySpec.judge`, reads which dungeon a text is
about; the reader's own is the one its task names) and walks the side that lesson states,
or the other side when the lesson is a lost case (``Actions that lost it``); with no lesson
about its dungeon, or one that states no single side, it walks a coin side seeded by the
episode's sampling seed (the same coin in every arm).

Reported per arm and visit, separately on the polluted half and the clean half of the
dungeons: success with Wilson intervals; each arm minus ``none`` and each arm with usefulness
minus its twin without, paired episode by episode (Newcombe's interval, McNemar's exact p).

Run: ``python -m benchmarks.distractors.run [--visits 6] [--seeds 0 1] [--top-k 1 3]
[--split test] [--json benchmarks/results/store_distractors.json]`` (minutes on 2 cores: no
LLM; the embedder is the packaged all-MiniLM-L6-v2).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from benchmarks.common import RESULTS
from comprl_gym.env_factory import EnvSpec  # noqa: E402
from comprl_gym.envs.memory.dungeons import SIDES, other_side  # noqa: E402
from comprl_gym.envs.memory.judge import CONTENT_HEADING  # noqa: E402
from comprl_gym.evaluation.stream import (  # noqa: E402
    Arm,
    plot_streaming,
    run_streaming,
    streaming_markdown,
    streaming_summary,
    task_ids,
)
from comprl_gym.experience import ExperienceConfig, ExperienceManager  # noqa: E402
from comprl_gym.experience.records import format_experience_text  # noqa: E402
from comprl_gym.families import family_spec  # noqa: E402
from comprl_gym.lessons.memories import CasesMemory  # noqa: E402
from comprl_gym.rollouts import Trajectory  # noqa: E402
from comprl_gym.trainers.credit import credit_uses  # noqa: E402
from comprl_gym.utils import atomic_write_text  # noqa: E402

ENV_ID = "comprl/Memory-Fork-v0"
ENV_KWARGS = {"branch_length": 2, "observation_mode": "compact", "moves": "open"}
FAMILY = family_spec("memory")
#: The docs' worked example (docs/experience-store.md, "Usefulness at retrieval").
USEFULNESS_WEIGHT = 4.0
#: What the cases memory writes after a loss: the side it names is the one not to take.
LOST_CASE = "Actions that lost it"
#: What it writes after a win.
WON_CASE = "Actions that won it"


def lesson_side(text: str) -> str | None:
    """The side a lesson tells its reader to walk: the one side its content states (after
    ``## Content:``, where there is one), or the other one for a lost case; ``None`` when it
    states both sides or neither.

    Example:
        >>> lesson_side("In the Vault of Marrow the staircase down is at the end of the west branch.")
        'west'
        >>> lesson_side("Task: You are in the Vault of Marrow.\\nActions that lost it, in order: west.")
        'east'
        >>> lesson_side("## Title: east or west?\\n## Content: the air is cold") is None
        True
    """
    content = text.split(CONTENT_HEADING)[-1]
    stated = set(re.findall(r"\b(east|west)\b", content.lower()))
    if len(stated) != 1:
        return None
    side = stated.pop()
    return other_side(side) if LOST_CASE in content else side


def read_lessons(own: int | None, texts: Sequence[str]) -> tuple[str | None, int | None]:
    """``(side, position)``: what the reader does with the lessons ``texts`` (best first) in
    dungeon ``own``: the first lesson the family's judge says is about ``own``, at
    ``position``, and the side it tells (:func:`lesson_side`, ``None`` if it tells none);
    ``(None, None)`` when no lesson is about ``own``.

    Example (dungeon 192 is the first held-out one, the Vault of Iron):
        >>> from comprl_gym.envs.memory.dungeons import dungeon, oracle_lesson
        >>> own = dungeon(192)
        >>> read_lessons(192, [oracle_lesson(193), oracle_lesson(192)]) == (own.side, 1)
        True
        >>> read_lessons(192, [oracle_lesson(193)])
        (None, None)
    """
    for position, text in enumerate(texts):
        verdict = FAMILY.judge(text)
        if verdict is not None and verdict.task_id is not None and verdict.task_id == own:
            return lesson_side(text), position
    return None, None


class ScriptedReader:
    """Walks the side the first lesson about its own dungeon tells (:func:`read_lessons`),
    else a coin side drawn from ``sampling_seed`` (drawn whatever the lessons, so every arm
    tosses the same coin in the same episode)."""

    def __init__(self, sampling_seed: int):
        self.coin = random.Random(sampling_seed).choice(SIDES)
        self.side = self.coin

    def reset(self, task: str, info: dict[str, Any]) -> None:
        own = FAMILY.judge(task).task_id  # the dungeon its task names
        texts = [e["text"] for e in info.get("experiences") or []]
        side, _ = read_lessons(own, texts)
        self.side = side or self.coin

    def act(self, observation: str, info: dict[str, Any]) -> str:
        return self.side


def store_config(usefulness_weight: float) -> ExperienceConfig:
    """Diversified retrieval whose only term beyond similarity rank is usefulness: no
    retrieval-count penalty, no recent-use penalty, no dropout of a recent top hit (each
    would hide a dungeon's own lesson from its later visits, in every arm alike)."""
    return ExperienceConfig(
        diversify=True,
        diversity_lambda=0.0,
        diversity_recent_penalty=0.0,
        diversity_dropout_p=0.0,
        usefulness_weight=usefulness_weight,
    )


def inverted_half(tasks: Sequence[int], seed: int) -> list[int]:
    """The fixed, seeded half of ``tasks`` whose lesson a polluted store inverts.

    Example:
        >>> half = inverted_half(range(8), 0)
        >>> len(half), half == inverted_half(range(8), 0), half == sorted(half)
        (4, True, True)
    """
    return sorted(random.Random(f"distractors/{seed}").sample(list(tasks), len(tasks) // 2))


def learner(
    manager: ExperienceManager, cases: bool = True, credit: str = "shown"
) -> Callable[[Trajectory], None]:
    """A store's ``learn``: the episode's outcome for the lessons it was shown (the trainer's
    tallies; ``credit="agreed"``: only for those its actions agreed with), then (``cases``)
    the episode itself in the cases memory."""
    memory = CasesMemory()

    def learn(episode: Trajectory) -> None:
        credit_uses([episode], manager, rule=credit)
        if cases:
            memory.learn(episode, manager)

    return learn


#: Each store arm: (its fixed lessons, usefulness on, the cases memory on, the use credit).
#: The ``outcomes`` pair learns outcome tallies only: no new evidence competes with the
#: inverted lesson, so only usefulness can move it. The ``_agreed`` arms credit an episode's
#: outcome only to the shown lessons its actions agreed with (``credit_uses(rule="agreed")``)
#: instead of to every lesson shown.
STORE_ARMS = {
    "clean": ("clean", False, True, "shown"),
    "polluted": ("polluted", False, True, "shown"),
    "polluted_useful": ("polluted", True, True, "shown"),
    "polluted_outcomes": ("polluted", False, False, "shown"),
    "polluted_outcomes_useful": ("polluted", True, False, "shown"),
    "polluted_useful_agreed": ("polluted", True, True, "agreed"),
    "polluted_outcomes_useful_agreed": ("polluted", True, False, "agreed"),
}
ARMS = ("none", *STORE_ARMS)
#: (with usefulness, without): the comparisons that isolate the usefulness term, under each
#: use credit (the ``_agreed`` rows beside the others).
USEFULNESS_PAIRS = (
    ("polluted_useful", "polluted"),
    ("polluted_outcomes_useful", "polluted_outcomes"),
    ("polluted_useful_agreed", "polluted"),
    ("polluted_outcomes_useful_agreed", "polluted_outcomes"),
)


def build_arms(
    folder: Path, ids: Sequence[Any], inverted: Sequence[int], usefulness_weight: float
) -> list[Arm]:
    """The arms (:data:`ARMS`), their stores under ``folder``: ``ids`` are the tasks' task ids
    (in task order), ``inverted`` the task indices whose lesson the polluted stores invert."""
    bad = set(inverted)
    lessons = {
        "clean": [FAMILY.fixed_lesson("oracle", i) for i in ids],
        "polluted": [
            FAMILY.fixed_lesson("inverted" if t in bad else "oracle", i) for t, i in enumerate(ids)
        ],
    }
    arms = [Arm("none")]
    for name, (kind, useful, cases, credit) in STORE_ARMS.items():
        config = store_config(usefulness_weight if useful else 0.0)
        manager = ExperienceManager(str(folder / name), config=config)
        manager.add(lessons[kind], env_family=FAMILY.name)
        arms.append(Arm(name, manager, learner(manager, cases, credit)))
    return arms


def lesson_facts(lesson_id: int, text: str) -> dict[str, Any]:
    """What the results keep of a shown lesson: its id, the dungeon it is about (the judge's
    ``task_id``), its kind (``fixed``: an oracle or inverted lesson; ``won case`` / ``lost
    case``: the cases memory's) and the judge's verdict on the side it names (a lost case
    that names the wrong side tells the right one).

    Example:
        >>> from comprl_gym.envs.memory.dungeons import inverted_lesson
        >>> lesson_facts(7, inverted_lesson(192))
        {'id': 7, 'about': 192, 'kind': 'fixed', 'verdict': 'wrong'}
    """
    kind = "lost case" if LOST_CASE in text else "won case" if WON_CASE in text else "fixed"
    verdict = FAMILY.judge(text)
    return {"id": lesson_id, "about": verdict.task_id, "kind": kind, "verdict": verdict.verdict}


def episode_row(record: dict[str, Any], inverted: set[int]) -> dict[str, Any]:
    """What the results file keeps of one streamed episode: arm, visit, dungeon, seeds,
    outcome, the lessons shown (best first, with the judge's verdict) and the one the reader
    followed."""
    shown = [
        format_experience_text(e["title"], e["description"], e["content"])
        for e in record.get("experiences") or []
    ]
    own = FAMILY.judge(record["task"]).task_id
    side, position = read_lessons(own, shown)
    return {
        "arm": record["arm"],
        "visit": record["visit"],
        "task_index": record["task_index"],
        "task_id": record["task_id"],
        "half": "polluted" if record["task_index"] in inverted else "clean",
        "reset_seed": record["reset_seed"],
        "sampling_seed": record["sampling_seed"],
        "won": bool(record["won"]),
        "actions": [turn["action"] for turn in record["turns"]],
        "lessons_shown": [
            lesson_facts(e["id"], text) for e, text in zip(record.get("experiences") or [], shown)
        ],
        "followed": position,
        "followed_side": side,
    }


def half_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One half's streaming summary (paired with ``none``) and each usefulness pair's
    difference (:data:`USEFULNESS_PAIRS`) per visit and pooled; plus, per arm and visit, what the reader followed: a
    right lesson, a wrong one, or nothing about its dungeon (a coin)."""
    streaming = streaming_summary(rows)
    followed: dict[str, dict[str, dict[str, int]]] = {}
    for row in rows:
        counts = followed.setdefault(row["arm"], {}).setdefault(
            str(row["visit"]), {"right": 0, "wrong": 0, "coin": 0}
        )
        if row["followed"] is None or row["followed_side"] is None:
            counts["coin"] += 1
        else:
            lesson = row["lessons_shown"][row["followed"]]
            # A lost case states the losing side: following it right means it named the wrong.
            lost = lesson["kind"] == "lost case"
            counts["right" if (lesson["verdict"] == "wrong") == lost else "wrong"] += 1
    return {
        "streaming": streaming,
        "usefulness": {
            f"{useful} minus {plain}": streaming_summary(rows, reference=plain)[useful][
                f"minus_{plain}"
            ]
            for useful, plain in USEFULNESS_PAIRS
        },
        "followed": followed,
    }


def run_seed(
    split: str, tasks: int, visits: int, seed: int, top_k: int, usefulness_weight: float
) -> dict[str, Any]:
    """Stream the arms on ``tasks`` dungeons of ``split`` for ``visits`` visits, ``top_k``
    lessons shown per episode."""
    spec = EnvSpec.of(ENV_ID, {"split": split, **ENV_KWARGS})
    task_list = list(range(tasks))
    ids = task_ids(spec, task_list)
    inverted = inverted_half(task_list, seed)
    started = time.time()
    with tempfile.TemporaryDirectory() as folder:
        arms = build_arms(Path(folder), ids, inverted, usefulness_weight)
        try:
            records = run_streaming(
                spec,
                task_list,
                visits,
                arms,
                lambda env, sampling_seed: ScriptedReader(sampling_seed),
                inject_top_k=top_k,
                seed=seed,
                agent_label="scripted-reader",
                progress=False,
            )
        finally:
            for arm in arms:
                if arm.manager is not None:
                    arm.manager.close()
    rows = [episode_row(r, set(inverted)) for r in records]
    return {
        "seed": seed,
        "top_k": top_k,
        "inverted_tasks": inverted,
        "task_ids": ids,
        "seconds": round(time.time() - started, 1),
        "halves": {
            half: half_summary([r for r in rows if r["half"] == half])
            for half in ("polluted", "clean")
        },
        "episodes": rows,
    }


def _difference(paired: dict[str, Any]) -> str:
    d = paired["difference"]
    return f"{d['mean']:+.2f} [{d['low']:+.2f}, {d['high']:+.2f}] (p {paired['mcnemar_p']:.3g})"


def markdown(result: dict[str, Any]) -> str:
    """Per run (top_k, seed) and half: success by visit per arm (paired with none), then
    ``polluted_useful`` minus ``polluted`` per visit."""
    lines = []
    for run in result["runs"]:
        for half, summary in run["halves"].items():
            lines += [
                f"\n### top_k {run['top_k']}, seed {run['seed']}, {half} half "
                f"({len(run['inverted_tasks'])} dungeons)\n",
                streaming_markdown(summary["streaming"]),
                "",
            ]
            lines += [
                f"{pair}: "
                + "; ".join(
                    f"{'all' if v == 'all' else 'visit ' + v} {_difference(p)}"
                    for v, p in paired.items()
                )
                for pair, paired in summary["usefulness"].items()
            ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", default="test", choices=("test", "test_large"))
    parser.add_argument("--tasks", type=int, default=64, help="held-out dungeons streamed")
    parser.add_argument("--visits", type=int, default=6)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument(
        "--top-k", type=int, nargs="+", default=[1, 3], help="lessons shown per episode"
    )
    parser.add_argument("--usefulness-weight", type=float, default=USEFULNESS_WEIGHT)
    parser.add_argument("--json", type=Path, default=RESULTS / "store_distractors.json")
    parser.add_argument("--png", type=Path, default=RESULTS / "store_distractors.png")
    args = parser.parse_args(argv)
    result = {
        "benchmark": "store distractors",
        "reader": "scripted (not an LLM): the first shown lesson about its own dungeon, else "
        "a seeded coin; it isolates the store's retrieval, ranking and usefulness",
        "env_id": ENV_ID,
        "env_kwargs": {"split": args.split, **ENV_KWARGS},
        "tasks": args.tasks,
        "visits": args.visits,
        "usefulness_weight": args.usefulness_weight,
        "store_config": {
            k: v
            for k, v in store_config(args.usefulness_weight).to_dict().items()
            if k.startswith(("diversif", "diversity", "usefulness"))
        },
        "runs": [
            run_seed(args.split, args.tasks, args.visits, seed, top_k, args.usefulness_weight)
            for top_k in args.top_k
            for seed in args.seeds
        ],
    }
    # Unindented: every episode of every run is in it (an indented file is ~7 MB).
    atomic_write_text(args.json, json.dumps(result, sort_keys=True) + "\n")
    first = result["runs"][0]
    plot_streaming(
        first["halves"]["polluted"]["streaming"],
        args.png,
        f"polluted half ({args.split}, top_k {first['top_k']}, seed {first['seed']}): "
        "success by visit, scripted reader",
    )
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
