"""Benchmark of the experience store: usearch HNSW (default config: quantised graph + float32
re-rank; and the old float32 graph) vs faiss ``IndexHNSWFlat`` vs faiss ``IndexFlatIP`` vs numpy.

A store of ``--n`` experiences (default 100,000) with 384-d unit vectors is built; then, in the
same run:

* batched query latency (batches of 32, precomputed query embeddings) and single-query latency,
  p50/p99 and queries/s, for the store's index (default config, raw and through the
  ExperienceManager, which adds metadata reads and diversification), the old float32 usearch
  config through the same code, faiss ``IndexHNSWFlat`` (``efSearch`` raised until recall@8
  >= 0.99, the equal-recall row), faiss ``IndexFlatIP`` and numpy brute force;
* recall@8 of each against exact search;
* sweeps: usearch ``expansion_search`` x re-rank oversampling, float32 ``expansion_search``,
  faiss ``efSearch`` (recall vs latency, also drawn to ``--png``);
* end-to-end single-query latency with embedding (all-MiniLM-L6-v2 on CPU);
* memory; build, save, open (reopen) times.

Stored vectors are precomputed (embedding 100k texts takes ~8 min on 2 cores): unit vectors
on a noisy 24-dimensional subspace of R^384, a stand-in for sentence embeddings, whose
intrinsic dimension is far below 384. Queries are fresh draws from the same distribution.

Run: ``python benchmarks/bench_experience.py [--n 100000] [--queries 1024] [--json F --png F]``
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
from comprl_gym.experience.vector_index import FamilyIndexes  # noqa: E402

DIM = 384
K = 8
BATCH = 32
TARGET_RECALL = 0.99
#: The float32 graph every store used before the quantised default (issue 17's baseline).
OLD_F32 = {"hnsw_dtype": "f32", "hnsw_connectivity": 16, "hnsw_expansion_search": 160}


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


def timed_batches(search, queries: np.ndarray, batch: int = BATCH) -> tuple[np.ndarray, np.ndarray]:
    """Run ``search(rows) -> ids`` over batches of ``batch``; returns (ids, per-call seconds)."""
    ids, times = [], []
    search(queries[:batch])  # warm-up
    for start in range(0, len(queries), batch):
        rows = queries[start : start + batch]
        t = time.perf_counter()
        ids.append(search(rows))
        times.append(time.perf_counter() - t)
    return np.vstack(ids), np.asarray(times)


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    return float(
        np.mean([len(set(a[a >= 0]) & set(b)) / truth.shape[1] for a, b in zip(found, truth)])
    )


def row(name: str, times: np.ndarray, n_queries: int, rec: float, batch: int = BATCH) -> dict:
    return {
        "method": name,
        "batch": batch,
        "p50_ms": 1000 * float(np.percentile(times, 50)),
        "p99_ms": 1000 * float(np.percentile(times, 99)),
        "qps": n_queries / float(times.sum()),
        "recall@8": rec,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=1024)
    parser.add_argument("--single", type=int, default=256, help="single queries timed per method")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    parser.add_argument("--png", type=Path, default=None, help="draw recall vs p99 here")
    args = parser.parse_args()
    import faiss

    results: dict = {"n": args.n, "dim": DIM, "k": K, "batch": BATCH, "cpus": os.cpu_count()}
    data = vectors(args.n, seed=0)
    queries = vectors(args.queries, seed=1)
    workdir = Path(tempfile.mkdtemp(prefix="bench-experience-"))
    rss0 = rss_mib()

    # ---- build ---------------------------------------------------------------------------
    config = ExperienceConfig(index_autosave_changes=0, sqlite_synchronous="NORMAL")
    results["default_config"] = {
        name: getattr(config, name)
        for name in (
            "hnsw_dtype",
            "rerank_oversample",
            "hnsw_connectivity",
            "hnsw_expansion_add",
            "hnsw_expansion_search",
            "search_threads",
        )
    }
    results["vectors"] = "synthetic: unit vectors on a noisy 24-d subspace of R^384 (not clustered)"
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

    # ---- the store's index (default config): sweep, then the default -----------------------
    def store_search(b: np.ndarray) -> np.ndarray:
        return store.search(b, K, keys)[0]

    index = store._indexes[keys[0]]
    sweep = []
    default_name = (
        f"usearch {config.hnsw_dtype} M={config.hnsw_connectivity} "
        f"ef={config.hnsw_expansion_search} x{config.rerank_oversample} (default)"
    )
    oversamples = sorted({2, 4, config.rerank_oversample}) if store.index.reranks else [1]
    for ef in sorted({32, 48, 64, 96, 128, config.hnsw_expansion_search}):
        index.expansion_search = ef
        for over in oversamples:
            config.rerank_oversample = over
            found, times = timed_batches(store_search, queries)
            name = f"usearch {config.hnsw_dtype} M={config.hnsw_connectivity} ef={ef} x{over}"
            sweep.append(row(name, times, len(queries), recall(found, truth)))
    index.expansion_search = config.hnsw_expansion_search
    config.rerank_oversample = results["default_config"]["rerank_oversample"]
    found, times = timed_batches(store_search, queries)
    rows.append(row(default_name, times, len(queries), recall(found, truth)))
    found, times = timed_batches(store_search, queries[: args.single], batch=1)
    rows.append(row(default_name, times, args.single, recall(found, truth[: args.single]), 1))

    # ---- the old float32 graph, through the same FamilyIndexes code ---------------------------
    old_config = ExperienceConfig(index_autosave_changes=0, **OLD_F32)
    old = FamilyIndexes(workdir / "old-f32", DIM, old_config)
    t = time.perf_counter()
    for start in range(0, args.n, 20000):
        chunk = np.arange(start, min(start + 20000, args.n))
        old.apply([("add", "", chunk + 1, data[chunk])])
    results["old_f32_build_s"] = time.perf_counter() - t
    print(
        f"  default-config sweep done; old f32 graph built in {results['old_f32_build_s']:.0f}s",
        flush=True,
    )
    old_index = old.indexes[""]
    f32_sweep = []
    for ef in sorted({64, 96, 128, 160}):
        old_index.expansion_search = ef
        found, times = timed_batches(lambda b: old.search(b, K, [""])[0], queries)
        f32_sweep.append(
            row(f"usearch f32 M=16 ef={ef}", times, len(queries), recall(found, truth))
        )
    old_index.expansion_search = OLD_F32["hnsw_expansion_search"]
    old_name = "usearch f32 M=16 ef=160 (old default)"
    found, times = timed_batches(lambda b: old.search(b, K, [""])[0], queries)
    rows.append(row(old_name, times, len(queries), recall(found, truth)))
    found, times = timed_batches(lambda b: old.search(b, K, [""])[0], queries[: args.single], 1)
    rows.append(row(old_name, times, args.single, recall(found, truth[: args.single]), 1))
    old.indexes.clear()  # free the graph before faiss builds its own

    # ---- faiss HNSW: the lowest efSearch reaching the target recall ---------------------------
    hnsw = faiss.IndexHNSWFlat(DIM, config.hnsw_connectivity, faiss.METRIC_INNER_PRODUCT)
    hnsw.hnsw.efConstruction = config.hnsw_expansion_add
    t = time.perf_counter()
    hnsw.add(data)
    results["faiss_hnsw_build_s"] = time.perf_counter() - t
    print(f"  faiss HNSW built in {results['faiss_hnsw_build_s']:.0f}s", flush=True)
    faiss_sweep, equal = [], None
    for ef in (16, 24, 32, 48, 64, 96, 128, 192, 256):
        hnsw.hnsw.efSearch = ef
        found, times = timed_batches(lambda b: hnsw.search(b, K)[1] + 1, queries)
        faiss_sweep.append(
            row(
                f"faiss HNSWFlat M={config.hnsw_connectivity} efSearch={ef}",
                times,
                len(queries),
                recall(found, truth),
            )
        )
        if faiss_sweep[-1]["recall@8"] >= TARGET_RECALL:
            equal = ef
            break
    hnsw.hnsw.efSearch = equal or 256
    faiss_name = (
        f"faiss HNSWFlat M={config.hnsw_connectivity} efSearch={hnsw.hnsw.efSearch} (equal recall)"
    )
    found, times = timed_batches(lambda b: hnsw.search(b, K)[1] + 1, queries)
    rows.append(row(faiss_name, times, len(queries), recall(found, truth)))
    found, times = timed_batches(lambda b: hnsw.search(b, K)[1] + 1, queries[: args.single], 1)
    rows.append(row(faiss_name, times, args.single, recall(found, truth[: args.single]), 1))
    hnsw.reset()
    store.close()
    results["sweeps"] = {
        "usearch_default_dtype": sweep,
        "usearch_f32": f32_sweep,
        "faiss_hnsw": faiss_sweep,
    }

    manager = ExperienceManager(workdir / "store", config)
    found, times = timed_batches(
        lambda b: np.array(
            [
                [h.id for h in hits] + [-1] * (K - len(hits))
                for hits in [
                    f.result()
                    for f in [manager.retrieval._submit(None, q, K, None, False, False) for q in b]
                ]
            ]
        ),
        queries,
    )
    rows.append(
        row(
            "ExperienceManager (default, +metadata)",
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
                    f.result()
                    for f in [manager.retrieval._submit(None, q, K, None, True, True) for q in b]
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
    manager.retrieve("warm up the model", k=K, timeout=900)  # loads the model (slow when busy)
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
    print(
        f"\nExperience store benchmark: {args.n:,} x {DIM} vectors, k={K}, {os.cpu_count()} cpus\n"
    )
    print(
        f"| {'method':<56} | {'batch':>5} | {'p50 ms':>8} | {'p99 ms':>8} | {'queries/s':>10} | {'recall@8':>8} |"
    )
    print(f"|{'-' * 58}|{'-' * 7}|{'-' * 10}|{'-' * 10}|{'-' * 12}|{'-' * 10}|")
    for r in rows + sweep + f32_sweep + faiss_sweep:
        print(
            f"| {r['method']:<56} | {r['batch']:>5} | {r['p50_ms']:>8.2f} | {r['p99_ms']:>8.2f} | {r['qps']:>10.0f} | {r['recall@8']:>8.4f} |"
        )

    def pick(name: str, batch: int) -> dict:
        return next(r for r in rows if r["method"] == name and r["batch"] == batch)

    ratios = {}
    for batch in (BATCH, 1):
        ours = pick(default_name, batch)
        for other in (old_name, faiss_name, "faiss IndexFlatIP"):
            if batch == 1 and other == "faiss IndexFlatIP":
                continue
            peer = pick(other, batch)
            ratios[f"batch{batch}: p99 {other} / default"] = peer["p99_ms"] / ours["p99_ms"]
            ratios[f"batch{batch}: qps default / {other}"] = ours["qps"] / peer["qps"]
    results["ratios"] = ratios
    print()
    for name, value in ratios.items():
        print(f"{name}: {value:.2f}x")
    e = results["e2e_single_query_ms"]
    print(
        f"end-to-end single query with embedding: p50 {e['p50']:.1f} ms, p99 {e['p99']:.1f} ms (cached embedding p50 {e['cached_p50']:.1f} ms)"
    )
    print(
        f"build {results['build_s']:.1f} s (old f32 graph {results['old_f32_build_s']:.1f} s, faiss HNSW {results['faiss_hnsw_build_s']:.1f} s), "
        f"save {results['save_s']:.2f} s, open {results['open_s']:.2f} s, "
        f"index {results['index_mib']:.0f} MiB, on disk {results['disk_mib']:.0f} MiB, RSS +{results['rss_total_mib']:.0f} MiB"
    )
    if args.png:
        plot(results, args.png)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


def plot(results: dict, png: Path) -> None:
    """Recall@8 vs p99 per batch of 32 for each sweep, the default marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, sweep in results["sweeps"].items():
        ax.plot([r["p99_ms"] for r in sweep], [r["recall@8"] for r in sweep], "o-", label=label)
    for r in results["rows"]:
        if r["batch"] == BATCH and r["method"].endswith(
            ("(default)", "(old default)", "(equal recall)")
        ):
            ax.plot(r["p99_ms"], r["recall@8"], "k*", markersize=10)
            ax.annotate(r["method"], (r["p99_ms"], r["recall@8"]), fontsize=7)
    ax.axhline(TARGET_RECALL, color="grey", linestyle=":")
    ax.set_xlabel("p99 ms per batch of 32")
    ax.set_ylabel("recall@8")
    ax.set_title(f"{results['n']:,} x {DIM}, {results['cpus']} cpus")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


if __name__ == "__main__":
    main()
