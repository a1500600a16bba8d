"""Benchmark the SWE-bench env's sandboxes: episode set-up (cold and with a reused image),
per-command latency, and grading time for the embedded suite, in Docker and bubblewrap; and
(``--suite real``) grade every task of the real-repository suite with its gold patch, the
empty patch and a sibling task's patch.

The peer for per-command latency is the bare engine: ``docker exec`` through the CLI (what
mini-swe-agent does per step) and bare ``bwrap`` calls, measured in the same run, samples
interleaved: the minimal ``bwrap --unshare-all --ro-bind ROOT / echo hi``, and ``bwrap`` with
our sandbox's own namespaces and mounts running ``bash -c 'echo hi'`` (what isolation itself
costs, without our Python layer).

Run: ``python -m benchmarks.speed.swebench [--kinds docker bubblewrap] [--commands 20]``
     ``python -m benchmarks.speed.swebench --suite real --kinds bubblewrap --data-dir DIR``
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import statistics
import subprocess
import time
from pathlib import Path

from benchmarks.common import RESULTS
from comprl_gym.envs.swebench import SWEBenchEnv, load_instances
from comprl_gym.envs.swebench.grading import evaluate
from comprl_gym.envs.swebench.images import instance_image_name
from comprl_gym.envs.swebench.real_suite import audit_sandbox, load_real_suite
from comprl_gym.utils import atomic_write_json, cache_dir


def _median_ms(values: list[float]) -> float:
    return 1000 * statistics.median(values)


def bench_kind(kind: str, commands: int) -> list[tuple[str, str, str]]:
    suite = load_instances()
    rows = []
    env = SWEBenchEnv(sandbox=kind)
    first = suite[0]["instance_id"]
    # Cold: no checkout and no instance image yet (the base root file system / image stays:
    # it is built once per machine, ~2-3 min, measured separately).
    for stale in cache_dir("swebench", "testbeds").glob(f"{first}-*"):
        shutil.rmtree(stale)
    if kind == "docker":
        # Instances at the same commit share one image under several names: drop them all.
        client = env.unwrapped.factory._client
        with contextlib.suppress(Exception):  # not built yet
            image = client.images.get(instance_image_name(first))
            for name in image.tags:
                client.images.remove(name)
    t0 = time.perf_counter()
    env.reset(options={"task_id": first})
    cold = time.perf_counter() - t0
    rows.append((kind, "episode set-up, cold (image build / checkout)", f"{cold * 1000:.0f} ms"))
    warm = []
    for _ in range(5):
        t0 = time.perf_counter()
        env.reset(options={"task_id": first})
        warm.append(time.perf_counter() - t0)
    rows.append((kind, "episode set-up, reused image (median of 5)", f"{_median_ms(warm):.0f} ms"))
    latencies = []
    for _ in range(commands):
        t0 = time.perf_counter()
        env.step("echo hi")
        latencies.append(time.perf_counter() - t0)
    ours = _median_ms(latencies)
    rows.append((kind, f"per-command latency `echo hi` (median of {commands})", f"{ours:.1f} ms"))
    sandbox = env.unwrapped.sandbox
    if kind == "docker":
        peer = []
        for _ in range(commands):
            argv = ["docker", "exec", sandbox.container_id, "echo", "hi"]
            t0 = time.perf_counter()
            subprocess.run(argv, capture_output=True, check=True)
            peer.append(time.perf_counter() - t0)
        peer_ms = _median_ms(peer)
        rows.append(
            (
                kind,
                "peer: docker exec CLI `echo hi`",
                f"{peer_ms:.1f} ms (ours/peer {ours / peer_ms:.2f}x)",
            )
        )
    else:
        rows.extend(bwrap_overhead_rows(sandbox, commands))
    env.close()
    # Grading the embedded suite with the gold patches (images already built by the first pass).
    factory = env.unwrapped.factory
    for inst in suite:  # warm images / checkouts so that grading time is grading only
        factory.make(inst).close()
    t0 = time.perf_counter()
    resolved = 0
    for inst in suite:
        grader = factory.make(inst)
        try:
            resolved += evaluate(grader, inst, inst["patch"], timeout=300).resolved
        finally:
            grader.close()
    total = time.perf_counter() - t0
    rows.append(
        (
            kind,
            f"grading the embedded suite ({len(suite)} tasks, gold)",
            f"{total:.1f} s total, {total / len(suite) * 1000:.0f} ms/task, resolved {resolved}/{len(suite)}",
        )
    )
    return rows


def bwrap_overhead(sandbox, samples: int) -> dict[str, float]:
    """Median ms of one ``echo hi``: ours (``Sandbox.run``), a bare minimal ``bwrap`` and a bare
    ``bwrap`` with our sandbox's argv; the three interleaved in random order, same run."""
    root = str(sandbox.rootfs)
    same_isolation = sandbox._bwrap_argv() + ["bash", "-c", "echo hi"]
    calls = {
        "ours": lambda: sandbox.run("echo hi", 10),
        "bare_minimal": lambda: subprocess.run(
            ["bwrap", "--unshare-all", "--ro-bind", root, "/", "echo", "hi"], capture_output=True
        ),
        "bare_same_isolation": lambda: subprocess.run(same_isolation, capture_output=True),
    }
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(samples):
        for name in random.sample(list(calls), len(calls)):
            t0 = time.perf_counter()
            calls[name]()
            times[name].append(time.perf_counter() - t0)
    return {name: _median_ms(values) for name, values in times.items()}


