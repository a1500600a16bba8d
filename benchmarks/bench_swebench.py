"""Benchmark the SWE-bench env's sandboxes: episode set-up (cold and with a reused image),
per-command latency, and grading time for the embedded suite, in Docker and bubblewrap.

The peer for per-command latency is the bare engine: ``docker exec`` through the CLI (what
mini-swe-agent does per step) and a bare ``bwrap`` call; ratios compare our wrapped command
with them.

Run: ``python benchmarks/bench_swebench.py [--kinds docker bubblewrap] [--commands 20]``
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import statistics
import subprocess
import time

from comprl_gym.envs.swebench import SWEBenchEnv, load_instances
from comprl_gym.envs.swebench.grading import evaluate
from comprl_gym.envs.swebench.images import instance_image_name
from comprl_gym.utils import cache_dir


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
    peer = []
    for _ in range(commands):
        if kind == "docker":
            argv = ["docker", "exec", sandbox.container_id, "echo", "hi"]
        else:
            argv = ["bwrap", "--unshare-all", "--ro-bind", str(sandbox.rootfs), "/", "echo", "hi"]
        t0 = time.perf_counter()
        subprocess.run(argv, capture_output=True, check=True)
        peer.append(time.perf_counter() - t0)
    peer_ms = _median_ms(peer)
    peer_name = "docker exec CLI" if kind == "docker" else "bare bwrap"
    rows.append(
        (
            kind,
            f"peer: {peer_name} `echo hi`",
            f"{peer_ms:.1f} ms (ours/peer {ours / peer_ms:.2f}x)",
        )
    )
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", nargs="+", default=["docker", "bubblewrap"])
    parser.add_argument("--commands", type=int, default=20)
    args = parser.parse_args()
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
