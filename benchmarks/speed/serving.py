"""Benchmark: comprl envs served over OpenEnv's protocol, on loopback only.

For each id (MiniHack and WebShop by default):

1. In process: one env, the same seeded action policy, per-step latency (the baseline).
2. One served session (``comprl-gym serve`` in a subprocess on 127.0.0.1): per-step latency,
   so ``single_overhead`` = served p50 / in-process p50 is the protocol's own cost.
3. ``--sessions`` concurrent sessions x ``--steps`` steps each (async OpenEnv clients in this
   process): p50/p99 step latency, aggregate steps/s against the in-process rate
   (``throughput_ratio``), the server's peak RSS (VmHWM).
4. Afterwards: the server's session count must be 0 and the server must have no child
   process; once stopped, neither it nor any child of this script may remain.
5. A client process killed mid-episode (SIGKILL: its socket closes) and one frozen mid-episode
   (SIGSTOP: its socket stays open): seconds until the server freed each session; the frozen
   one waits for the idle timeout (OpenEnv's reaper checks every max(timeout/4, 5) s).

Run:  python -m benchmarks.speed.serving [--sessions 32] [--steps 100] [--out FILE]
Every connection goes to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import httpx

import comprl_gym  # noqa: F401  (registers the ids)
from comprl_gym.serving.client import ComprlClient
from comprl_gym.serving.models import ComprlAction

HOST = "127.0.0.1"
ENV_KWARGS = {"comprl/WebShop-v0": {"split": "test"}}
IDLE_TIMEOUT_S = 10.0


def choose(info: dict, rng: random.Random) -> str:
    allowed = info.get("admissible_actions") or ["search[cotton shirt]"]
    return rng.choice(allowed)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary_ms(values: list[float]) -> dict:
    return {
        "p50_ms": round(1000 * percentile(values, 0.50), 3),
        "p99_ms": round(1000 * percentile(values, 0.99), 3),
        "mean_ms": round(1000 * statistics.fmean(values), 3),
        "n": len(values),
    }


def in_process(env_id: str, steps: int, seed: int) -> list[float]:
    env = gym.make(env_id, **ENV_KWARGS.get(env_id, {}))
    rng = random.Random(seed)
    _, info = env.reset(seed=seed)
    latencies = []
    for _ in range(steps):
        action = choose(info, rng)
        start = time.perf_counter()
        _, _, terminated, truncated, info = env.step(action)
        latencies.append(time.perf_counter() - start)
        if terminated or truncated:
            _, info = env.reset(seed=rng.randrange(2**31))
    env.close()
    return latencies


async def session(url: str, env_id: str, steps: int, seed: int) -> list[float]:
    client = ComprlClient(url, message_timeout_s=600)
    rng = random.Random(seed)
    latencies = []
    try:
        info = (await client.reset(env_id=env_id, seed=seed)).observation.info
        for _ in range(steps):
            action = ComprlAction(text=choose(info, rng))
            start = time.perf_counter()
            result = await client.step(action)
            latencies.append(time.perf_counter() - start)
            info = result.observation.info
            if result.done:
                info = (
                    await client.reset(env_id=env_id, seed=rng.randrange(2**31))
                ).observation.info
    finally:
        await client.close()
    return latencies


async def concurrent(url: str, env_id: str, sessions: int, steps: int) -> tuple[list, float]:
    start = time.perf_counter()
    results = await asyncio.gather(*(session(url, env_id, steps, i) for i in range(sessions)))
    return [x for r in results for x in r], time.perf_counter() - start


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


def children(pid: int) -> list[int]:
    """Live child processes of ``pid`` (read from /proc, so no helper process is counted)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Server:
    """``comprl-gym serve`` in a subprocess on loopback."""

    def __init__(
        self,
        env_ids: list[str],
        max_sessions: int,
        log: Any = subprocess.PIPE,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
    ):
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}"
        args = [sys.executable, "-m", "comprl_gym.cli", "serve", *env_ids]
        args += ["--host", HOST, "--port", str(self.port), "--max-sessions", str(max_sessions)]
        args += ["--idle-timeout", str(idle_timeout_s)]
        for env_id in env_ids:  # one id per server here, so its kwargs apply to it alone
            args += [f"--env-arg={k}={v}" for k, v in ENV_KWARGS.get(env_id, {}).items()]
        # ``log``: where the server's stderr goes (a long run gives a file: a pipe nobody
        # reads fills and stalls the server).
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=log)
        deadline = time.monotonic() + 120
        while True:
            try:
                self.health()
                return
            except httpx.TransportError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    said = self.process.stderr.read().decode() if self.process.stderr else ""
                    raise RuntimeError(f"the server did not start: {said[-2000:]}") from None
                time.sleep(0.3)

    def health(self) -> dict:
        return httpx.get(f"{self.url}/health", timeout=10).json()

    def wait_sessions(self, count: int, within_s: float) -> float:
        start = time.monotonic()
        while self.health()["active_sessions"] != count:
            if time.monotonic() - start > within_s:
                raise RuntimeError(f"sessions still open: {self.health()}")
            time.sleep(0.1)
        return time.monotonic() - start

    def stop(self) -> int:
        self.process.send_signal(signal.SIGINT)
        return self.process.wait(timeout=60)


