"""Benchmark: a served soak. Many short sessions on a capacity-bound server; nothing may grow.

``comprl-gym serve`` runs in a subprocess on 127.0.0.1 (``--max-sessions`` 8, idle timeout
60 s, so the reaper cannot be what frees a dropped session). ``--concurrency`` client loops
(8: the server's capacity) play ``--sessions`` sessions in all (10,000 by default): each
connects, resets, plays up to ``--steps`` steps and closes (sessions start paced over
``--duration-s``, ten minutes, or as fast as the server allows when it cannot keep up); a ``--abort-fraction`` of them
(a tenth) instead drops its TCP connection without a close frame at a random point (before
any message, before or after a reset's reply, during a step or after its reply, after a close
message). A client refused at capacity (the server has not yet freed a dropped slot) counts as
refused and is retried by the next session.

Every ``--sample-every`` sessions the bench records the server's resident memory (VmRSS), its
open file descriptors (``/proc/PID/fd``) and live sessions (``/health``). ``start`` is the first
sample after ``--warmup`` sessions (imports and first makes done), ``end`` the last one, taken
once the clients are done and every slot is free; step latency p99 is over the first and the
last ``--window`` sessions' steps. ``grows`` is true when the end exceeds the start by more
than the tolerances (RSS 10% + 16 MiB, 4 descriptors, any live session).

Run:  python -m benchmarks.speed.serving_soak [--sessions 10000] [--out FILE]
Every connection goes to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import comprl_gym  # noqa: F401  (registers the ids)
from benchmarks.speed.serving import Server, percentile  # the served bench's helpers

ENV_ID = "comprl/WebShop-v0"
#: Where an aborting client drops its connection.
ABORT_POINTS = (
    "before_any_message",
    "before_reset_reply",
    "after_reset_reply",
    "during_step",
    "after_step_reply",
    "during_close",
)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def sample(server: Server, done: int, started: float) -> dict:
    pid = server.process.pid
    return {
        "sessions_done": done,
        "elapsed_s": round(time.monotonic() - started, 1),
        "rss_mib": round(rss_mib(pid), 1),
        "open_fds": open_fds(pid),
        "live_sessions": server.health()["active_sessions"],
    }


class Refused(Exception):
    """The server answered with an error (capacity): the session did not start."""


async def play(url: str, steps: int, abort_at: str | None, rng: random.Random) -> list[float]:
    """One session; the latencies of its steps. ``abort_at``: drop the connection there."""
    from websockets.asyncio.client import connect

    ws = await connect(url.replace("http://", "ws://") + "/ws", max_size=None)
    latencies: list[float] = []

    async def call(kind: str, data: dict) -> dict:
        await ws.send(json.dumps({"type": kind, "data": data}))
        answer = json.loads(await ws.recv())
        if answer["type"] == "error":
            raise Refused(answer["data"].get("code"))
        return answer["data"]

    try:
        if abort_at == "before_any_message":
            return latencies
        if abort_at == "before_reset_reply":
            await ws.send(json.dumps({"type": "reset", "data": {"seed": rng.randrange(100)}}))
            await asyncio.sleep(rng.random() * 0.01)
            return latencies
        reply = await call("reset", {"seed": rng.randrange(100)})
        if abort_at == "after_reset_reply":
            return latencies
        stop_at = rng.randrange(steps) if abort_at in ("during_step", "after_step_reply") else -1
        for turn in range(steps):
            info = reply["observation"].get("info", {})
            action = rng.choice(info.get("admissible_actions") or ["search[cotton shirt]"])
            if turn == stop_at and abort_at == "during_step":
                await ws.send(json.dumps({"type": "step", "data": {"text": action}}))
                return latencies
            start = time.perf_counter()
            reply = await call("step", {"text": action})
            latencies.append(time.perf_counter() - start)
            if turn == stop_at or reply.get("done"):
                break
        if abort_at is None:
            await ws.send(json.dumps({"type": "close", "data": {}}))
            await ws.close()
        elif abort_at == "during_close":
            await ws.send(json.dumps({"type": "close", "data": {}}))
        return latencies
    finally:
        ws.transport.abort()  # after a clean close this changes nothing


async def soak(server: Server, args: argparse.Namespace) -> dict:
    rng = random.Random(args.seed)
    started = time.monotonic()
    plan = [
        rng.choice(ABORT_POINTS) if rng.random() < args.abort_fraction else None
        for _ in range(args.sessions)
    ]
    latencies: list[list[float]] = [[] for _ in plan]
    samples: list[dict] = []
    counts = {"done": 0, "refused": 0, "errors": 0, "aborted": 0}
    next_index = 0

    async def worker(seed: int) -> None:
        nonlocal next_index
        own = random.Random(seed)
        while next_index < len(plan):
            index = next_index
            next_index += 1
            # Paced over --duration-s: time-bound leaks (timers, reapers) get their time too.
            due = started + index * args.duration_s / len(plan)
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            try:
                latencies[index] = await play(server.url, args.steps, plan[index], own)
                counts["aborted"] += plan[index] is not None
            except Refused:
                counts["refused"] += 1
            except Exception as exc:  # a failed session is counted, not fatal to the soak
                counts["errors"] += 1
                print(f"session {index}: {type(exc).__name__}: {exc}", file=sys.stderr)
            counts["done"] += 1
            if counts["done"] % args.sample_every == 0:
                samples.append(await asyncio.to_thread(sample, server, counts["done"], started))
                print(json.dumps({**samples[-1], **counts}), flush=True)

    await asyncio.gather(*(worker(args.seed * 1000 + i) for i in range(args.concurrency)))
    wall_s = time.monotonic() - started
    free_s = await asyncio.to_thread(server.wait_sessions, 0, 5.0)
    end = await asyncio.to_thread(sample, server, counts["done"], started)
    start = next((s for s in samples if s["sessions_done"] >= args.warmup), samples[0])
    first = [x for row in latencies[args.warmup : args.warmup + args.window] for x in row]
    last = [x for row in latencies[-args.window :] for x in row]
    start["p99_step_ms"] = round(1000 * percentile(first, 0.99), 2)
    end["p99_step_ms"] = round(1000 * percentile(last, 0.99), 2)
    grows = {
        "rss": end["rss_mib"] > start["rss_mib"] * 1.10 + 16,
        "open_fds": end["open_fds"] > start["open_fds"] + 4,
        "live_sessions": end["live_sessions"] > 0,
    }
    return {
        "sessions": args.sessions,
        "wall_s": round(wall_s, 1),
        "sessions_per_s": round(args.sessions / wall_s, 1),
        **counts,
        "all_slots_free_after_s": round(free_s, 2),
        "start": start,
        "end": end,
        "grows": grows,
        "nothing_grows": not any(grows.values()),
        "samples": samples,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=10000)
    parser.add_argument(
        "--duration-s", type=float, default=600.0, help="spread the sessions over this long"
    )
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--max-sessions", type=int, default=8)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--abort-fraction", type=float, default=0.1)
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--window", type=int, default=1000)
    parser.add_argument("--sample-every", type=int, default=250)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="benchmarks/results/serving_soak.json")
    args = parser.parse_args()
    args.warmup = min(args.warmup, args.sessions // 4)
    args.window = min(args.window, args.sessions // 4)
    with tempfile.TemporaryFile() as log:
        # Idle timeout 60 s: the reaper cannot be what frees a dropped session here.
        server = Server([ENV_ID], max_sessions=args.max_sessions, log=log, idle_timeout_s=60)
        try:
            result = asyncio.run(soak(server, args))
        finally:
            exit_code = server.stop()
    report = {
        "host": "127.0.0.1",
        "duration_s_asked": args.duration_s,
        "cpus": os.cpu_count(),
        "env_id": ENV_ID,
        "max_sessions": args.max_sessions,
        "concurrency": args.concurrency,
        "steps_per_session": args.steps,
        "abort_fraction": args.abort_fraction,
        "server_exit_code": exit_code,
        **result,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    summary = {k: report[k] for k in ("sessions", "wall_s", "start", "end", "nothing_grows")}
    print(json.dumps(summary, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
