"""Benchmark WebShop search and env steps.

Search latency (p50/p99, ms) of the bm25s engine the env uses, over the generated 1,000-product
catalog and a generated 100,000-product catalog, against rank-bm25 (pure Python BM25Okapi,
what the original's engine module imports) in the same run when installed; index build time;
and env step time (search, click, buy) with the expert policy.

Run: ``python -m benchmarks.speed.webshop [--queries 200] [--skip-100k]``
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import time

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from comprl_gym.envs.webshop import WebShopEnv  # noqa: E402
from comprl_gym.envs.webshop.catalog import load_catalog  # noqa: E402
from comprl_gym.envs.webshop.expert import WebShopExpert  # noqa: E402
from comprl_gym.envs.webshop.generator import generate_catalog, generated_data_dir  # noqa: E402
from comprl_gym.envs.webshop.search import SearchEngine, document_text  # noqa: E402
from comprl_gym.rollouts import run_episode  # noqa: E402

logging.basicConfig(level=logging.WARNING)
logging.getLogger("bm25s").setLevel(logging.WARNING)


def percentiles(samples_s: list[float]) -> tuple[float, float]:
    ms = np.asarray(samples_s) * 1000
    return float(np.percentile(ms, 50)), float(np.percentile(ms, 99))


def products_for(n: int) -> list[dict]:
    """Generated products as the loader shapes them (Title, Description, options...)."""
    raw, _, _, _ = generate_catalog(num_products=n, with_instructions=False)
    products = []
    for r in raw:
        options = {
            k.lower(): [c["value"].lower() for c in v]
            for k, v in (r["customization_options"] or {}).items()
        }
        products.append(
            {
                "asin": r["asin"],
                "Title": r["name"],
                "Description": r["full_description"],
                "BulletPoints": r["small_description"],
                "options": options,
            }
        )
    return products


def bench_search(name: str, products: list[dict], queries: list[str], rows: list) -> None:
    start = time.perf_counter()
    engine = SearchEngine(products)
    build = time.perf_counter() - start
    times = []
    for q in queries:
        t = time.perf_counter()
        engine.search(q)
        times.append(time.perf_counter() - t)
    p50, p99 = percentiles(times)
    rows.append((name, "bm25s (ours)", len(products), build, p50, p99))
    try:
        from rank_bm25 import BM25Okapi
    except ImportError:
        rows.append((name, "rank-bm25", len(products), float("nan"), float("nan"), float("nan")))
        return
    tokenized = [document_text(p).split() for p in products]
    start = time.perf_counter()
    okapi = BM25Okapi(tokenized)
    build = time.perf_counter() - start
    times = []
    for q in queries[: max(10, len(queries) // (10 if len(products) > 10000 else 1))]:
        t = time.perf_counter()
        scores = okapi.get_scores(q.lower().split())
        np.argsort(-scores)[:50]
        times.append(time.perf_counter() - t)
    p50_r, p99_r = percentiles(times)
    rows.append((name, "rank-bm25 BM25Okapi", len(products), build, p50_r, p99_r))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--skip-100k", action="store_true")
    args = parser.parse_args()

    catalog = load_catalog(generated_data_dir())
    SearchEngine(catalog.products[:10])  # import bm25s and PyStemmer outside the timings
    logging.getLogger("bm25s").setLevel(logging.WARNING)  # bm25s sets DEBUG on import
    queries = [g["instruction_text"].split(", and price")[0] for g in catalog.goals[: args.queries]]
    rows: list = []
    bench_search("1k", catalog.products, queries, rows)
    if not args.skip_100k:
        start = time.perf_counter()
        big = products_for(100_000)
        print(f"generated 100,000 products in {time.perf_counter() - start:.1f} s")
        bench_search("100k", big, queries, rows)

    print(f"\n{'catalog':8} {'engine':30} {'docs':>8} {'build s':>8} {'p50 ms':>8} {'p99 ms':>8}")
    for name, engine, n, build, p50, p99 in rows:
        print(f"{name:8} {engine:30} {n:8d} {build:8.2f} {p50:8.2f} {p99:8.2f}")
    for name in ("1k", "100k"):
        ours = [r for r in rows if r[0] == name and r[1].startswith("bm25s")]
        theirs = [r for r in rows if r[0] == name and r[1].startswith("rank")]
        if ours and theirs and not np.isnan(theirs[0][4]):
            print(f"{name}: bm25s p50 is {theirs[0][4] / ours[0][4]:.1f}x faster than rank-bm25")

    env = WebShopEnv(split="test")
    run_episode(env, WebShopExpert(env), seed=0)  # warm up spaCy
    step_times: dict[str, list[float]] = {"search": [], "click": [], "buy": []}
    scores = []
    for i in range(args.episodes):
        obs, info = env.reset(options={"goal_index": i})
        agent = WebShopExpert(env)
        agent.reset(info["task"], info)
        done = False
        while not done:
            action = agent.act(obs, info)
            t = time.perf_counter()
            obs, reward, terminated, truncated, info = env.step(action)
            elapsed = time.perf_counter() - t
            kind = (
                "search"
                if action.startswith("search")
                else ("buy" if action == "click[buy now]" else "click")
            )
            step_times[kind].append(elapsed)
            done = terminated or truncated
        scores.append(info["score"])
    print(f"\n{'env step':10} {'n':>6} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8}")
    for kind, samples in step_times.items():
        p50, p99 = percentiles(samples)
        print(
            f"{kind:10} {len(samples):6d} {p50:8.2f} {p99:8.2f} {statistics.mean(samples) * 1000:8.2f}"
        )
    print(f"expert mean reward over {args.episodes} test goals: {statistics.mean(scores):.3f}")


if __name__ == "__main__":
    main()
