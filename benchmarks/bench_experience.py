"""Benchmark of the experience store: usearch HNSW vs faiss IndexFlatIP vs numpy brute force.

A store of ``--n`` experiences (default 100,000) with 384-d unit vectors is built; then, in the
same run:

* batched query latency (batches of 32, precomputed query embeddings) p50/p99 and queries/s for
  the usearch index (raw and through the ExperienceManager, which adds metadata reads and
  diversification), faiss ``IndexFlatIP`` and numpy brute force;
* recall@8 of each against exact search;
* HNSW ``expansion_search`` sweep (recall vs latency);
* end-to-end single-query latency with embedding (all-MiniLM-L6-v2 on CPU);
* memory; build, save, open (reopen) times.

Stored vectors are precomputed (embedding 100k texts takes ~8 min on 2 cores): unit vectors
on a noisy 24-dimensional subspace of R^384, a stand-in for sentence embeddings, whose
intrinsic dimension is far below 384. Queries are fresh draws from the same distribution.

Run: ``python benchmarks/bench_experience.py [--n 100000] [--queries 1024]``
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from comprl_gym.experience import ExperienceConfig, ExperienceManager, ExperienceStore  # noqa: E402

DIM = 384
K = 8
BATCH = 32


def vectors(n: int, seed: int, intrinsic: int = 24, noise: float = 0.05) -> np.ndarray:
    rng = np.random.default_rng(seed)
    basis = np.random.default_rng(12345).normal(size=(intrinsic, DIM))
    out = np.empty((n, DIM), dtype=np.float32)
    for start in range(0, n, 20000):
        m = min(20000, n - start)
        x = rng.normal(size=(m, intrinsic)) @ basis + noise * np.sqrt(intrinsic) * rng.normal(
            size=(m, DIM)
        )
        out[start : start + m] = x / np.linalg.norm(x, axis=1, keepdims=True)
    return out


def rss_mib() -> float:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed_batches(search, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Run ``search(batch) -> ids`` over batches of 32; returns (ids, per-batch seconds)."""
    ids, times = [], []
    search(queries[:BATCH])  # warm-up
    for start in range(0, len(queries), BATCH):
        batch = queries[start : start + BATCH]
        t = time.perf_counter()
        ids.append(search(batch))
        times.append(time.perf_counter() - t)
    return np.vstack(ids), np.asarray(times)


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    return float(
        np.mean([len(set(a[a >= 0]) & set(b)) / truth.shape[1] for a, b in zip(found, truth)])
    )


