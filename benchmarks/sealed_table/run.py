"""The sealed table (issue 44, item 4): the pre-registered final comparison, run once.

Everything it runs is read from ``benchmarks/preregistered/sealed_table.yaml`` (the plan):
the methods and their committed training configs, the seeds, the reader every method starts
from, the sealed pool's dungeons and visits, each method's streamed arms, and the primary
comparison. It refuses to start unless the plan is committed and unchanged since that commit
(a plan edited after a run would not be a plan), and its result records that commit.

Per seed and method, in the plan's order: ``comprl-gym train`` (the method's config, the
plan's seed and reader), then ``comprl-gym stream`` of that run on the sealed dungeons with the
plan's arms. Each finished step is kept under ``runs/sealed-table/`` and skipped when the bench
runs again, so the runs may span sessions (``--seeds`` runs some seeds only); a training run cut
short resumes from its checkpoint, a stream cut short starts again in a fresh folder (its
seeds make it the same stream). When every (method, seed) is streamed it writes the table
(``comprl_gym.evaluation.table.write_table``: each method's deployed arm pooled over seeds,
paired against the others per (seed, dungeon, visit), Newcombe's interval and McNemar's p)
to the plan's ``output`` stem, with the plan, its commit, the primary comparison's cell,
every run's commands, training tasks and weight hashes. Until then it prints what is left.

10 to 24 minutes per (method, seed) on 2 CPU cores (as the runs timed themselves, some beside
other jobs): a training run of 10 iterations (4.5-9.5 min) and a stream of 128 dungeons x 2
visits x 2-3 arms (4-17 min).

``--posthoc`` (not in the plan; after the table, to read it): streams the committed reader
itself, untrained, on the same dungeons, visits and seeds with the arms ``none`` and
``outcome_aware`` (about 5 minutes a seed), and writes, for it and for every (method, seed),
how often the actor's first move follows the side its visit-2 lesson names
(:func:`lesson_following`), to ``<output>_posthoc.json``. Whether an arm can matter at all
turns on that. It also streams GRPO's seed-0 actor on 64 dungeons of each development pool
of :data:`POSTHOC_POOLS` (about 4 minutes each): does it ignore lessons there too?

``--plan FILE`` runs another plan (issue 56's ``capable_table.yaml``): its ``runs`` folder,
its pool's ``first_task``, a ``writer`` whose sha256 is checked like the reader's, methods whose
extractor is probed after training (``probe: true``), a primary read between seeds (``unit:
training seed``), and a ``records`` folder where every run's per-episode records are kept,
gzipped, for :mod:`benchmarks.sealed_table.recompute`. Several benches may run one plan at
once: each takes the (method, seed)s no other holds (a lock file per pair in the runs folder).

Run:  python -m benchmarks.sealed_table.run              # whatever is not done yet
      python -m benchmarks.sealed_table.run --seeds 0    # only seed 0's runs
      python -m benchmarks.sealed_table.run --method GRPO  # only GRPO's runs
      python -m benchmarks.sealed_table.run --dry-run    # print the commands, run nothing
      python -m benchmarks.sealed_table.run --posthoc    # after the table: do lessons move the actor?
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import gzip
import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from benchmarks.common import CLI, REPO, finished, keep_records
from comprl_gym.envs.memory import dungeon
from comprl_gym.envs.memory.dungeons import other_side
from comprl_gym.envs.memory.judge import judge_lesson
from comprl_gym.evaluation.provenance import file_sha256
from comprl_gym.evaluation.stats import proportion_ci
from comprl_gym.evaluation.table import load_run, method_table, write_table
from comprl_gym.trainers.run import Run
from comprl_gym.utils import atomic_write_bytes, atomic_write_json

PLAN = REPO / "benchmarks" / "preregistered" / "sealed_table.yaml"
RUNS = REPO / "runs" / "sealed-table"
#: The keys a plan must have.
PLAN_KEYS = (
    "question", "command", "pool", "seeds", "reader", "methods", "primary", "secondary",
    "output",
)  # fmt: skip


def use_plan(path: Path) -> None:
    """Make ``path`` the plan every function reads, and its ``runs`` folder (default
    ``runs/sealed-table``) the one its runs go to."""
    global PLAN, RUNS
    PLAN = path.resolve()
    RUNS = REPO / yaml.safe_load(PLAN.read_text()).get("runs", "runs/sealed-table")


def load_plan(path: Path | None = None) -> dict[str, Any]:
    """The plan, checked for what the bench reads: every key, one entry per method name, the
    primary comparison between two of its methods, a reader (and a writer, where it names
    one) whose file has the registered sha256."""
    path = path or PLAN
    plan = yaml.safe_load(path.read_text())
    missing = [k for k in PLAN_KEYS if k not in plan]
    if missing:
        raise SystemExit(f"{path}: the plan lacks {missing}")
    names = [m["name"] for m in plan["methods"]]
    if len(set(names)) != len(names):
        raise SystemExit(f"{path}: a method named twice in {names}")
    for role in ("treatment", "control"):
        if plan["primary"][role] not in names:
            raise SystemExit(f"{path}: primary {role} {plan['primary'][role]!r} is not a method")
    for role in ("reader", "writer"):  # the writer: the capable extractor a plan names
        if role in plan:
            weights = REPO / plan[role]["path"]
            if file_sha256(weights) != plan[role]["sha256"]:
                raise SystemExit(f"{weights}: not the registered {role} (sha256 differs)")
    return plan


def registered_commit(path: Path | None = None, repo: Path | None = None) -> str:
    """The commit that last changed the plan; refuses when the plan is not committed or has
    changed since (the working tree or the index differs from that commit)."""

    path, repo = path or PLAN, repo or REPO

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)

    name = str(path.resolve().relative_to(repo.resolve()))
    commit = git("log", "-1", "--format=%H", "--", name).stdout.strip()
    if not commit:
        raise SystemExit(f"{name} is not committed: commit the plan before any run")
    if git("diff", "--quiet", "HEAD", "--", name).returncode != 0:
        raise SystemExit(f"{name} differs from its commit {commit[:7]}: a plan is not edited")
    return commit


#: What a run's outcome depends on in the checkout: a change here between the plan's commit and
#: the commit a run was made at is reported with the run (:func:`code_of`).
RUN_INPUTS = ("comprl_gym", "configs", "assets")


def code_of(folders: tuple[Path, ...], commit: str, repo: Path | None = None) -> dict[str, Any]:
    """The commits the runs of ``folders`` were made at (their provenance's
    ``package.git_commit``, and whether the tree was dirty), and whether each came after the
    plan's ``commit`` with :data:`RUN_INPUTS` as they were in it."""
    repo = repo or REPO
    out: dict[str, Any] = {}
    for folder in folders:
        package = Run(folder).provenance["package"]
        made_at = package["git_commit"]
        git = {"cwd": repo, "capture_output": True}
        after = subprocess.run(["git", "merge-base", "--is-ancestor", commit, made_at], **git)
        same = subprocess.run(["git", "diff", "--quiet", commit, made_at, "--", *RUN_INPUTS], **git)
        out[folder.name] = {
            "commit": made_at,
            "dirty": package["git_dirty"],
            "after_the_plan": after.returncode == 0,
            "inputs_as_registered": after.returncode == same.returncode == 0
            and not package["git_dirty"],
        }
    return out