def bwrap_overhead_rows(sandbox, commands: int) -> list[tuple[str, str, str]]:
    ms = bwrap_overhead(sandbox, max(commands, 60))
    RESULTS.mkdir(parents=True, exist_ok=True)
    summary = {
        **{f"{k}_ms": round(v, 2) for k, v in ms.items()},
        "ratio_to_bare_minimal": round(ms["ours"] / ms["bare_minimal"], 2),
        "ratio_to_bare_same_isolation": round(ms["ours"] / ms["bare_same_isolation"], 2),
        "samples_each": max(commands, 60),
        "cpus": os.cpu_count(),
        "load_average_1min": round(os.getloadavg()[0], 2),
    }
    atomic_write_json(RESULTS / "swebench_bwrap_overhead.json", summary)
    return [
        ("bubblewrap", "ours `echo hi` (interleaved median)", f"{ms['ours']:.1f} ms"),
        (
            "bubblewrap",
            "peer: bare minimal bwrap `echo hi`",
            f"{ms['bare_minimal']:.1f} ms (ours/peer {summary['ratio_to_bare_minimal']:.2f}x)",
        ),
        (
            "bubblewrap",
            "peer: bare bwrap, our namespaces and mounts, `bash -c`",
            f"{ms['bare_same_isolation']:.1f} ms "
            f"(ours/peer {summary['ratio_to_bare_same_isolation']:.2f}x)",
        ),
    ]


def _grade(factory, inst: dict, patch: str) -> tuple[bool, float]:
    grader = factory.make(inst)
    try:
        t0 = time.perf_counter()
        report = evaluate(grader, inst, patch, timeout=900)
        return report.resolved, time.perf_counter() - t0
    finally:
        grader.close()


def bench_real_suite(kind: str, data_dir: str | None, only: list[str] | None) -> dict:
    """Grade every task of the real suite: gold must resolve, empty and sibling must not."""
    env = SWEBenchEnv(suite="real", data_dir=data_dir, sandbox=kind, instance_ids=only)
    factory = env.unwrapped.factory
    suite = env.unwrapped.instances
    everything = {i["instance_id"]: i for i in load_real_suite(data_dir)[0]}
    images: dict[str, dict] = {}
    tasks = []
    for inst in suite:
        t0 = time.perf_counter()
        factory.make(inst).close()  # testbed checkout, image build (Docker) or deps
        setup = time.perf_counter() - t0
        if kind == "docker":
            image = factory._client.images.get(instance_image_name(inst["instance_id"]))
            images[inst["instance_id"]] = {
                "setup_s": round(setup, 1), "size_mb": round(image.attrs["Size"] / 1e6, 1)
            }  # fmt: skip
        siblings = [
            other for other in everything.values()
            if other["repo"] == inst["repo"] and other["instance_id"] != inst["instance_id"]
        ]  # fmt: skip
        sibling = siblings[0]
        gold, gold_s = _grade(factory, inst, inst["patch"])
        empty, empty_s = _grade(factory, inst, "")
        wrong, wrong_s = _grade(factory, inst, sibling["patch"])
        row = {
            "instance_id": inst["instance_id"], "repo": inst["repo"], "setup_s": round(setup, 1),
            "gold_resolved": gold, "gold_s": round(gold_s, 1),
            "empty_resolved": empty, "empty_s": round(empty_s, 1),
            "sibling": sibling["instance_id"], "sibling_resolved": wrong,
            "sibling_s": round(wrong_s, 1),
        }  # fmt: skip
        print(json.dumps(row), flush=True)
        tasks.append(row)
    env.close()
    env_images = {}
    if kind == "docker":
        for image in factory._client.images.list(filters={"label": "comprl-gym.swebench=env"}):
            env_images[image.tags[0] if image.tags else image.id] = round(image.attrs["Size"] / 1e6)
    per_repo: dict[str, int] = {}
    for row in tasks:
        per_repo[row["repo"]] = per_repo.get(row["repo"], 0) + 1
    grading = [row["gold_s"] for row in tasks]
    return {
        "sandbox": kind,
        "tasks": len(tasks),
        "tasks_per_repo": per_repo,
        "gold_resolved": sum(row["gold_resolved"] for row in tasks),
        "empty_resolved": sum(row["empty_resolved"] for row in tasks),
        "sibling_resolved": sum(row["sibling_resolved"] for row in tasks),
        "gold_grading_s_median": round(statistics.median(grading), 1),
        "gold_grading_s_max": round(max(grading), 1),
        "instance_images": images,
        "env_images_mb": env_images,
        "per_task": tasks,
    }


