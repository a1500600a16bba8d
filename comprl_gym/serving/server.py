"""Serve comprl ids with ``openenv-core``'s server: one env per WebSocket session.

:func:`make_app` builds the FastAPI app from OpenEnv's ``HTTPEnvServer`` (its ``/ws``
session protocol, ``/schema``, ``/metadata``, its session bound and idle-session reaper) in
OpenEnv's *production* mode, so episodes run only in sessions, never in the stateless
``/reset``/``/step`` routes (those would make a fresh env per request). Each session is a
:class:`ComprlEnvironment`; a client picks the id at ``reset`` (``env_id=...``, default the
first served id; ``experience=True`` for its experience-augmented form when the server has
an experience store). ``/health`` reports the session count. An optional bearer token guards
every route except ``/health``.

Bad requests get OpenEnv's structured error messages (``{"type": "error", "data": {"code":
..., "message": ...}}``) and the session stays open: an unknown id, a non-string or oversized
action (``VALIDATION_ERROR``), a step before reset or after the episode ended
(``EXECUTION_ERROR``), the session bound (``CAPACITY_REACHED``).

Example:
from comprl_gym.serving.server import ComprlEnvironment
    >>> from comprl_gym.serving.models import ComprlAction
    >>> env = ComprlEnvironment(("comprl/WebShop-v0",))
    >>> first = env.reset(seed=0)
    >>> first.info["env_family"], first.done
    ('webshop', False)
    >>> env.step(ComprlAction(text="search[shoes]")).info["step"]
    1
    >>> env.close()
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import hmac
import json
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import gymnasium as gym
import uvicorn
from fastapi import FastAPI, WebSocketDisconnect
from openenv.core.env_server.http_server import HTTPEnvServer
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import (
    ConcurrencyConfig,
    EnvironmentMetadata,
    ServerMode,
)
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError
from starlette.websockets import WebSocketDisconnected

import comprl_gym
from comprl_gym.core import ComprlGymError, ConfigurationError
from comprl_gym.env_factory import EnvSpec, ExperienceSpec, make_env
from comprl_gym.serving.models import ComprlAction, ComprlObservation, ComprlState
from comprl_gym.utils import jsonable

#: Routes a client may call without the bearer token (container health checks).
OPEN_PATHS = frozenset({"/health"})


class SessionError(ComprlGymError, RuntimeError):
    """A request that does not fit the session's state (step before reset or after the end)."""


class _ResetRequest(BaseModel):
    """The options of a ``reset`` message; anything else is refused."""

    model_config = ConfigDict(extra="forbid")

    env_id: str | None = None
    seed: int | None = Field(default=None, ge=0)
    episode_id: str | None = Field(default=None, max_length=255)
    options: dict[str, Any] | None = None
    experience: bool = False

    @field_validator("env_id")
    @classmethod
    def _known(cls, env_id: str | None, info: ValidationInfo) -> str | None:
        served = (info.context or {}).get("served", ())
        if env_id is not None and env_id not in served:
            # A custom error keeps the error's context JSON-safe for OpenEnv's error message.
            raise PydanticCustomError(
                "unknown_env_id",
                "unknown env id {env_id}; this server serves {served}",
                {"env_id": env_id, "served": list(served)},
            )
        return env_id