def refuse_changed_inputs(commit: str, repo: Path | None = None) -> None:
    """Refuses to run when the checkout's :data:`RUN_INPUTS` differ from the plan's
    ``commit`` (committed since, or edited in the working tree): a run made here would not be
    the plan's. A plan's runs may span several checkouts and machines; each must run what
    was registered."""
    changed = subprocess.run(
        ["git", "diff", "--name-only", commit, "--", *RUN_INPUTS],
        cwd=repo or REPO, capture_output=True, text=True,
    )  # fmt: skip
    if changed.returncode != 0 or changed.stdout.strip():
        files = changed.stdout.split() or [changed.stderr.strip()]
        raise SystemExit(
            f"{', '.join(files[:5])}: changed since the plan's commit {commit[:7]}; run the "
            "plan from a checkout whose library, configs and assets are the plan's "
            "(git worktree add DIR <commit>), or register a new plan"
        )


def as_recorded(command: list[str]) -> str:
    """A command as a result records it: ``comprl-gym ...`` (not how this machine runs it)."""
    return " ".join(command)


def control(plan: dict[str, Any]) -> dict[str, Any]:
    """The plan's method that the primary comparison is against (GRPO)."""
    return next(m for m in plan["methods"] if m["name"] == plan["primary"]["control"])


