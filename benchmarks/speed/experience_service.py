"""Latency of the shared experience service: in process vs the local socket server vs Ray.

One store of ``--n`` lessons (embedded with all-MiniLM-L6-v2). For each path, in the same run:

* ``retrieve_batch`` of 32 fresh queries (distinct each repetition, so the embedding cache
  never answers; the embedding of the queries is part of the latency, as in a rollout);
* ``get`` of 32 ids (no embedding: the bare cost of a call on each path).

Paths: the ``ExperienceManager`` in this process; an :class:`ExperienceServer` client (unix
socket, the service in a thread of this process); the Ray actor (a local one-node cluster on
127.0.0.1). p50/p99 in milliseconds; the results go to ``--json``.

Run: ``python -m benchmarks.speed.experience_service [--n 256] [--reps 60]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from benchmarks.common import RESULTS  # noqa: E402
from comprl_gym.distributed.experience_service import (  # noqa: E402
    ExperienceServer,
    start_experience_service,
    stop_experience_service,
)
from comprl_gym.experience import ExperienceManager, default_embedder  # noqa: E402

TOPICS = ("stairs", "keys", "doors", "monsters", "lava", "fountains", "traps", "corridors")


def lesson(i: int) -> str:
    topic = TOPICS[i % len(TOPICS)]
    return (
        f"## Title: {topic} {i}\n## Description: rooms with {topic}, case {i}\n"
        f"## Content: when you meet {topic} in room {i}, check the map and act on it."
    )


def measure(call, reps: int) -> dict[str, float]:
    call(-1)  # warm the path (connections, thread pools)
    times = []
    for rep in range(reps):
        start = time.perf_counter()
        call(rep)
        times.append((time.perf_counter() - start) * 1000)
    return {
        "p50_ms": float(np.percentile(times, 50)),
        "p99_ms": float(np.percentile(times, 99)),
        "mean_ms": float(np.mean(times)),
        "reps": reps,
    }


def bench_path(store, ids: list[int], reps: int, tag: str) -> dict[str, dict[str, float]]:
    def batch(rep: int) -> None:
        queries = [f"{tag} {rep}: what to do about {TOPICS[i % 8]} in room {i}?" for i in range(32)]
        hits = store.retrieve_batch(queries, 4, "minihack")
        assert len(hits) == 32

    def get(rep: int) -> None:
        assert len(store.get(ids[:32])) == 32

    return {"retrieve_batch_32": measure(batch, reps), "get_32": measure(get, reps * 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=256)
    parser.add_argument("--reps", type=int, default=60)
    parser.add_argument(
        "--json",
        default=str(RESULTS / "experience_service.json"),
    )
    args = parser.parse_args()

    import ray

    embedder = default_embedder()
    root = Path(tempfile.mkdtemp(prefix="bench-exp-service-"))
    manager = ExperienceManager(root / "local", embedder=embedder)
    ids = manager.add([lesson(i) for i in range(args.n)], env_family="minihack")
    results: dict[str, object] = {}
    results["in_process"] = bench_path(manager, ids, args.reps, "local")
    with ExperienceServer(manager) as server:
        results["socket"] = bench_path(server.client(), ids, args.reps, "socket")
    manager.close()

    ray_dir = tempfile.mkdtemp(prefix="rx-", dir="/tmp")  # short: Ray's socket paths
    ray.init(
        address="local",
        _temp_dir=ray_dir,
        num_cpus=2,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        log_to_driver=False,
    )
    try:
        client = start_experience_service(root / "local")  # the same store, reopened
        results["ray"] = bench_path(client, ids, args.reps, "ray")
        stop_experience_service(client)
    finally:
        ray.shutdown()
        shutil.rmtree(ray_dir, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)

    local = results["in_process"]
    for path in ("socket", "ray"):
        results[f"{path}_over_in_process_p50"] = {
            op: results[path][op]["p50_ms"] / local[op]["p50_ms"] for op in local
        }
    results["setup"] = {
        "store_size": args.n,
        "embedder": embedder.name,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores (shared with other jobs)",
        "ray": ray.__version__,
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
