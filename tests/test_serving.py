"""comprl envs served with openenv-core's server, played by RemoteEnv and by OpenEnv's clients.

Every server here binds 127.0.0.1 with a free port, in a thread of the test process.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import gymnasium as gym
import httpx
import pytest
from gymnasium.utils.env_checker import check_env

pytest.importorskip("openenv", reason="needs openenv-core (pip install comprl-gym[serve])")

import comprl_gym  # noqa: E402,F401  (registers the ids)
from comprl_gym.serving.client import RemoteEnv, RemoteEnvError  # noqa: E402
from comprl_gym.serving.models import MAX_REQUEST_ACTION_CHARS  # noqa: E402
from comprl_gym.serving.server import make_app, serve_in_background  # noqa: E402

MINIHACK = "comprl/MiniHack-Room-Random-5x5-v0"
WEBSHOP = "comprl/WebShop-v0"
ENV_KWARGS = {MINIHACK: {"max_steps": 12}, WEBSHOP: {"split": "test", "max_steps": 8}}


@pytest.fixture(scope="module")
def server():
    app = make_app([MINIHACK, WEBSHOP], max_sessions=6, idle_timeout_s=3, env_kwargs=ENV_KWARGS)
    with serve_in_background(app) as running:
        yield running


def _health(url: str) -> dict:
    return httpx.get(f"{url}/health", timeout=10).json()


def _first_health(url: str, within_s: float, alive=lambda: True) -> dict:
    """``/health`` of a server that is starting, once it answers."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            return _health(url)
        except httpx.TransportError:
            assert alive() and time.monotonic() < deadline, f"{url} never answered /health"
            time.sleep(0.3)


def _wait_for_sessions(url: str, count: int, within_s: float) -> float:
    start = time.monotonic()
    while _health(url)["active_sessions"] != count:
        assert time.monotonic() - start < within_s, _health(url)
        time.sleep(0.2)
    return time.monotonic() - start


def _play(env: gym.Env, seed: int, turns: int) -> list:
    """Reset and play the i-th admissible action (cycling), recording everything seen."""
    observation, info = env.reset(seed=seed)
    record = [(observation, json.loads(json.dumps(info)))]
    for turn in range(turns):
        allowed = info["admissible_actions"] or ["search[blue shoes]"]
        action = allowed[(turn * 7 + 3) % len(allowed)]
        observation, reward, terminated, truncated, info = env.step(action)
        record.append(
            (action, observation, reward, terminated, truncated, json.loads(json.dumps(info)))
        )
        if terminated or truncated:
            break
    return record


@pytest.mark.parametrize("env_id", [MINIHACK, WEBSHOP])
def test_served_and_in_process_episodes_are_identical(server, env_id):
    local = gym.make(env_id, **ENV_KWARGS[env_id])
    remote = gym.make("comprl/Remote-v0", url=server.url, env_id=env_id)
    for seed in (0, 5):
        assert _play(remote, seed, 15) == _play(local, seed, 15)
    local.close()
    remote.close()


def test_remote_env_passes_gymnasiums_check_env(server):
    env = RemoteEnv(server.url, env_id=WEBSHOP)
    check_env(env, skip_render_check=True)
    env.close()


def test_remote_envs_run_in_async_vector_env(server):
    envs = gym.vector.AsyncVectorEnv(
        [lambda: gym.make("comprl/Remote-v0", url=server.url, env_id=MINIHACK) for _ in range(2)]
    )
    observations, infos = envs.reset(seed=[1, 2])
    assert all("staircase" in text for text in observations)
    observations, rewards, *_ = envs.step(["north", "south"])
    assert len(observations) == 2 and rewards.shape == (2,)
    envs.close()
    _wait_for_sessions(server.url, 0, within_s=10)


def test_openenv_generic_client_drives_the_server(server):
    from openenv.core.generic_client import GenericEnvClient

    with GenericEnvClient(base_url=server.url).sync() as client:
        first = client.reset(env_id=MINIHACK, seed=3)
        assert first.observation["info"]["env_family"] == "minihack" and not first.done
        result = client.step({"text": "north"})
        assert result.observation["info"]["step"] == 1 and isinstance(result.reward, float)
        assert client.state()["env_id"] == MINIHACK