def audit_real_suite(kind: str, data_dir: str | None) -> dict:
    """Search every task's sandbox for the fix (later history, its files, hidden test lines)."""
    env = SWEBenchEnv(suite="real", data_dir=data_dir, sandbox=kind)
    sources = env.unwrapped.config.repo_sources
    rows = []
    for inst in env.unwrapped.instances:
        env.reset(options={"task_id": inst["instance_id"]})
        t0 = time.perf_counter()
        leaks = audit_sandbox(env.unwrapped.sandbox, inst, Path(sources[inst["repo"]]))
        rows.append(
            {"instance_id": inst["instance_id"], "leaks": leaks,
             "audit_s": round(time.perf_counter() - t0, 1)}
        )  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
    env.close()
    return {
        "sandbox": kind,
        "tasks": len(rows),
        "tasks_with_leaks": sum(bool(row["leaks"]) for row in rows),
        "per_task": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", nargs="+", default=["docker", "bubblewrap"])
    parser.add_argument("--commands", type=int, default=20)
    parser.add_argument("--suite", choices=["embedded", "real"], default="embedded")
    parser.add_argument("--data-dir", default=None, help="the swe-repos folder (real suite)")
    parser.add_argument("--only", nargs="*", default=None, help="instance ids (real suite)")
    parser.add_argument(
        "--overhead-only", action="store_true", help="only bubblewrap's per-command overhead"
    )
    parser.add_argument(
        "--audit", action="store_true", help="real suite: search every sandbox for the fix"
    )
    args = parser.parse_args()
    if args.audit:
        for kind in args.kinds:
            result = audit_real_suite(kind, args.data_dir)
            atomic_write_json(RESULTS / f"swebench_real_audit_{kind}.json", result)
            print(json.dumps({k: v for k, v in result.items() if k != "per_task"}))
        return
    if args.overhead_only:
        env = SWEBenchEnv(sandbox="bubblewrap")
        env.reset(seed=0)
        for _, measure, value in bwrap_overhead_rows(env.unwrapped.sandbox, args.commands):
            print(f"{measure}: {value}")
        env.close()
        return
    if args.suite == "real":
        for kind in args.kinds:
            started = time.perf_counter()
            result = bench_real_suite(kind, args.data_dir, args.only)
            result["wall_s"] = round(time.perf_counter() - started)
            name = f"swebench_real_{kind}{'_subset' if args.only else ''}.json"
            atomic_write_json(RESULTS / name, result)
            summary = {k: v for k, v in result.items() if k not in ("per_task", "instance_images")}
            print(json.dumps(summary, indent=1))
        return
    rows = []
    for kind in args.kinds:
        rows.extend(bench_kind(kind, args.commands))
    width = max(len(r[1]) for r in rows)
    print(f"| sandbox    | {'measure'.ljust(width)} | value |")
    print(f"|------------|{'-' * (width + 2)}|-------|")
    for kind, measure, value in rows:
        print(f"| {kind.ljust(10)} | {measure.ljust(width)} | {value} |")


if __name__ == "__main__":
    main()