def slug(name: str) -> str:
    """A method's folder name: ``"Complementary RL"`` -> ``complementary-rl``,
    ``"Complementary RL, bare extractor"`` -> ``complementary-rl-bare-extractor``."""
    return "-".join(re.findall(r"[a-z0-9]+", name.lower()))


def relative(path: Path) -> str:
    """``path`` as the commands and the result name it: relative to the checkout."""
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def train_folder(method: dict[str, Any], seed: int) -> Path:
    return RUNS / f"{slug(method['name'])}-seed{seed}"


def stream_folder(method: dict[str, Any], seed: int) -> Path:
    return RUNS / f"stream-{slug(method['name'])}-seed{seed}"


def train_command(plan: dict[str, Any], method: dict[str, Any], seed: int) -> list[str]:
    """``comprl-gym train`` of one method at one seed, from the plan's reader."""
    return [
        "comprl-gym", "train", "--config", method["config"], "--set", f"seed={seed}",
        "--set", f"actor.init_weights={plan['reader']['path']}",
        "--output-dir", relative(train_folder(method, seed)),
    ]  # fmt: skip


def stream_command(plan: dict[str, Any], method: dict[str, Any], seed: int) -> list[str]:
    """``comprl-gym stream`` of that training run on the plan's pool, with its arms."""
    pool = plan["pool"]
    return [
        "comprl-gym", "stream", "--env", pool["env"], "--split", pool["split"],
        "--tasks", str(pool["tasks"]),
        *(["--first-task", str(pool["first_task"])] if pool.get("first_task") else []),
        "--visits", str(pool["visits"]),
        *[arg for kv in pool["env_args"] for arg in ("--env-arg", kv)],
        "--max-steps", str(pool["max_steps"]), "--temperature", str(pool["temperature"]),
        "--seed", str(seed), "--run", relative(train_folder(method, seed)),
        "--arms", ",".join(method["arms"]),
        "--output-dir", relative(stream_folder(method, seed)),
    ]  # fmt: skip


def probe_file(method: dict[str, Any], seed: int) -> Path:
    return RUNS / f"probe-{slug(method['name'])}-seed{seed}.json"


def probe_command(method: dict[str, Any], seed: int) -> list[str]:
    """``comprl-gym probe`` of a method's trained extractor (and its frozen start) on the
    family's committed probe episodes, for a method whose plan entry says ``probe: true``."""
    return [
        "comprl-gym", "probe", "--run", relative(train_folder(method, seed)),
        "--out", relative(probe_file(method, seed)),
    ]  # fmt: skip


def done(path: Path) -> bool:
    """A step that ran to its end: a probe's file, or a run's ``summary.json``."""
    return path.is_file() if path.suffix == ".json" else finished(path)


def steps(plan: dict[str, Any], seeds: list[int]) -> list[tuple[Path, list[str]]]:
    """Every (folder or file, command) of the given seeds, in the order they run: per seed,
    per method, its training run, the probe of its extractor where the plan asks for one,
    then its stream."""
    out = []
    for seed in seeds:
        for method in plan["methods"]:
            out.append((train_folder(method, seed), train_command(plan, method, seed)))
            if method.get("probe"):
                out.append((probe_file(method, seed), probe_command(method, seed)))
            out.append((stream_folder(method, seed), stream_command(plan, method, seed)))
    return out


def unit_of(folder: Path) -> str:
    """The (method, seed) a step's folder or file belongs to: ``grpo-seed0`` for
    ``grpo-seed0``, ``stream-grpo-seed0`` and ``probe-grpo-seed0.json``."""
    return folder.name.removesuffix(".json").removeprefix("stream-").removeprefix("probe-")