def test_bad_requests_get_clear_errors_and_the_session_keeps_serving(server):
    from openenv.core.generic_client import GenericEnvClient

    with GenericEnvClient(base_url=server.url).sync() as client:
        with pytest.raises(RuntimeError, match="reset before step"):
            client.step({"text": "north"})
        with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):
            client.reset(env_id="comprl/NoSuch-v0")
        with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):
            client.reset(env_id=MINIHACK, colour="red")  # not a reset option
        client.reset(env_id=MINIHACK, seed=0)
        with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):
            client.step({"text": 5})
        with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):
            client.step({"text": "n" * (MAX_REQUEST_ACTION_CHARS + 1)})
        with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):
            client.step({"action": "north"})
        done = False
        while not done:
            done = client.step({"text": "wait"}).done
        with pytest.raises(RuntimeError, match="episode is over"):
            client.step({"text": "north"})
        assert not client.reset(env_id=MINIHACK, seed=1).done  # same session, still serving
        assert client.step({"text": "north"}).observation["info"]["step"] == 1
    # RemoteEnv names the server's reason.
    env = RemoteEnv(server.url, env_id="comprl/NoSuch-v0")
    with pytest.raises(RemoteEnvError, match="unknown env id comprl/NoSuch-v0") as caught:
        env.reset()
    assert caught.value.code == "VALIDATION_ERROR"
    env.close()
    assert _health(server.url)["status"] == "healthy"


def test_an_action_longer_than_the_env_allows_is_answered_as_in_process(server):
    env = RemoteEnv(server.url, env_id=MINIHACK)
    env.reset(seed=0)
    observation, reward, *_, info = env.step("n" * 9000)
    assert info["invalid_action"] and reward == 0.0 and "longer than" in observation
    env.close()


def test_the_session_bound_refuses_extra_clients(server):
    _wait_for_sessions(server.url, 0, within_s=10)
    envs = [RemoteEnv(server.url, env_id=WEBSHOP) for _ in range(6)]
    for env in envs:
        env.reset(seed=0)
    assert _health(server.url)["active_sessions"] == 6
    extra = RemoteEnv(server.url, env_id=WEBSHOP)
    with pytest.raises(RemoteEnvError) as caught:
        extra.reset(seed=0)
    assert caught.value.code == "CAPACITY_REACHED"
    for env in envs:
        env.close()
    _wait_for_sessions(server.url, 0, within_s=10)
    extra = RemoteEnv(server.url, env_id=WEBSHOP)
    extra.reset(seed=0)  # capacity is back
    extra.close()


def test_sessions_are_freed_when_clients_vanish_or_go_quiet(server):
    _wait_for_sessions(server.url, 0, within_s=10)
    # A client process killed mid-episode: its connection drops and the session goes.
    script = (
        "import sys, time; from comprl_gym.serving.client import RemoteEnv\n"
        f"env = RemoteEnv({server.url!r}, env_id={MINIHACK!r}); env.reset(seed=0)\n"
        "env.step('north'); print('ready', flush=True); time.sleep(600)\n"
    )
    client = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert client.stdout.readline().strip() == "ready"
        assert _health(server.url)["active_sessions"] == 1
    finally:
        client.kill()
        client.wait()
    _wait_for_sessions(server.url, 0, within_s=3)

    # A client that stays connected but sends nothing: reaped by the idle timeout (3 s here,
    # checked by OpenEnv's reaper every 5 s at least).
    async def connect_and_idle():
        from websockets.asyncio.client import connect

        ws_url = server.url.replace("http://", "ws://") + "/ws"
        async with connect(ws_url) as ws:
            await ws.send(json.dumps({"type": "reset", "data": {"env_id": WEBSHOP}}))
            await ws.recv()
            idle_s = await asyncio.to_thread(_wait_for_sessions, server.url, 0, 12)
            await ws.send(json.dumps({"type": "step", "data": {"text": "search[x]"}}))
            reply = json.loads(await ws.recv())
            return idle_s, reply

    idle_s, reply = asyncio.run(connect_and_idle())
    assert 2.5 < idle_s <= 3 + 5 + 1
    assert reply["type"] == "error" and "session was closed" in reply["data"]["message"]


def test_a_bearer_token_guards_every_route_but_health():
    app = make_app([WEBSHOP], max_sessions=2, token="s3cret", env_kwargs=ENV_KWARGS)
    with serve_in_background(app) as running:
        assert httpx.get(f"{running.url}/health").status_code == 200
        refused = httpx.get(f"{running.url}/schema")
        assert refused.status_code == 401 and refused.json()["data"]["code"] == "UNAUTHORIZED"
        assert httpx.get(
            f"{running.url}/schema", headers={"Authorization": "Bearer s3cret"}
        ).is_success
        with pytest.raises(ConnectionError, match="403"):
            RemoteEnv(running.url, token="wrong").reset()
        env = RemoteEnv(running.url, token="s3cret")
        assert env.reset(seed=0)[1]["env_family"] == "webshop"
        env.close()


