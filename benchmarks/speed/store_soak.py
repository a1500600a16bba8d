"""Soak of the experience store over a long run: ``--writes`` lesson writes through the
ExperienceManager into a store capped at ``--cap`` active lessons (first in first out, the
reference's policy), vectors supplied (no embedding model: the store is measured, not the
embedder).

Every ``--probe-every`` writes it records the database file size (with its WAL), the index
files' size, the process's resident memory, the store's revision and the time of a write fence
(:meth:`ExperienceManager.fence`: what the actor waits for before the extractor's asynchronous
step); retrieval latency (``--queries`` single queries, k=3, diversified, as the actor asks) is
measured once the store is first full and at the end. At the end it checks that the active
lessons are exactly the last ``--cap`` acknowledged ones (nothing acknowledged and not evicted
is missing, nothing evicted out of order), that the index equals the database and that the
revision log agrees with the rows.

Vectors: 384-d unit vectors on a noisy 24-dimensional subspace (as the store tests), four env
families in turn, batches of ``--batch`` lessons per write call (a rollout group's lessons).

Run: ``python -m benchmarks.speed.store_soak [--writes 1000000] [--json F]``
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from comprl_gym.experience import ExperienceConfig, ExperienceManager  # noqa: E402
from comprl_gym.experience.database import DB_NAME  # noqa: E402
from comprl_gym.utils import atomic_write_json  # noqa: E402

DIM = 384
FAMILIES = ("alfworld", "minihack", "webshop", "memory")


class SuppliedVectors:
    """The store's model name and dimension; every vector is supplied, nothing is embedded."""

    name = "soak-supplied-vectors"
    dim = DIM

    def encode(self, texts: list[str]) -> np.ndarray:
        raise RuntimeError("the soak supplies every vector")