class ComprlEnvironment(Environment[ComprlAction, ComprlObservation, ComprlState]):
    """One client session: a gymnasium env made from a served id at ``reset``.

    The env is made in the session's own thread (OpenEnv runs each session's calls on one
    executor thread) and kept across resets of the same id.
    """

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(
        self,
        env_ids: Sequence[str],
        env_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
        experience: ExperienceSpec | None = None,
        manager: Any = None,
    ):
        super().__init__()
        if not env_ids:
            raise ConfigurationError("serve at least one env id")
        self.env_ids = tuple(env_ids)
        self.env_kwargs = {k: dict(v) for k, v in (env_kwargs or {}).items()}
        #: How a session's env is wrapped when it asks for experience (None: it may not).
        self.experience = experience
        self.manager = manager
        self._env: gym.Env | None = None
        self._env_key: tuple[str, bool] | None = None
        self._state = ComprlState()
        self._closed = False

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> ComprlObservation:
        request = _ResetRequest.model_validate(
            {"seed": seed, "episode_id": episode_id, **kwargs}, context={"served": self.env_ids}
        )
        self._check_open()
        env_id = request.env_id or self.env_ids[0]
        if request.experience and self.experience is None:
            raise SessionError("this server has no experience store (serve with --experience DIR)")
        if self._env is None or self._env_key != (env_id, request.experience):
            self._close_env()
            spec = EnvSpec.of(
                env_id,
                self.env_kwargs.get(env_id),
                experience=self.experience if request.experience else None,
            )
            env = make_env(spec, manager=self.manager)
            self._env, self._env_key = env, (env_id, request.experience)
        observation, info = self._env.reset(seed=request.seed, options=request.options)
        self._state = ComprlState(env_id=env_id, episode_id=request.episode_id, step_count=0)
        return ComprlObservation(env_id=env_id, text=observation, info=jsonable(info), reward=None)

    def step(
        self, action: ComprlAction, timeout_s: float | None = None, **kwargs: Any
    ) -> ComprlObservation:
        self._check_open()
        if self._env is None:
            raise SessionError("no episode: send reset before step")
        if self._state.done:
            raise SessionError("the episode is over: send reset to start another")
        observation, reward, terminated, truncated, info = self._env.step(action.text)
        self._state.step_count += 1
        self._state.done = bool(terminated or truncated)
        return ComprlObservation(
            env_id=self._state.env_id,
            text=observation,
            info=jsonable(info),
            reward=float(reward),
            done=self._state.done,
            terminated=bool(terminated),
            truncated=bool(truncated),
        )

    @property
    def state(self) -> ComprlState:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(
            name="comprl-gym",
            description="comprl ids served: " + ", ".join(self.env_ids),
            version=comprl_gym.__version__,
        )

    def close(self) -> None:
        self._closed = True
        self._close_env()

    def _check_open(self) -> None:
        if self._closed:
            raise SessionError("this session was closed (idle timeout or shutdown): reconnect")

    def _close_env(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None


class _Connection:
    """One WebSocket connection as :class:`WatchDisconnects` sees it: whether the client has
    gone, and the session the server made for it (once made)."""

    #: Releases under way: the event loop keeps only weak references to tasks, and a
    #: release collected before it ran would leave its slot to the idle reaper.
    _releasing: set[asyncio.Task] = set()

    def __init__(self) -> None:
        self.gone = False
        self.session_id: str | None = None
        self.server: _EnvServer | None = None

    def release(self) -> None:
        """Free the connection's session now (the client has gone)."""
        if self.server is not None and self.session_id is not None:
            task = asyncio.ensure_future(self.server.release_session(self.session_id))
            self._releasing.add(task)
            task.add_done_callback(self._releasing.discard)


#: The connection whose ``/ws`` handler runs in this task (set by :class:`WatchDisconnects`).
_CONNECTION: contextvars.ContextVar[_Connection | None] = contextvars.ContextVar(
    "comprl_connection", default=None
)


class WatchDisconnects:
    """ASGI middleware: a ``/ws`` client that leaves frees its session at once.

    OpenEnv's handler learns of a disconnect only when it next reads a message, so a session
    whose client aborted during a long reset or step (a first MiniHack import, a SWE-bench
    command) kept its slot until that call ended or the idle reaper came. Here a task reads
    the connection's messages as they arrive (at most :attr:`QUEUE` ahead, so a client that
    floods the socket is still held back) and, on ``websocket.disconnect``, frees the session
    at once: the slot is given back, and the env is closed on its own thread as soon as its
    call in flight returns.
    """

    QUEUE = 32

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return
        connection = _Connection()
        inbox: asyncio.Queue = asyncio.Queue(maxsize=self.QUEUE)

        async def pump() -> None:
            while True:
                try:
                    message = await receive()
                except Exception:  # the server's transport failed: the client is gone too
                    message = {"type": "websocket.disconnect", "code": 1006}
                gone = message["type"] == "websocket.disconnect"
                if gone:
                    connection.gone = True
                    connection.release()
                await inbox.put(message)
                if gone:
                    return

        reader = asyncio.ensure_future(pump())
        token = _CONNECTION.set(connection)
        try:
            await self.app(scope, inbox.get, send)
        finally:
            _CONNECTION.reset(token)
            reader.cancel()


class _EnvServer(HTTPEnvServer):
    """OpenEnv's server, except that a session busy in a long reset or step is not idle, and
    a session whose client has gone is freed at once (:class:`WatchDisconnects`).

    OpenEnv's reaper measures idleness from the last *finished* call, so a reset longer than
    the idle timeout (a first MiniHack import, a SWE-bench sandbox) would be reaped mid-call.
    """

    async def _create_session(self) -> tuple[str, Any]:
        session_id, env = await super()._create_session()
        connection = _CONNECTION.get()
        if connection is not None:
            connection.server, connection.session_id = self, session_id
            if connection.gone:  # the client left while its env was being made
                connection.release()
        return session_id, env

    async def release_session(self, session_id: str) -> None:
        """Give a session's slot back now and close its env once its call in flight returns
        (OpenEnv's ``_destroy_session`` pops the session before it waits for the close)."""
        await self._destroy_session(session_id)

    async def _run_in_session_executor(
        self, session_id: str, func: Any, *args: Any, **kwargs: Any
    ) -> Any:
        if session_id not in self._sessions:
            # Released (its client left) with messages still queued: OpenEnv would run them
            # on its shared pool, on an env being closed on its own thread.
            raise SessionError("this session was closed (its client left): reconnect")
        call = asyncio.ensure_future(
            super()._run_in_session_executor(session_id, func, *args, **kwargs)
        )
        while True:
            self._update_session_activity(session_id)
            done, _ = await asyncio.wait({call}, timeout=1.0)
            if done:
                return call.result()


class QuietDisconnects:
    """ASGI middleware: a client that left is not a server error.

    OpenEnv's ``/ws`` handler answers a failed call with an error message and closes the
    socket in its ``finally``; after a client vanished mid-call Starlette raises
    ``WebSocketDisconnect`` or ``WebSocketDisconnected`` (a send after the close) there,
    which uvicorn would log as an application crash for every dropped client. The session is
    already destroyed by then.
    """

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        try:
            await self.app(scope, receive, send)
        except (WebSocketDisconnect, WebSocketDisconnected):
            if scope["type"] != "websocket":
                raise


class BearerToken:
    """ASGI middleware: every route but :data:`OPEN_PATHS` needs ``Authorization: Bearer T``.

    Plain ASGI rather than an HTTP middleware, so WebSocket handshakes are checked too: a
    handshake without the token is refused (HTTP 403) before a session is made.
    """

    def __init__(self, app: Any, token: str):
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket") and scope["path"] not in OPEN_PATHS:
            given = dict(scope.get("headers", ())).get(b"authorization", b"")
            if not hmac.compare_digest(given, self._expected):
                await self._refuse(scope, send)
                return
        await self.app(scope, receive, send)

    @staticmethod
    async def _refuse(scope: dict, send: Any) -> None:
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008, "reason": "bad or missing token"})
            return
        body = json.dumps(
            {"type": "error", "data": {"code": "UNAUTHORIZED", "message": "bad or missing token"}}
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": body})


def make_app(
    env_ids: Sequence[str],
    *,
    max_sessions: int = 16,
    idle_timeout_s: float | None = 300.0,
    token: str | None = None,
    env_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
    experience: Any = None,
    inject_top_k: int = 3,
    search_budget: int = 2,
    report_outcomes: bool = False,
) -> FastAPI:
    """The FastAPI app serving ``env_ids`` (each must be registered with gymnasium).

    With ``experience`` (an :class:`~comprl_gym.experience.ExperienceManager`), a client may
    ask for an id's :class:`~comprl_gym.wrappers.ExperienceAugmentedEnv` form at reset
    (``experience=True``); all sessions share the manager. Outcomes are reported to the store
    only with ``report_outcomes`` (off by default: serving does not change the store).
    """
    unknown = [env_id for env_id in env_ids if env_id not in gym.registry]
    if unknown:
        raise ConfigurationError(f"not registered ids: {unknown} (see `comprl-gym envs`)")
    if max_sessions < 1:
        raise ConfigurationError(f"max_sessions must be at least 1, got {max_sessions}")
    wrapping = None
    if experience is not None:
        wrapping = ExperienceSpec(inject_top_k, search_budget, report_outcomes)
    server = _EnvServer(
        functools.partial(ComprlEnvironment, tuple(env_ids), env_kwargs, wrapping, experience),
        ComprlAction,
        ComprlObservation,
        concurrency_config=ConcurrencyConfig(
            max_concurrent_envs=max_sessions, session_timeout=idle_timeout_s
        ),
    )
    app = FastAPI(title="comprl-gym env server", version=comprl_gym.__version__)

    # Registered before OpenEnv's routes, whose plain /health it replaces: the session count
    # is what an operator watches for leaks.
    @app.get("/health", tags=["Health"])
    def health() -> dict[str, Any]:
        return {
            "status": "healthy",
            "active_sessions": server.active_sessions,
            "max_sessions": server.max_concurrent_envs,
            "env_ids": list(env_ids),
        }

    server.register_routes(app, mode=ServerMode.PRODUCTION)
    app.router.routes = [
        route
        for route in app.router.routes
        if getattr(route, "path", None) != "/health" or route.endpoint is health
    ]
    app.state.env_server = server
    app.add_middleware(QuietDisconnects)
    # Outermost but for the token check: it must see every message the client sends.
    app.add_middleware(WatchDisconnects)
    if token:
        app.add_middleware(BearerToken, token=token)
    return app


class BackgroundServer:
    """Run an app with uvicorn in a thread of this process (tests, benchmarks, notebooks).

    ``port=0`` picks a free port; :attr:`url` is known once the server has started.
    """

    def __init__(self, app: FastAPI, host: str = "127.0.0.1", port: int = 0):
        config = uvicorn.Config(app, host=host, port=port, log_level="warning")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self.app = app
        self.host = host
        self.port = port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def active_sessions(self) -> int:
        """Sessions open now (what ``/health`` reports)."""
        return self.app.state.env_server.active_sessions

    def start(self, timeout_s: float = 30.0) -> BackgroundServer:
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the env server did not start")
            time.sleep(0.02)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=30)


@contextlib.contextmanager
def serve_in_background(app: FastAPI, host: str = "127.0.0.1") -> Iterator[BackgroundServer]:
    """``with serve_in_background(make_app([...])) as server: ... server.url ...``"""
    server = BackgroundServer(app, host=host).start()
    try:
        yield server
    finally:
        server.stop()


def serve(
    env_ids: Sequence[str], host: str = "127.0.0.1", port: int = 8000, **app_options: Any
) -> None:
    """Serve ``env_ids`` in the foreground until interrupted (``comprl-gym serve``)."""
    uvicorn.run(make_app(env_ids, **app_options), host=host, port=port)