@contextlib.contextmanager
def claimed(unit: str) -> Iterator[bool]:
    """Whether this process holds ``unit``'s lock (``RUNS/.<unit>.lock``, released when the
    block ends or the process dies); ``False`` while another bench holds it."""
    with open(RUNS / f".{unit}.lock", "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def run_step(folder: Path, command: list[str]) -> None:
    """Runs one step, resuming what a killed run left: a training run from its checkpoint, a
    stream from scratch (its unfinished folder moved aside)."""
    if folder.exists() and command[1] == "train" and (folder / "checkpoints").is_dir():
        command = [*command, "--set", "resume=true"]
    elif folder.exists() and command[1] != "probe":  # a probe writes its file when it ends
        aside = folder.with_name(f"{folder.name}.unfinished-{int(time.time())}")
        folder.rename(aside)
        print(f"moved the unfinished {folder.name} to {aside.name}")
    print("$ " + " ".join(command), flush=True)
    if subprocess.run([*CLI, *command[1:]], cwd=REPO).returncode != 0:
        raise SystemExit(f"{folder.name}: the command failed (its output is above); run again")


def run_record(
    plan: dict[str, Any], method: dict[str, Any], seed: int, commit: str
) -> dict[str, Any]:
    """What a (method, seed) ran: both commands, the training tasks, the checkpoint streamed
    and every loaded weight file's sha256 (the stream's provenance of the trained run), the
    commits its two runs were made at against the plan's ``commit`` (:func:`code_of`), and
    the time each took as it timed itself (the trainer's ``train_time_s``, the stream's
    ``wall_time_s``)."""
    provenance = Run(stream_folder(method, seed)).provenance
    trained = Run(train_folder(method, seed)).summary
    return {
        "train_command": as_recorded(train_command(plan, method, seed)),
        "stream_command": as_recorded(stream_command(plan, method, seed)),
        "training_tasks": provenance["run"].get("training_tasks"),
        "checkpoint": provenance["run"].get("checkpoint"),
        "models": provenance["run"].get("models"),
        "code": code_of((train_folder(method, seed), stream_folder(method, seed)), commit),
        "time_s": {"train": trained["train_time_s"], "stream": provenance["wall_time_s"]},
    }


def primary_cell(plan: dict[str, Any], table: dict[str, Any]) -> dict[str, Any]:
    """The plan's primary comparison read from ``table`` (:func:`~comprl_gym.evaluation.table.
    method_table`): pooled over the pairs, with McNemar's p, and between seeds, and whether it
    held by the plan's unit: ``unit: training seed`` reads the between-seeds interval (the
    seeds' paired differences, a t interval), otherwise the pooled one (the first plan's)."""
    primary = plan["primary"]
    visit = str(primary["visit"])
    row = next(r for r in table["rows"] if r["method"] == primary["treatment"])
    cell = row["versus"][primary["control"]]
    pooled, seeds = cell["this_minus_that"][visit], cell["between_seeds"][visit]
    by_seed = primary.get("unit") == "training seed"
    return {
        "comparison": f"{primary['treatment']} minus {primary['control']}, visit {visit}",
        **pooled,
        "between_seeds": seeds,
        "per_seed": {s: c[visit]["difference"]["mean"] for s, c in cell["per_seed"].items()},
        "unit": "training seed" if by_seed else "episode pair",
        "holds": (seeds["low"] if by_seed else pooled["difference"]["low"]) > 0,
    }


def summarise(plan: dict[str, Any], commit: str) -> dict[str, Any]:
    """The table of every method's streams, with the plan, its commit and the primary cell;
    where the plan names ``records``, every run's per-episode records are kept there,
    compressed (:func:`keep_plan_records`), for :mod:`benchmarks.sealed_table.recompute`."""
    methods = {
        m["name"]: [load_run(stream_folder(m, seed)) for seed in plan["seeds"]]
        for m in plan["methods"]
    }
    others = [m["name"] for m in plan["methods"] if m["name"] != plan["primary"]["treatment"]]
    extra = {
        "question": plan["question"],
        "plan": {"file": relative(PLAN), "commit": commit, "content": plan},
        "pool_note": f"{plan['pool']['split']}: never used in development; reset seeds "
        f"{plan['pool'].get('first_task', 0)}.."
        f"{plan['pool'].get('first_task', 0) + plan['pool']['tasks'] - 1} of it",
        "interval": "Wilson 95% for rates; Newcombe's paired 95% and McNemar's exact p; "
        "between seeds, Student's t over the seeds' paired differences",
        "runs": {
            m["name"]: {str(s): run_record(plan, m, s, commit) for s in plan["seeds"]}
            for m in plan["methods"]
        },
    }
    extra["primary"] = primary_cell(plan, method_table(methods, others))
    if plan.get("records"):
        extra["records"] = keep_plan_records(plan)
    return write_table(REPO / plan["output"], methods, others, extra)


#: What is kept of each (method, seed) for the recomputation: the stream's episodes, config and
#: summary, the training run's summary and metrics (its lesson sensitivity every iteration), and
#: both runs' provenance (the commit each was made at, every loaded weight file's sha256).
STREAM_RECORDS = ("episodes.jsonl", "config.json", "summary.json", "provenance.json")
TRAIN_RECORDS = ("summary.json", "metrics.jsonl", "provenance.json")


def unit_records(method: dict[str, Any], seed: int) -> list[tuple[Path, tuple[str, ...]]]:
    """A (method, seed)'s records: each folder kept (``RUNS`` for a probe's file) with the
    names kept of it."""
    out = [
        (stream_folder(method, seed), STREAM_RECORDS),
        (train_folder(method, seed), TRAIN_RECORDS),
    ]
    if method.get("probe"):
        out.append((RUNS, (probe_file(method, seed).name,)))
    return out


def keep_unit_records(plan: dict[str, Any], method: dict[str, Any], seed: int) -> list[Path]:
    """A finished (method, seed)'s records, gzipped under the plan's ``records`` folder
    (:func:`benchmarks.common.keep_records`): kept as each one finishes, so that what is done
    can be committed before the whole plan is."""
    into = REPO / plan["records"]
    return [
        p for folder, names in unit_records(method, seed) for p in keep_records(folder, names, into)
    ]


def keep_plan_records(plan: dict[str, Any]) -> list[str]:
    """Every run's records (:func:`keep_unit_records`); returns them, relative to the checkout."""
    kept = [
        p for m in plan["methods"] for s in plan["seeds"] for p in keep_unit_records(plan, m, s)
    ]
    return [relative(p) for p in kept]


def unpack_records(records: Path, folder: Path, names: tuple[str, ...]) -> Path:
    """``folder`` made from ``records/<folder name>-<name>.gz`` of each of ``names``."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        source = records / f"{folder.name}-{name}.gz"
        if not source.is_file():
            raise SystemExit(f"{source}: a record of the table is missing")
        atomic_write_bytes(folder / name, gzip.decompress(source.read_bytes()))
    return folder


def recorded(plan: dict[str, Any], method: dict[str, Any], seed: int) -> bool:
    """Whether every record of a (method, seed) is in the plan's ``records`` folder."""
    if not plan.get("records"):
        return False
    records = REPO / plan["records"]
    return all(
        (records / f"{folder.name}-{name}.gz").is_file()
        for folder, names in unit_records(method, seed)
        for name in names
    )


def restore_unit(plan: dict[str, Any], method: dict[str, Any], seed: int) -> bool:
    """A (method, seed) whose records are committed but whose runs are not on this machine (a
    new checkout): its runs made again from the records, so that it counts as done and the
    table reads it; ``False`` (nothing written) where any record is missing or a run of it is
    already here."""
    records = REPO / plan["records"]
    wanted = unit_records(method, seed)
    here = train_folder(method, seed).exists() or stream_folder(method, seed).exists()
    if not recorded(plan, method, seed) or here:
        return False
    for folder, names in wanted:  # a probe's file: RUNS/<name> from <RUNS name>-<name>.gz
        unpack_records(records, folder, names)
    return True


def reader_stream_folder(seed: int) -> Path:
    return RUNS / f"posthoc-reader-seed{seed}"


def reader_stream_command(plan: dict[str, Any], seed: int) -> list[str]:
    """``comprl-gym stream`` of the plan's reader itself (no training: GRPO's config for the
    actor's settings, the reader's weights) on the plan's pool, ``none`` and ``outcome_aware``."""
    grpo = control(plan)
    command = stream_command(plan, grpo, seed)
    at = command.index("--run")
    command[at : at + 2] = [
        "--config", grpo["config"], "--set", f"actor.init_weights={plan['reader']['path']}",
    ]  # fmt: skip
    command[command.index("--output-dir") + 1] = relative(reader_stream_folder(seed))
    return command


#: Development pools on which ``--posthoc`` also streams GRPO's seed-0 actor (64 dungeons
#: each): ``test`` shares name words with ``train``, ``test_large`` does not, as ``sealed``.
POSTHOC_POOLS = ("test", "test_large")
POSTHOC_TASKS = 64


def pool_stream_folder(split: str) -> Path:
    return RUNS / f"posthoc-grpo-seed0-{split.replace('_', '-')}"


def pool_stream_command(plan: dict[str, Any], split: str) -> list[str]:
    """GRPO's registered seed-0 stream of its trained actor, on the first 64 dungeons of the
    development pool ``split`` instead of the sealed ones."""
    command = stream_command(plan, control(plan), 0)
    command[command.index("--split") + 1] = split
    command[command.index("--tasks") + 1] = str(POSTHOC_TASKS)
    command[command.index("--output-dir") + 1] = relative(pool_stream_folder(split))
    return command


def lesson_side(record: dict) -> str | None:
    """The side the episode's first shown lesson names (as the family's judge reads it, about
    whichever dungeon the lesson names), or ``None`` where it was shown none or one naming no
    single side."""
    shown = record.get("experiences") or []
    if not shown:
        return None
    verdict = judge_lesson(shown[0]["content"])
    if verdict.verdict not in ("right", "wrong"):
        return None
    # the judge's verdict is about the dungeon the lesson names (an exemplar's record may be
    # a neighbour's), so the side it names is read against that dungeon's stairs
    stairs = dungeon(verdict.task_id).side
    return stairs if verdict.verdict == "right" else other_side(stairs)


def lesson_following(records: list[dict]) -> dict[str, Any]:
    """Per arm and visit: the episodes, how many were won and how many moved east first; at
    each arm's visits with lessons, per side a lesson names, how many of those episodes moved
    that way first (Wilson). An actor that moves east whatever it reads cannot be helped by
    any lesson."""
    out: dict[str, Any] = {}
    for r in records:
        cell = out.setdefault(r["arm"], {}).setdefault(
            str(r["visit"]), {"episodes": 0, "won": 0, "east_first": 0, "follows": {}}
        )
        first = r["turns"][0]["action"] if r["turns"] else ""
        cell["episodes"] += 1
        cell["won"] += bool(r["won"])
        cell["east_first"] += first == "east"
        named = lesson_side(r)
        if named is not None:
            cell["follows"].setdefault(named, []).append(first == named)
    for visits in out.values():
        for cell in visits.values():
            cell["follows"] = {
                side: proportion_ci(moves).to_dict()
                for side, moves in sorted(cell["follows"].items())
            }
    return out


def posthoc(plan: dict[str, Any]) -> dict[str, Any]:
    """Streams the reader itself where not done yet, then writes :func:`lesson_following` of
    it and of every (method, seed) to ``<output>_posthoc.json``."""
    for seed in plan["seeds"]:
        folder = reader_stream_folder(seed)
        if not finished(folder):
            run_step(folder, reader_stream_command(plan, seed))
    for split in POSTHOC_POOLS:
        if not finished(pool_stream_folder(split)):
            run_step(pool_stream_folder(split), pool_stream_command(plan, split))
    folders = {
        "reader, untrained": {s: reader_stream_folder(s) for s in plan["seeds"]},
        **{m["name"]: {s: stream_folder(m, s) for s in plan["seeds"]} for m in plan["methods"]},
    }
    streams = {
        name: {str(s): list(Run(f).episodes()) for s, f in by.items()}
        for name, by in folders.items()
    }
    reader = [r for records in streams["reader, untrained"].values() for r in records]
    result = {
        "question": "post hoc, not in the plan: does the actor's first move follow the side "
        "its lesson names, for the reader untrained and after each method's training?",
        "reader_success": {
            arm: {
                str(v): proportion_ci(
                    [float(r["won"]) for r in reader if r["arm"] == arm and r["visit"] == v]
                ).to_dict()
                for v in range(1, plan["pool"]["visits"] + 1)
            }
            for arm in ("none", "outcome_aware")
        },
        "plan": {"file": relative(PLAN), "commit": registered_commit()},
        "reader": {
            "path": plan["reader"]["path"],
            "sha256": file_sha256(REPO / plan["reader"]["path"]),
        },
        "reader_commands": {
            str(s): as_recorded(reader_stream_command(plan, s)) for s in plan["seeds"]
        },
        "interval": "Wilson 95%",
        "development_pools": {
            split: {
                "command": as_recorded(pool_stream_command(plan, split)),
                "following": lesson_following(list(Run(pool_stream_folder(split)).episodes())),
            }
            for split in POSTHOC_POOLS
        },
        "streams": {
            name: {s: lesson_following(records) for s, records in by.items()}
            for name, by in streams.items()
        },
    }
    atomic_write_json(REPO / f"{plan['output']}_posthoc.json", result)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="", help="comma-separated seeds (default: the plan's)")
    parser.add_argument(
        "--method",
        action="append",
        default=[],
        help="a method's name, as the plan spells it; repeat for several (default: all): a "
        "bench with little time left takes only the short ones",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    parser.add_argument(
        "--posthoc",
        action="store_true",
        help="after the table (not in the plan): stream the reader untrained, and write how "
        "often each actor's first move follows its lesson",
    )
    parser.add_argument(
        "--plan",
        default="",
        help="the plan file (default: the first sealed table's, "
        "benchmarks/preregistered/sealed_table.yaml)",
    )
    args = parser.parse_args(argv)
    if args.plan:
        use_plan(Path(args.plan))
    plan = load_plan()
    if args.posthoc:
        if not (REPO / f"{plan['output']}.json").is_file():
            raise SystemExit("--posthoc reads the table's runs: run the plan first")
        posthoc(plan)
        print(f"wrote {plan['output']}_posthoc.json")
        return 0
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()] or plan["seeds"]
    if not set(seeds) <= set(plan["seeds"]):
        raise SystemExit(f"--seeds {seeds}: the plan's seeds are {plan['seeds']}")
    names = [m["name"] for m in plan["methods"]]
    chosen = args.method or names
    if not set(chosen) <= set(names):
        raise SystemExit(f"--method {chosen}: the plan's methods are {names}")
    # The (method, seed)s this bench may take, by their unit name (``grpo-seed0``).
    pairs = {
        unit_of(train_folder(m, s)): (m, s)
        for s in seeds
        for m in plan["methods"]
        if m["name"] in chosen
    }
    pending = [(f, c) for f, c in steps(plan, seeds) if not done(f) and unit_of(f) in pairs]
    if args.dry_run:
        again = sorted(u for u, (m, s) in pairs.items() if recorded(plan, m, s))
        for folder, command in pending:
            if unit_of(folder) not in again:
                print(as_recorded(command))
        if again:
            print(f"# made again from their committed records: {', '.join(again)}")
        return 0
    commit = registered_commit()
    if pending:
        refuse_changed_inputs(commit)
    RUNS.mkdir(parents=True, exist_ok=True)
    units: dict[str, list[tuple[Path, list[str]]]] = {}
    for folder, command in pending:
        units.setdefault(unit_of(folder), []).append((folder, command))
    for k, (unit, unit_steps) in enumerate(units.items(), 1):
        # A (method, seed)'s steps run in one process, in order: several benches may share
        # the plan's work, each taking the (method, seed)s no other holds.
        with claimed(unit) as mine:
            if not mine:
                print(f"[{k}/{len(units)}] {unit}: another bench runs it", flush=True)
                continue
            if restore_unit(plan, *pairs[unit]):
                print(f"[{k}/{len(units)}] {unit}: made again from its committed records")
                continue
            for folder, command in unit_steps:
                if not done(folder):  # another bench may have finished it meanwhile
                    print(f"[{k}/{len(units)}] {folder.name}", flush=True)
                    run_step(folder, command)
            if plan.get("records"):
                kept = keep_unit_records(plan, *pairs[unit])
                print(f"[{k}/{len(units)}] {unit}: {len(kept)} records kept in {plan['records']}")
    left = [f.name for f, _ in steps(plan, plan["seeds"]) if not done(f)]
    if left:
        print(f"{len(left)} steps of the plan are not done yet: {', '.join(left)}")
        return 0
    result = summarise(plan, commit)
    print(f"primary: {json.dumps(result['primary'])}")
    print(f"wrote {plan['output']}.json, .md and .png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
