"""Env worker pools: Ray actors that hold comprl envs and reset/step them for the driver.

The agent (and its model) stays in the driver; only ``reset`` and ``step`` travel. Each round
of :class:`~comprl_gym.rollouts.RolloutWorker` hands :class:`EnvPool` the actions of every live
episode at once; the pool sends ONE call per worker actor carrying that worker's share and
gathers the answers, so the N workers step in parallel while each steps its own envs in turn.

An env lives in a worker at an address ``(slot, EnvSpec)``: the worker builds the
:class:`~comprl_gym.env_factory.EnvSpec` on first use with the pool's ``env_factory``
(:func:`~comprl_gym.env_factory.make_env` by default; :class:`ServiceEnvFactory` hands the
experience wrapper a client of the experience service) and keeps it for later episodes, as the
trainer caches its local envs. The factory is pickled to the workers: a module-level function
or a small dataclass, not a lambda over driver state.

Failures: workers are actors with ``max_restarts``; a restarted worker has fresh envs and no
running episodes. Each episode carries a token from its reset; a step whose worker died, or
whose restarted worker does not know the token, answers :class:`~comprl_gym.rollouts.EnvLost`,
and the episode loop plays that episode again from its reset (up to ``max_episode_retries``).

Example (starts Ray; see ``tests/test_distributed_rollouts.py``)::

    >>> from comprl_gym.distributed import DistributedConfig
    >>> from comprl_gym.distributed.cluster import RayCluster
    >>> from comprl_gym.agents.base import RandomAgent
    >>> from comprl_gym.rollouts import RolloutWorker
    >>> config = DistributedConfig(enabled=True, env_workers=2, envs_per_worker=2)
    >>> from comprl_gym.env_factory import EnvSpec
    >>> with RayCluster(config):  # doctest: +SKIP
    ...     pool = EnvPool(config)
    ...     envs = pool.envs([EnvSpec.of("comprl/MiniHack-Room-5x5-v0", {"max_steps": 5})] * 4)
    ...     worker = RolloutWorker(envs, agent_factory=lambda env, seed: RandomAgent(seed),
    ...                            stepper=pool)
    ...     len(worker.run(seeds=list(range(8))))
    8
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import ray
from ray.exceptions import RayActorError

from comprl_gym.distributed.cluster import actor_options, wait_for_actors
from comprl_gym.distributed.config import DistributedConfig
from comprl_gym.distributed.experience_service import connect_experience_service
from comprl_gym.env_factory import EnvSpec, make_env
from comprl_gym.rollouts import EnvLost, ResetResult, StepResult

logger = logging.getLogger(__name__)


#: Builds the env of a spec inside a worker; must pickle (a module-level function or dataclass).
EnvFactory = Callable[[EnvSpec], gym.Env]


@dataclass
class ServiceEnvFactory:
    """:func:`~comprl_gym.env_factory.make_env` whose experience wrappers reach the store
    through the named experience service
    (:func:`~comprl_gym.distributed.experience_service.start_experience_service`).

    The client is looked up by name on first use inside the worker (an actor handle is not
    made in the driver and pickled), once per worker process. ``search_and_ask`` is answered
    without a refiner: the refiner is the extractor model, which lives in the driver.

    Example (a spec without experience needs no service)::

        >>> from comprl_gym.env_factory import EnvSpec
        >>> env = ServiceEnvFactory()(EnvSpec.of("comprl/MiniHack-Room-5x5-v0", {"max_steps": 3}))
        >>> env.unwrapped.max_steps
        3
    """

    #: The experience actor's name (``distributed.experience_service_name``).
    service_name: str = DistributedConfig.experience_service_name

    def __post_init__(self) -> None:
        self._client: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_client"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._client = None

    def client(self) -> Any:
        """This process's client of the experience service (connected on first use)."""
        if self._client is None:
            self._client = connect_experience_service(self.service_name)
        return self._client

    def __call__(self, spec: EnvSpec) -> gym.Env:
        return make_env(spec, manager=self.client() if spec.experience is not None else None)


class EnvWorker:
    """The actor: envs by address, and the token of the episode each one is playing."""

    def __init__(self, env_factory: EnvFactory, index: int):
        self.env_factory = env_factory
        self.index = index
        self.envs: dict[tuple[int, EnvSpec], gym.Env] = {}
        self.tokens: dict[tuple[int, EnvSpec], str] = {}

    def place(self) -> dict[str, Any]:
        """Where this worker runs: its process id and Ray node id."""
        return {"pid": os.getpid(), "node_id": ray.get_runtime_context().get_node_id()}

    def _env(self, address: tuple[int, EnvSpec]) -> gym.Env:
        if address not in self.envs:
            self.envs[address] = self.env_factory(address[1])
        return self.envs[address]

    def reset(
        self, requests: list[tuple[int, EnvSpec, str, int, dict[str, Any] | None]]
    ) -> list[tuple[Any, dict[str, Any], float]]:
        """``(slot, key, token, seed, options)`` each: reset, remember the episode's token."""
        out = []
        for slot, key, token, seed, options in requests:
            env = self._env((slot, key))
            self.tokens[(slot, key)] = token
            t0 = time.perf_counter()
            observation, info = env.reset(seed=seed, options=options)
            out.append((observation, info, time.perf_counter() - t0))
        return out

    def step(
        self, requests: list[tuple[int, EnvSpec, str, str]]
    ) -> list[tuple[Any, float, bool, bool, dict[str, Any], float] | None]:
        """``(slot, key, token, action)`` each; ``None`` for an episode this worker does not
        hold (it restarted since that episode's reset)."""
        out: list[tuple[Any, float, bool, bool, dict[str, Any], float] | None] = []
        for slot, key, token, action in requests:
            if self.tokens.get((slot, key)) != token:
                out.append(None)
                continue
            t0 = time.perf_counter()
            observation, reward, terminated, truncated, info = self.envs[(slot, key)].step(action)
            out.append(
                (observation, float(reward), terminated, truncated, info, time.perf_counter() - t0)
            )
        return out

    def close(self) -> None:
        for env in self.envs.values():
            env.close()
        self.envs.clear()


