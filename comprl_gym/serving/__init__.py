"""Serve comprl envs over OpenEnv's protocol, and play served envs from gymnasium.

* :mod:`comprl_gym.serving.models` — the typed action, observation and state (pydantic,
  OpenEnv's base classes) that travel over the wire.
* :mod:`comprl_gym.serving.server` — :class:`ComprlEnvironment` (one per client session) and
  :func:`make_app`, built on ``openenv-core``'s ``HTTPEnvServer``: a WebSocket ``/ws`` per
  session, a session bound, an idle timeout, ``/health`` with the session count.
* :mod:`comprl_gym.serving.client` — :class:`ComprlClient` (an OpenEnv ``EnvClient``) and
  :class:`RemoteEnv`, registered as ``comprl/Remote-v0``.

Nothing here is imported by ``import comprl_gym``: FastAPI and openenv load only when a
server or a remote env is made (``pip install comprl-gym[serve]``).
"""