class Vectors:
    """Unit vectors on a noisy 24-dimensional subspace of R^384 (sentence embeddings' intrinsic
    dimension is far below their width)."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.basis = np.random.default_rng(12345).normal(size=(24, DIM))

    def draw(self, n: int) -> np.ndarray:
        points = self.rng.normal(size=(n, 24)) @ self.basis
        points += 0.05 * np.sqrt(24) * self.rng.normal(size=(n, DIM))
        return (points / np.linalg.norm(points, axis=1, keepdims=True)).astype(np.float32)


def rss_mib() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def files_mib(folder: Path, pattern: str) -> float:
    return sum(f.stat().st_size for f in folder.glob(pattern) if f.is_file()) / 2**20


def retrieval_latency(manager: ExperienceManager, vectors: Vectors, n: int) -> dict[str, float]:
    """Single diversified queries, one at a time, as an actor asks: p50/p90/p99 in ms (after 50
    unmeasured ones). On a shared box p99 is mostly the scheduler; p50 and p90 are the store."""
    for query in vectors.draw(50):
        manager.retrieve_by_vector(query, k=3)
    times = []
    for i, query in enumerate(vectors.draw(n)):
        start = time.perf_counter()
        manager.retrieve_by_vector(query, k=3, env_family=FAMILIES[i % len(FAMILIES)])
        times.append(time.perf_counter() - start)
    ms = np.array(times) * 1000
    return {f"p{q}_ms": float(np.percentile(ms, q)) for q in (50, 90, 99)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=1_000_000, help="lessons written")
    parser.add_argument("--cap", type=int, default=10_000, help="max_entries of the store")
    parser.add_argument("--batch", type=int, default=64, help="lessons per write call")
    parser.add_argument("--probe-every", type=int, default=20_000, help="writes between probes")
    parser.add_argument("--queries", type=int, default=500, help="queries per latency sample")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--store", type=Path, default=None, help="store folder (default: temp)")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    args = parser.parse_args()

    folder = args.store or Path(tempfile.mkdtemp(prefix="bench-store-soak-")) / "store"
    config = ExperienceConfig(max_entries=args.cap, eviction_policy="fifo")
    manager = ExperienceManager(folder, config, SuppliedVectors())
    vectors = Vectors(args.seed)
    # with first-in-first-out eviction the active lessons must be the last `cap` acknowledged
    # (kept here in a bounded deque, so the benchmark's own memory stays flat too)
    acked: deque[int] = deque(maxlen=args.cap)
    probes: list[dict[str, float]] = []
    latency_start: dict[str, float] | None = None
    written, started = 0, time.perf_counter()
    write_seconds = 0.0
    while written < args.writes:
        count = min(args.batch, args.writes - written)
        family = FAMILIES[(written // args.batch) % len(FAMILIES)]
        items = [
            f"## Title: lesson {written + j}\n## Description: {family} case {(written + j) % 97}"
            f"\n## Content: do thing {written + j} when the room has {(written + j) % 13} doors"
            for j in range(count)
        ]
        batch = vectors.draw(count)
        start = time.perf_counter()
        acked.extend(manager.add(items, env_family=family, vectors=batch))
        write_seconds += time.perf_counter() - start
        written += count
        if latency_start is None and written >= args.cap:
            latency_start = retrieval_latency(manager, vectors, args.queries)
            latency_start["at_writes"] = written
        if written % args.probe_every < args.batch or written == args.writes:
            start = time.perf_counter()
            revision = manager.fence()
            fence_ms = (time.perf_counter() - start) * 1000
            probe = {
                "writes": written,
                "active": len(manager),
                "revision": revision,
                "database_mib": files_mib(folder, DB_NAME + "*"),
                "index_mib": files_mib(folder, "index-*.usearch"),
                "rss_mib": rss_mib(),
                "fence_ms": fence_ms,
                "writes_per_s": written / (time.perf_counter() - started),
            }
            probes.append(probe)
            print(
                f"{written:>9} writes  active {probe['active']:>6}  db {probe['database_mib']:7.1f} MiB"
                f"  index {probe['index_mib']:6.1f} MiB  rss {probe['rss_mib']:7.1f} MiB"
                f"  fence {fence_ms:6.1f} ms  {probe['writes_per_s']:7.0f} writes/s",
                flush=True,
            )
    latency_end = retrieval_latency(manager, vectors, args.queries)
    latency_end["at_writes"] = written
    elapsed = time.perf_counter() - started

    active = manager.store.active_ids()
    expected = sorted(acked)
    missing = sorted(set(expected) - set(active))
    consistency = manager.check_consistency()
    revisions = manager.check_revisions()
    manager.close()
    # the files after close (indexes saved, WAL folded in), then reopened: nothing lost
    closed = {
        "database_mib": files_mib(folder, DB_NAME + "*"),
        "index_mib": files_mib(folder, "index-*.usearch"),
    }
    reopened = ExperienceManager(folder, config, SuppliedVectors())
    reopened_ok = reopened.store.active_ids() == active and reopened.check_consistency()["ok"]
    reopened.close()

    results = {
        "benchmark": "store_soak",
        "writes": written,
        "cap": args.cap,
        "eviction_policy": config.eviction_policy,
        "batch": args.batch,
        "dim": DIM,
        "families": len(FAMILIES),
        "sqlite_synchronous": config.sqlite_synchronous,
        "revision_log_max_rows": config.revision_log_max_rows,
        "elapsed_s": elapsed,
        "writes_per_s": written / elapsed,
        "write_call_ms_mean": 1000 * write_seconds / max(1, len(range(0, written, args.batch))),
        "peak": {
            "database_mib": max(p["database_mib"] for p in probes),
            "index_mib": max(p["index_mib"] for p in probes),
            "rss_mib": max(p["rss_mib"] for p in probes),
            "ru_maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        },
        "after_close": closed,
        "retrieval_start": latency_start,
        "retrieval_end": latency_end,
        "retrieval_ratio_end_over_start": {
            f"p{q}": latency_end[f"p{q}_ms"] / latency_start[f"p{q}_ms"] for q in (50, 90, 99)
        }
        if latency_start
        else None,
        "fence_ms": {
            "p50": float(np.percentile([p["fence_ms"] for p in probes], 50)),
            "max": max(p["fence_ms"] for p in probes),
        },
        "checks": {
            "active_is_last_cap_acknowledged": active == expected,
            "missing_acknowledged_not_evicted": len(missing),
            "index_equals_database": consistency["ok"],
            "revision_log_consistent": revisions["ok"],
            "reopened_same_and_consistent": reopened_ok,
            "final_revision": probes[-1]["revision"],
        },
        "probes": probes,
        "host": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
    }
    for key in ("peak", "retrieval_start", "retrieval_end", "fence_ms", "checks"):
        print(key, results[key])
    print("latency ratio end/start:", results["retrieval_ratio_end_over_start"])
    if args.json:
        atomic_write_json(args.json, results)


if __name__ == "__main__":
    main()