@dataclass
class RemoteEnv:
    """The driver's handle on one env address in a worker (what the episode loop holds)."""

    worker: int
    slot: int
    key: EnvSpec
    #: The token of the episode running on it (set by each reset).
    token: str = ""

    @property
    def env_id(self) -> str:
        return self.key.env_id

    def close(self) -> None:
        """The env belongs to its worker: :meth:`EnvPool.close` closes it."""


class EnvPool:
    """``env_workers`` Ray actors stepping envs for :class:`~comprl_gym.rollouts.RolloutWorker`
    (it is the worker's ``stepper``). Call :meth:`close` (or use ``with``) when done."""

    def __init__(self, config: DistributedConfig, env_factory: EnvFactory | None = None):
        config.validate()
        self.config = config
        actor = ray.remote(EnvWorker).options(
            max_restarts=config.max_restarts,
            # A step retried on a restarted worker finds no token and answers "lost" at once.
            max_task_retries=config.max_restarts,
            **actor_options(config.env_worker_resources),
        )
        factory = env_factory or make_env
        self.workers = [actor.remote(factory, i) for i in range(config.env_workers)]
        wait_for_actors(
            self.workers, "env workers", config.env_worker_resources, config.actor_start_timeout_s
        )

    @property
    def capacity(self) -> int:
        """Episodes the pool is sized to play at once (``env_workers * envs_per_worker``)."""
        return self.config.env_workers * self.config.envs_per_worker

    def envs(self, keys: list[EnvSpec]) -> list[RemoteEnv]:
        """One env per key, spread round-robin over the workers (key ``j`` on worker
        ``j % env_workers``), e.g. ``[key] * pool.capacity`` for a batch of one env id."""
        n = len(self.workers)
        return [RemoteEnv(j % n, j // n, key) for j, key in enumerate(keys)]

    def worker_places(self) -> list[dict[str, Any]]:
        """``{"pid", "node_id"}`` of each worker (waits for a restarting one)."""
        return ray.get([w.place.remote() for w in self.workers])

    # ------------------------------------------------------------------ the stepper protocol
    def env_id(self, env: RemoteEnv) -> str:
        return env.env_id

    def reset(
        self, envs: list[RemoteEnv], seeds: list[int], options: list[dict[str, Any] | None]
    ) -> list[ResetResult | EnvLost]:
        for env in envs:
            env.token = uuid.uuid4().hex
        requests = [
            (env.slot, env.key, env.token, int(seed), opts)
            for env, seed, opts in zip(envs, seeds, options)
        ]
        return self._gather(envs, requests, "reset")

    def step(self, envs: list[RemoteEnv], actions: list[str]) -> list[StepResult | EnvLost]:
        requests = [(env.slot, env.key, env.token, action) for env, action in zip(envs, actions)]
        return self._gather(envs, requests, "step")

    def _gather(self, envs: list[RemoteEnv], requests: list[tuple], method: str) -> list[Any]:
        """One call per worker with its share of ``requests``; answers in request order."""
        by_worker: dict[int, list[int]] = {}
        for i, env in enumerate(envs):
            by_worker.setdefault(env.worker, []).append(i)
        calls = {
            w: getattr(self.workers[w], method).remote([requests[i] for i in idx])
            for w, idx in by_worker.items()
        }
        out: list[Any] = [None] * len(envs)
        for w, idx in by_worker.items():
            try:
                answers = ray.get(calls[w])
            except RayActorError as exc:
                logger.warning("env worker %d died during %s: %s", w, method, exc)
                answers = [None] * len(idx)
            for i, answer in zip(idx, answers):
                out[i] = answer if answer is not None else EnvLost(f"env worker {w} restarted")
        return out

    def close(self) -> None:
        """Close the workers' envs and end the actors."""
        if not self.workers:
            return
        try:
            ray.get([w.close.remote() for w in self.workers], timeout=30)
        except Exception:  # a dead worker has nothing left to close
            logger.debug("closing env workers", exc_info=True)
        for w in self.workers:
            ray.kill(w, no_restart=True)
        self.workers = []

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