def test_unknown_ids_are_refused_when_the_server_is_made():
    with pytest.raises(comprl_gym.ConfigurationError, match="not registered"):
        make_app(["comprl/NoSuch-v0"])


def test_serve_command_starts_a_server_that_answers_health(tmp_path):
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "comprl_gym.cli", "serve", WEBSHOP, "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        health = _first_health(f"http://127.0.0.1:{port}", 60, alive=lambda: process.poll() is None)
        assert health == {
            "status": "healthy",
            "active_sessions": 0,
            "max_sessions": 16,
            "env_ids": [WEBSHOP],
        }
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.mark.docker
@pytest.mark.slow
def test_the_container_recipe_builds_and_answers_health(tmp_path):
    """docker/serve.Dockerfile on the offline-built base: the image serves and reports health.

    The build reaches the Debian mirror and PyPI through --network host; the container runs
    with the host's network but binds 127.0.0.1 only.
    """
    import os
    import shutil
    import socket
    import ssl
    from pathlib import Path

    import docker

    from comprl_gym.envs.swebench.images import ensure_base_image
    from comprl_gym.envs.swebench.sandbox.docker import docker_available

    if not docker_available():
        if os.environ.get("COMPRL_NO_DOCKER") == "1":
            pytest.skip("COMPRL_NO_DOCKER=1: this machine has no Docker engine")
        pytest.fail("no Docker engine answers: start one with `bash scripts/services.sh start`")
    root = Path(__file__).resolve().parents[1]
    # A clean build context: the package, and the host's CA bundle so the build trusts a
    # TLS-intercepting proxy if the machine has one.
    context = tmp_path / "context"
    shutil.copytree(
        root / "comprl_gym", context / "comprl_gym", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copytree(
        root / "docker", context / "docker", ignore=shutil.ignore_patterns("extra-ca.crt")
    )
    for name in ("pyproject.toml", "README.md", "constraints.txt"):
        shutil.copy(root / name, context / name)
    host_ca = Path(os.environ.get("SSL_CERT_FILE") or ssl.get_default_verify_paths().cafile or "")
    if host_ca.is_file():
        shutil.copy(host_ca, context / "docker" / "extra-ca.crt")
    base = ensure_base_image(docker.from_env())
    tag = "comprl-gym-serve:test"
    build = subprocess.run(
        ["docker", "build", "--network", "host", "-f", "docker/serve.Dockerfile"]
        + ["--build-arg", f"BASE={base}", "-t", tag, "."],
        cwd=context,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    name = f"comprl-gym-serve-test-{os.getpid()}"
    subprocess.run(
        ["docker", "run", "-d", "--rm", "--name", name, "--network", "host", tag]
        + [WEBSHOP, "--host", "127.0.0.1", "--port", str(port), "--max-sessions", "2"],
        check=True,
        capture_output=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        health = _first_health(url, 120)
        assert health["status"] == "healthy" and health["env_ids"] == [WEBSHOP]
        env = RemoteEnv(url, env_id=WEBSHOP)
        assert env.reset(seed=0)[1]["env_family"] == "webshop"
        env.close()
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)


@pytest.mark.slow
def test_the_experience_augmented_form_is_served_as_in_process(tmp_path):
    from comprl_gym.experience import ExperienceManager, default_embedder
    from comprl_gym.wrappers import ExperienceAugmentedEnv

    manager = ExperienceManager(tmp_path / "bank", embedder=default_embedder())
    manager.add(
        [
            "## Title: Find the stairs\n## Description: MiniHack rooms\n"
            "## Content: walk to the '>' staircase",
        ],
        env_family="minihack",
    )
    options = {"inject_top_k": 1, "search_budget": 1}
    local = ExperienceAugmentedEnv(
        gym.make(MINIHACK, **ENV_KWARGS[MINIHACK]), manager, report_outcomes=False, **options
    )
    app = make_app([MINIHACK], env_kwargs=ENV_KWARGS, experience=manager, **options)
    with serve_in_background(app) as running:
        remote = RemoteEnv(running.url, env_id=MINIHACK, experience=True)
        played_remote = _play(remote, 2, 4)
        remote.close()
        plain = RemoteEnv(running.url, env_id=MINIHACK)
        assert "staircase" not in plain.reset(seed=2)[1].get("experiences", "")
        plain.close()
    assert played_remote == _play(local, 2, 4)
    assert "walk to the '>' staircase" in played_remote[0][0]
    with (
        serve_in_background(make_app([MINIHACK])) as running,
        pytest.raises(RemoteEnvError, match="no experience store"),
    ):
        RemoteEnv(running.url, experience=True).reset(seed=0)
    manager.close()


class _CountedEnv(gym.Env):
    """A text env that counts the instances made and closed of its class."""

    made = 0
    closed = 0

    def __init__(self):
        from comprl_gym.core import UnicodeText

        self.observation_space = UnicodeText(max_length=64)
        self.action_space = UnicodeText(max_length=64)
        type(self).made += 1

    def close(self):
        type(self).closed += 1


class _SlowEnv(_CountedEnv):
    """A text env whose ``slow`` action blocks for :attr:`STEP_S`: a long call in flight."""

    STEP_S = 2.0
    made = 0
    closed = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "start", {"step": 0}

    def step(self, action):
        if action == "slow":
            time.sleep(self.STEP_S)
        return "moved", 0.0, False, False, {"step": 1}


SLOW = "comprl-test/Slow-v0"


def test_aborted_clients_free_their_sessions_at_once_even_mid_call():
    # A hostile crowd: 20 clients at once on a server of capacity 8, each resets, starts a
    # 2-second step and drops its TCP connection without a close frame. Every slot must come
    # back while those steps are still running, a good client must be served at once, and
    # every env must be closed once its step returns.
    gym.register(SLOW, entry_point=_SlowEnv)
    _SlowEnv.made = _SlowEnv.closed = 0
    app = make_app([SLOW], max_sessions=8, idle_timeout_s=60)

    async def abort_mid_step(url: str) -> bool:
        from websockets.asyncio.client import connect
        from websockets.exceptions import ConnectionClosed

        ws = await connect(url.replace("http://", "ws://") + "/ws")
        try:
            try:
                await ws.send(json.dumps({"type": "reset", "data": {"seed": 0}}))
                reply = json.loads(await ws.recv())
            except ConnectionClosed:  # refused at capacity: the server said so and closed
                return False
            if reply["type"] == "error":
                return False
            await ws.send(json.dumps({"type": "step", "data": {"text": "slow"}}))
            await asyncio.sleep(0.2)  # the step is running on the session's thread
            return True
        finally:
            ws.transport.abort()  # no close frame: the connection just drops

    try:
        with serve_in_background(app) as running:

            async def crowd() -> list[bool]:
                return await asyncio.gather(*(abort_mid_step(running.url) for _ in range(20)))

            started = asyncio.run(crowd())
            aborted_at = time.monotonic()
            assert sum(started) == 8  # the bound held: 8 sessions, 12 refused
            freed_s = _wait_for_sessions(running.url, 0, within_s=_SlowEnv.STEP_S)
            assert freed_s < 0.5, f"sessions held {freed_s:.2f} s after their clients left"
            assert _SlowEnv.closed < _SlowEnv.made  # the slow steps are still in flight
            good = RemoteEnv(running.url, env_id=SLOW)
            assert good.reset(seed=0)[0] == "start"
            assert good.step("fast")[0] == "moved"
            assert time.monotonic() - aborted_at < _SlowEnv.STEP_S  # served at once
            good.close()
            deadline = time.monotonic() + 10
            while _SlowEnv.closed < _SlowEnv.made and time.monotonic() < deadline:
                time.sleep(0.1)
            assert _SlowEnv.closed == _SlowEnv.made, (_SlowEnv.made, _SlowEnv.closed)
    finally:
        gym.registry.pop(SLOW, None)


class _TimedEnv(_CountedEnv):
    """A text env whose reset sleeps ``options["delay_s"]`` and whose step ``wait:S`` sleeps S
    seconds: calls in flight of chosen lengths."""

    made = 0
    closed = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        time.sleep(float((options or {}).get("delay_s", 0.0)))
        return "start", {"step": 0}

    def step(self, action):
        if action.startswith("wait:"):
            time.sleep(float(action[5:]))
        return "moved", 0.0, False, False, {"step": 1}


TIMED = "comprl-test/Timed-v0"

#: Where a client drops its connection (no close frame), in the order of a session's life.
ABORT_POINTS = (
    "before_any_message",  # connected only: the session exists, nothing asked
    "before_reset_reply",  # reset sent (a reset of 0-60 ms is running)
    "after_reset_reply",
    "reset_and_step_queued",  # reset and step sent back to back, no reply read
    "during_step",  # a step of 0-60 ms is running
    "old_probe",  # reset, reply, a fast step sent, dropped at once (the earlier probe)
    "after_step_reply",
    "between_messages",  # idle 0-50 ms between an episode's messages
    "during_close",  # a close message sent, dropped before the server answers
    "close_frame",  # a polite client: the websocket's close handshake
)


async def _abort_at(url: str, point: str, rng) -> bool:
    """One client that drops its connection at ``point`` (timings drawn from ``rng``); True
    when it got a session (False: refused at capacity)."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    ws = await connect(url.replace("http://", "ws://") + "/ws")

    async def send(kind: str, data: dict) -> None:
        await ws.send(json.dumps({"type": kind, "data": data}))

    async def reply() -> dict:
        answer = json.loads(await ws.recv())
        if answer["type"] == "error":
            raise ConnectionClosed(None, None)  # refused (capacity): nothing to drop
        return answer

    try:
        reset = {"seed": 0, "options": {"delay_s": rng.choice((0.0, 0.0, 0.01, 0.06))}}
        if point == "before_any_message":
            await asyncio.sleep(rng.random() * 0.02)
            return True
        await send("reset", reset)
        if point == "before_reset_reply":
            await asyncio.sleep(rng.random() * 0.05)
            return True
        if point == "reset_and_step_queued":
            await send("step", {"text": "wait:0.01"})
            return True
        await reply()
        if point == "after_reset_reply":
            return True
        if point == "old_probe":
            await send("step", {"text": "fast"})
            return True
        if point == "during_step":
            await send("step", {"text": f"wait:{rng.choice((0.0, 0.02, 0.06))}"})
            await asyncio.sleep(rng.random() * 0.04)
            return True
        await send("step", {"text": "fast"})
        await reply()
        if point == "after_step_reply":
            return True
        if point == "between_messages":
            await asyncio.sleep(rng.random() * 0.05)
            return True
        if point == "during_close":
            await send("close", {})
            return True
        await ws.close()  # close_frame
        return True
    except ConnectionClosed:
        return False
    finally:
        ws.transport.abort()  # no close frame: the connection just drops


def _sessions_free_within(server, within_s: float) -> float:
    start = time.monotonic()
    while server.active_sessions:
        assert time.monotonic() - start < within_s, f"{server.active_sessions} sessions held"
        time.sleep(0.005)
    return time.monotonic() - start


@pytest.mark.slow
def test_every_abort_interleaving_frees_its_session_within_a_second():
    # Seeded random interleavings against a real server of capacity 8 (idle timeout 60 s, so
    # the reaper cannot be what frees them): clients drop their connections at every point of
    # a session's life, alone and in crowds of up to 8, twenty in a row as the earlier probe
    # did. After each round every slot must be free within 1 s and every env closed.
    import random

    gym.register(TIMED, entry_point=_TimedEnv)
    _TimedEnv.made = _TimedEnv.closed = 0
    rng = random.Random(58)
    app = make_app([TIMED], max_sessions=8, idle_timeout_s=60)
    rounds = [[point] * 20 for point in ABORT_POINTS]  # each point twenty times in a row
    rounds += [[rng.choice(ABORT_POINTS) for _ in range(rng.randint(1, 8))] for _ in range(60)]
    worst = 0.0
    try:
        with serve_in_background(app) as running:
            for clients in rounds:
                if len(set(clients)) == 1 and len(clients) == 20:

                    async def in_a_row(point=clients[0]) -> list[bool]:
                        return [await _abort_at(running.url, point, rng) for _ in range(20)]

                    started = asyncio.run(in_a_row())
                else:

                    async def crowd(clients=clients) -> list[bool]:
                        return await asyncio.gather(
                            *(_abort_at(running.url, p, rng) for p in clients)
                        )

                    started = asyncio.run(crowd())
                assert all(started), (clients, started)  # never more than 8 at once: no refusal
                worst = max(worst, _sessions_free_within(running, 1.0))
            assert sum(map(len, rounds)) >= 300
            deadline = time.monotonic() + 5
            while _TimedEnv.closed < _TimedEnv.made and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _TimedEnv.closed == _TimedEnv.made, (_TimedEnv.made, _TimedEnv.closed)
            good = RemoteEnv(running.url, env_id=TIMED)  # still serving
            assert good.reset(seed=0)[0] == "start"
            good.close()
    finally:
        gym.registry.pop(TIMED, None)
    print(f"worst time to free every slot: {worst * 1000:.0f} ms")