def row(name: str, times: np.ndarray, n_queries: int, rec: float) -> dict:
    return {
        "method": name,
        "p50_ms": 1000 * float(np.percentile(times, 50)),
        "p99_ms": 1000 * float(np.percentile(times, 99)),
        "qps": n_queries / float(times.sum()),
        "recall@8": rec,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=1024)
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args()
    import faiss

    results: dict = {"n": args.n, "dim": DIM, "k": K, "batch": BATCH, "cpus": os.cpu_count()}
    data = vectors(args.n, seed=0)
    queries = vectors(args.queries, seed=1)
    workdir = Path(tempfile.mkdtemp(prefix="bench-experience-"))
    rss0 = rss_mib()

    # ---- build ---------------------------------------------------------------------------
    config = ExperienceConfig(index_autosave_changes=0, sqlite_synchronous="NORMAL")
    store = ExperienceStore(workdir / "store", config=config)
    texts = [
        f"## Title: lesson {i}\n## Description: synthetic\n## Content: lesson body {i}"
        for i in range(args.n)
    ]
    t = time.perf_counter()
    for start in range(0, args.n, 10000):
        store.add_texts(texts[start : start + 10000], vectors=data[start : start + 10000])
        print(
            f"  built {min(start + 10000, args.n)}/{args.n} ({time.perf_counter() - t:.0f}s)",
            flush=True,
        )
    results["build_s"] = time.perf_counter() - t
    results["index_mib"] = store.memory_bytes() / 2**20
    results["rss_after_build_mib"] = rss_mib() - rss0
    t = time.perf_counter()
    store.save()
    results["save_s"] = time.perf_counter() - t
    store.close()
    results["disk_mib"] = sum(f.stat().st_size for f in (workdir / "store").iterdir()) / 2**20
    t = time.perf_counter()
    store = ExperienceStore(workdir / "store", config=config)
    results["open_s"] = time.perf_counter() - t
    keys = store.family_keys(None)

    # ---- ground truth ----------------------------------------------------------------------
    def numpy_search(batch: np.ndarray) -> np.ndarray:
        sims = batch @ data.T
        top = np.argpartition(-sims, K, axis=1)[:, :K]
        order = np.argsort(-np.take_along_axis(sims, top, axis=1), axis=1)
        return np.take_along_axis(top, order, axis=1) + 1  # store ids start at 1

    truth, numpy_times = timed_batches(numpy_search, queries)
    rows = [row("numpy brute force", numpy_times, len(queries), recall(truth, truth))]

    flat = faiss.IndexFlatIP(DIM)
    flat.add(data)
    faiss_ids, faiss_times = timed_batches(lambda b: flat.search(b, K)[1] + 1, queries)
    rows.append(row("faiss IndexFlatIP", faiss_times, len(queries), recall(faiss_ids, truth)))

    index = store._indexes[keys[0]]
    sweep = []
    for ef in sorted({32, 64, 128, 256, config.hnsw_expansion_search}):
        index.expansion_search = ef
        found, times = timed_batches(lambda b: store.search(b, K, keys)[0], queries)
        sweep.append(row(f"usearch HNSW ef={ef}", times, len(queries), recall(found, truth)))
    index.expansion_search = config.hnsw_expansion_search
    rows += sweep
    store.close()

    manager = ExperienceManager(workdir / "store", config)
    found, times = timed_batches(
        lambda b: np.array(
            [
                [h.id for h in hits] + [-1] * (K - len(hits))
                for hits in [
                    f.result() for f in [manager._submit(None, q, K, None, False, False) for q in b]
                ]
            ]
        ),
        queries,
    )
    rows.append(
        row(
            f"ExperienceManager (ef={config.hnsw_expansion_search}, +metadata)",
            times,
            len(queries),
            recall(found, truth),
        )
    )
    found, times = timed_batches(
        lambda b: np.array(
            [
                [h.id for h in hits] + [-1] * (K - len(hits))
                for hits in [
                    f.result() for f in [manager._submit(None, q, K, None, True, True) for q in b]
                ]
            ]
        ),
        queries,
    )
    rows.append(
        row("ExperienceManager + diversification", times, len(queries), recall(found, truth))
    )
    results["rows"] = rows

    # ---- end to end with embedding -----------------------------------------------------------
    manager.retrieve("warm up the model", k=K)
    e2e = []
    for i in range(100):
        t = time.perf_counter()
        manager.retrieve(
            f"how do I reach the staircase in room {i} without meeting monster {i * 7}?", k=K
        )
        e2e.append(time.perf_counter() - t)
    cached = []
    for _ in range(50):
        t = time.perf_counter()
        manager.retrieve("how do I reach the staircase in room 3 without meeting monster 21?", k=K)
        cached.append(time.perf_counter() - t)
    results["e2e_single_query_ms"] = {
        "p50": 1000 * float(np.percentile(e2e, 50)),
        "p99": 1000 * float(np.percentile(e2e, 99)),
        "cached_p50": 1000 * float(np.percentile(cached, 50)),
    }
    manager.close()
    results["rss_total_mib"] = rss_mib() - rss0

    # ---- report --------------------------------------------------------------------------------
    hnsw = next(r for r in rows if r["method"].startswith("ExperienceManager (ef"))
    default = next(r for r in sweep if r["method"].endswith(f"ef={config.hnsw_expansion_search}"))
    print(
        f"\nExperience store benchmark: {args.n:,} x {DIM} vectors, k={K}, batches of {BATCH}, {os.cpu_count()} cpus\n"
    )
    print(
        f"| {'method':<48} | {'p50 ms/batch':>12} | {'p99 ms/batch':>12} | {'queries/s':>10} | {'recall@8':>8} |"
    )
    print(f"|{'-' * 50}|{'-' * 14}|{'-' * 14}|{'-' * 12}|{'-' * 10}|")
    for r in rows:
        print(
            f"| {r['method']:<48} | {r['p50_ms']:>12.2f} | {r['p99_ms']:>12.2f} | {r['qps']:>10.0f} | {r['recall@8']:>8.4f} |"
        )
    faiss_row = rows[1]
    print(
        f"\nusearch (ef={config.hnsw_expansion_search}) vs faiss flat: {faiss_row['p99_ms'] / default['p99_ms']:.1f}x lower p99, "
        f"{default['qps'] / faiss_row['qps']:.1f}x queries/s; vs numpy: {rows[0]['p99_ms'] / default['p99_ms']:.1f}x lower p99"
    )
    print(f"manager path (metadata + futures) p99 {hnsw['p99_ms']:.2f} ms per batch of {BATCH}")
    e = results["e2e_single_query_ms"]
    print(
        f"end-to-end single query with embedding: p50 {e['p50']:.1f} ms, p99 {e['p99']:.1f} ms (cached embedding p50 {e['cached_p50']:.1f} ms)"
    )
    print(
        f"build {results['build_s']:.1f} s, save {results['save_s']:.2f} s, open {results['open_s']:.2f} s, "
        f"index {results['index_mib']:.0f} MiB, on disk {results['disk_mib']:.0f} MiB, RSS +{results['rss_total_mib']:.0f} MiB "
        f"(faiss flat holds {args.n * DIM * 4 / 2**20:.0f} MiB of vectors)"
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
