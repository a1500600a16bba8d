"""Play a served comprl env: :class:`ComprlClient` (OpenEnv) and :class:`RemoteEnv` (gymnasium).

:class:`ComprlClient` is an ``openenv-core`` ``EnvClient`` for the typed messages of
:mod:`comprl_gym.serving.models` that can send a bearer token. :class:`RemoteEnv` wraps its
synchronous form as a ``gymnasium.Env[str, str]`` with the spaces every comprl env has, so
rollouts, ``check_env`` and ``AsyncVectorEnv`` work on it unchanged. It is registered as
``comprl/Remote-v0``::

    env = gym.make("comprl/Remote-v0", url="http://127.0.0.1:8000",
                   env_id="comprl/MiniHack-Room-5x5-v0")

A server's refusal (unknown id, oversized action, step after the end, capacity) is raised as
:class:`RemoteEnvError` with the server's code and message.
"""

from __future__ import annotations

import json
from typing import Any

import gymnasium as gym
from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient
from openenv.core.utils import convert_to_ws_url
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed

from comprl_gym.core import (
    MAX_ACTION_CHARS,
    MAX_OBSERVATION_CHARS,
    EnvBackendError,
    UnicodeText,
    action_text,
)
from comprl_gym.serving.models import ComprlAction, ComprlObservation, ComprlState


class RemoteEnvError(EnvBackendError):
    """The env server refused a request; :attr:`code` is OpenEnv's error code."""

    def __init__(self, message: str, code: str = "UNKNOWN"):
        super().__init__(f"{message} ({code})")
        self.code = code


class ComprlClient(EnvClient[ComprlAction, ComprlObservation, ComprlState]):
    """OpenEnv client of a comprl env server; ``token`` is sent as a bearer token."""

    def __init__(self, base_url: str, token: str | None = None, **kwargs: Any):
        super().__init__(base_url, **kwargs)
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}

    async def connect(self) -> ComprlClient:
        # EnvClient.connect cannot send headers; this is its connection with the token added
        # and proxies off (the servers this talks to are named directly).
        if self._ws is None:
            try:
                self._ws = await ws_connect(
                    self._ws_url,
                    open_timeout=self._connect_timeout,
                    max_size=self._max_message_size,
                    additional_headers=self._headers,
                    proxy=None,
                )
            except Exception as exc:
                raise ConnectionError(f"cannot connect to {self._ws_url}: {exc}") from exc
        return self

    async def _send_and_receive(self, message: dict[str, Any]) -> dict[str, Any]:
        # EnvClient raises a bare RuntimeError with the message only; a validation error's
        # message is "Invalid message" and its reasons are in "errors".
        try:
            await self._send(message)
            response = await self._receive()
        except ConnectionClosed as closed:
            # The server may refuse a session (capacity) and close before our first message;
            # its error is still waiting to be read. A later call reconnects.
            response = await self._last_words(closed)
        if response.get("type") == "error":
            data = response.get("data", {})
            reasons = "; ".join(
                f"{'.'.join(map(str, e.get('loc', ())))}: {e.get('msg')}"
                for e in data.get("errors", ())
            )
            message_text = data.get("message", "unknown error") + (
                f": {reasons}" if reasons else ""
            )
            raise RemoteEnvError(message_text, str(data.get("code", "UNKNOWN")))
        return response

    async def _last_words(self, closed: ConnectionClosed) -> dict[str, Any]:
        ws, self._ws = self._ws, None
        try:
            return json.loads(await ws.recv()) if ws is not None else {}
        except ConnectionClosed:
            raise ConnectionError(f"the server closed the session: {closed}") from closed

    def _step_payload(self, action: ComprlAction) -> dict[str, Any]:
        return action.model_dump()

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[ComprlObservation]:
        observation = ComprlObservation(
            **payload.get("observation", {}),
            reward=payload.get("reward"),
            done=payload.get("done", False),
        )
        return StepResult(observation=observation, reward=observation.reward, done=observation.done)

    def _parse_state(self, payload: dict[str, Any]) -> ComprlState:
        return ComprlState(**payload)


class RemoteEnv(gym.Env[str, str]):
    """A comprl env played on an env server (``comprl-gym serve``), as a gymnasium env.

    Args:
        url: the server, ``http://HOST:PORT`` or ``ws://HOST:PORT``.
        env_id: which served id to play (default: the server's first).
        token: the server's bearer token, if it has one.
        experience: play the id's experience-augmented form (the server's store).
        timeout_s: how long one reset or step may take before the call fails.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(
        self,
        url: str,
        env_id: str | None = None,
        token: str | None = None,
        timeout_s: float = 300.0,
        render_mode: str | None = None,
        experience: bool = False,
    ):
        self.url = url
        self.experience = experience
        self.env_id = env_id
        #: The id the server plays for this env (``env_id``, or the server's default once reset).
        self.served_env_id = env_id
        self.render_mode = render_mode
        self.observation_space = UnicodeText(MAX_OBSERVATION_CHARS)
        self.action_space = UnicodeText(MAX_ACTION_CHARS)
        self._client = ComprlClient(
            convert_to_ws_url(url), token=token, message_timeout_s=timeout_s
        ).sync()
        self._last_observation = ""

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        request: dict[str, Any] = {"seed": seed, "options": options}
        if self.experience:
            request["experience"] = True
        if self.env_id is not None:
            request["env_id"] = self.env_id
        observation = self._client.reset(**request).observation
        self.served_env_id = observation.env_id
        self._last_observation = observation.text
        return observation.text, observation.info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        # The same coercion as TextEnv.step, so the server's env sees what a local one would.
        text = action_text(action)
        action = text if text is not None else repr(action)
        observation = self._client.step(ComprlAction(text=action)).observation
        self._last_observation = observation.text
        reward = float(observation.reward or 0.0)
        return (
            observation.text,
            reward,
            observation.terminated,
            observation.truncated,
            observation.info,
        )

    def render(self) -> str | None:  # type: ignore[override]
        return self._last_observation if self.render_mode == "ansi" else None

    def close(self) -> None:
        self._client.close()