def freed_after(server: Server, env_id: str, how: signal.Signals) -> float:
    script = (
        "import time; from comprl_gym.serving.client import RemoteEnv\n"
        f"env = RemoteEnv({server.url!r}, env_id={env_id!r}); env.reset(seed=0)\n"
        "env.step('north'); print('ready', flush=True); time.sleep(600)\n"
    )
    client = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert client.stdout.readline().strip() == "ready"
    assert server.health()["active_sessions"] == 1
    client.send_signal(how)
    try:
        return server.wait_sessions(0, within_s=IDLE_TIMEOUT_S + max(IDLE_TIMEOUT_S / 4, 5) + 5)
    finally:
        client.kill()
        client.wait()


def bench(env_id: str, sessions: int, steps: int) -> dict:
    local = in_process(env_id, steps * 4, seed=0)
    server = Server([env_id], max_sessions=sessions)
    try:
        asyncio.run(concurrent(server.url, env_id, 1, 10))  # warm: the first make imports
        single = asyncio.run(session(server.url, env_id, steps * 2, seed=1))
        many, wall_s = asyncio.run(concurrent(server.url, env_id, sessions, steps))
        server.wait_sessions(0, within_s=10)
        rss = peak_rss_mib(server.process.pid)
        server_children = children(server.process.pid)
        killed_s = freed_after(server, env_id, signal.SIGKILL)
        frozen_s = freed_after(server, env_id, signal.SIGSTOP)
        final_sessions = server.health()["active_sessions"]
    finally:
        exit_code = server.stop()
    local_rate = len(local) / sum(local)
    return {
        "env_id": env_id,
        "in_process": summary_ms(local),
        "served_single_session": summary_ms(single),
        "single_overhead": round(statistics.median(single) / statistics.median(local), 2),
        f"served_{sessions}_sessions": summary_ms(many),
        "served_steps_per_s": round(len(many) / wall_s, 1),
        "in_process_steps_per_s": round(local_rate, 1),
        "throughput_ratio": round(len(many) / wall_s / local_rate, 3),
        "server_peak_rss_mib": round(rss, 1),
        "sessions_after_run": final_sessions,
        "server_children": len(server_children),
        "server_exit_code": exit_code,
        "killed_client_freed_s": round(killed_s, 2),
        "frozen_client_freed_s": round(frozen_s, 2),
        "idle_timeout_s": IDLE_TIMEOUT_S,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--env-ids", nargs="+", default=["comprl/MiniHack-Room-Random-5x5-v0", "comprl/WebShop-v0"]
    )
    parser.add_argument("--sessions", type=int, default=32)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--out", default="benchmarks/results/serving.json")
    args = parser.parse_args()
    results = []
    for env_id in args.env_ids:
        result = bench(env_id, args.sessions, args.steps)
        print(json.dumps(result, indent=2), flush=True)
        results.append(result)
    leaked = children(os.getpid())
    report = {
        "host": HOST,
        "cpus": os.cpu_count(),
        "sessions": args.sessions,
        "steps_per_session": args.steps,
        "results": results,
        "leaked_processes": leaked,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"leaked processes: {leaked}; wrote {args.out}")


if __name__ == "__main__":
    main()
