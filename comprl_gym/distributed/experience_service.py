"""The shared experience service: one ExperienceManager that many processes talk to.

One :class:`~comprl_gym.experience.ExperienceManager` owns the store (SQLite + usearch). Two
ways to share it, both handing out the same :class:`ExperienceClient`, whose methods are the
manager's (``retrieve``, ``retrieve_batch``, ``search_and_ask``, ``add``,
``apply_operations``, ``apply_extractor_output``, ``report_outcome``, ``mark_trained``,
``sample_weights``, ``merge``, ``maybe_merge``, ``get``, ``experiences``, ``stats``,
``save``, ...), so :class:`~comprl_gym.wrappers.ExperienceAugmentedEnv` and the trainer use
either unchanged:

* **On Ray** (:func:`start_experience_service`): the manager lives in a named Ray actor
  (``distributed.experience_service_name``) that Ray restarts after a crash
  (``max_restarts``) and whose calls it retries (``max_task_retries=-1``). The restarted actor
  reopens the store: every acknowledged write is there (a write is acknowledged when its call
  returned, and it returns after its SQLite transaction committed) and none is applied twice
  (every write carries a request id recorded in its own transaction; a retry finds it).
* **Without Ray, on one machine** (:class:`ExperienceServer`): the process that owns the
  manager serves it on a unix socket (or loopback TCP) with an authkey
  (:mod:`multiprocessing.managers`); other processes, e.g. ``gymnasium.vector.AsyncVectorEnv``
  workers, connect through :meth:`ExperienceServer.client`.

Callables stay on the caller's side: ``search_and_ask`` retrieves on the service and runs the
refiner (an LLM call) in the caller; ``merge`` runs the service's merge pass
(:meth:`~comprl_gym.experience.maintenance.Maintenance.merge_steps`) chunk by chunk, each chunk
answered by the caller's extractor.

Example (without Ray):
    >>> import tempfile
    >>> from comprl_gym.experience import ExperienceManager
    >>> manager = ExperienceManager(tempfile.mkdtemp())
    >>> with ExperienceServer(manager) as server:
    ...     client = server.client()  # picklable: hand it to worker processes
    ...     [eid] = client.add(["## Title: Stairs\\n## Description: rooms\\n## Content: walk to >"])
    ...     client.report_outcome([eid], won=True)
    ...     (client.get([eid])[0].wins, len(client))
    (1, 1)
    >>> manager.close()
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
import uuid
from multiprocessing.managers import BaseManager
from pathlib import Path
from typing import Any

from comprl_gym.core import ConfigurationError
from comprl_gym.distributed.config import DistributedConfig
from comprl_gym.experience.config import ExperienceConfig
from comprl_gym.experience.maintenance import MergeExtractor, run_merge
from comprl_gym.experience.manager import ExperienceManager
from comprl_gym.experience.records import Retrieved

#: Manager methods a client may call on the service. Writes get a request id (idempotent).
WRITE_METHODS = frozenset(
    {"add", "apply_operations", "apply_extractor_output", "report_outcome", "mark_trained"}
)
READ_METHODS = frozenset(
    {
        "retrieve",
        "retrieve_batch",
        "retrieve_by_vector",
        "get",
        "get_one",
        "experiences",
        "__len__",
        "training_weights",
        "sample_weights",
        "select_for_training",
        "stats",
        "check_consistency",
        "check_revisions",
        "revisions",
        "revision",
    }
)
#: Upkeep that a retry may safely repeat (dedupe finds nothing left; save rewrites the same;
#: a second delete, expire, restore or cleanup finds nothing to change; fence only waits).
UPKEEP_METHODS = frozenset(
    {"dedupe", "save", "export", "delete", "expire", "restore", "cleanup", "fence"}
)
REMOTE_METHODS = WRITE_METHODS | READ_METHODS | UPKEEP_METHODS


class ExperienceService:
    """The server side: forwards allowed calls to one manager and runs merge passes whose
    extractor calls are answered by the client (one generator per merge session)."""

    def __init__(self, manager: ExperienceManager):
        self.manager = manager
        self._merges: dict[str, Any] = {}
        self._merges_lock = threading.Lock()

    def call(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if method not in REMOTE_METHODS:
            raise ConfigurationError(f"{method!r} is not a method of the experience service")
        attribute = getattr(self.manager, method)
        return attribute(*args, **kwargs) if callable(attribute) else attribute  # or a property

    def merge_begin(
        self, session: str, actor_step: int, policy_version: str, only_if_due: bool
    ) -> tuple[str, Any]:
        """Start a merge pass: ``("chunk", texts)`` to answer, or ``("done", report)``."""
        upkeep = self.manager.maintenance
        steps = (
            upkeep.maybe_merge_steps(actor_step, policy_version)
            if only_if_due
            else upkeep.merge_steps(actor_step, policy_version)
        )
        with self._merges_lock:
            self._merges[session] = steps
        return self._advance(session, None)

    def merge_send(self, session: str, reply: Any) -> tuple[str, Any]:
        """Answer the last chunk of a merge pass; the next chunk or the report."""
        if session not in self._merges:
            raise RuntimeError(
                f"merge session {session} is unknown (the service restarted mid-merge?); the "
                "families merged before it are committed, the rest are unchanged"
            )
        return self._advance(session, reply)

    def _advance(self, session: str, reply: Any) -> tuple[str, Any]:
        steps = self._merges[session]
        try:
            return "chunk", steps.send(reply)
        except StopIteration as stop:
            with self._merges_lock:
                del self._merges[session]
            return "done", stop.value

    def pid(self) -> int:
        return os.getpid()

    def close(self) -> None:
        self.manager.close()


class ExperienceServiceActor(ExperienceService):
    """The Ray actor's class: opens the manager on the store folder (again after a restart)."""

    def __init__(
        self, store_dir: str, config: ExperienceConfig | None = None, embedder: str | None = None
    ):
        super().__init__(ExperienceManager(store_dir, config=config, embedder=embedder))


class _RemoteMergeSteps:
    """A merge pass on the service seen as a generator (``__next__``/``send``) for
    :func:`~comprl_gym.experience.maintenance.run_merge`."""

    def __init__(self, transport: Any, actor_step: int, policy_version: str, only_if_due: bool):
        self._transport = transport
        self._begin = (actor_step, policy_version, only_if_due)
        self._session = uuid.uuid4().hex

    def __next__(self) -> Any:
        return self._unpack(self._transport.merge_begin(self._session, *self._begin))

    def send(self, reply: Any) -> Any:
        if isinstance(reply, Exception):  # the caller's exception may not pickle: keep its text
            reply = RuntimeError(f"{type(reply).__name__}: {reply}")
        return self._unpack(self._transport.merge_send(self._session, reply))

    @staticmethod
    def _unpack(answer: tuple[str, Any]) -> Any:
        kind, value = answer
        if kind == "done":
            raise StopIteration(value)
        return value


def _forward(name: str) -> Any:
    def method(self: ExperienceClient, *args: Any, **kwargs: Any) -> Any:
        return self._transport.call(name, args, kwargs)

    method.__name__ = name
    method.__doc__ = f"``ExperienceManager.{name}`` on the service."
    return method


def _idempotent(name: str) -> Any:
    def method(self: ExperienceClient, *args: Any, request_id: str | None = None, **kwargs: Any):
        # One id per logical write, made here so that every retry of it carries the same one.
        kwargs["request_id"] = request_id or uuid.uuid4().hex
        return self._transport.call(name, args, kwargs)

    method.__name__ = name
    method.__doc__ = f"``ExperienceManager.{name}`` on the service, with a request id."
    return method


class ExperienceClient:
    """The manager's API over a transport (Ray actor or local socket); picklable.

    Reads and upkeep are forwarded as they are; writes carry a request id (a fresh one unless
    given), so a retried call is applied once. ``search_and_ask`` runs the refiner here and
    ``merge``/``maybe_merge`` call the extractor here. ``close`` saves the shared store's
    counters but leaves it open for the other clients; its owner stops the service.
    """

    def __init__(self, transport: Any):
        self._transport = transport

    retrieve = _forward("retrieve")
    retrieve_batch = _forward("retrieve_batch")
    retrieve_by_vector = _forward("retrieve_by_vector")
    get = _forward("get")
    get_one = _forward("get_one")
    experiences = _forward("experiences")
    training_weights = _forward("training_weights")
    sample_weights = _forward("sample_weights")
    select_for_training = _forward("select_for_training")
    stats = _forward("stats")
    check_consistency = _forward("check_consistency")
    check_revisions = _forward("check_revisions")
    revisions = _forward("revisions")
    delete = _forward("delete")
    expire = _forward("expire")
    restore = _forward("restore")
    cleanup = _forward("cleanup")
    fence = _forward("fence")
    dedupe = _forward("dedupe")
    save = _forward("save")
    export = _forward("export")
    add = _idempotent("add")
    apply_operations = _idempotent("apply_operations")
    apply_extractor_output = _idempotent("apply_extractor_output")
    report_outcome = _idempotent("report_outcome")
    mark_trained = _idempotent("mark_trained")

    def __len__(self) -> int:
        return int(self._transport.call("__len__", (), {}))

    @property
    def revision(self) -> int:
        """The shared store's latest committed revision."""
        return int(self._transport.call("revision", (), {}))

    def search_and_ask(
        self,
        question: str,
        k: int | None = None,
        env_family: str | None = None,
        refiner: Any = None,
        context: dict[str, Any] | None = None,
    ) -> tuple[str, list[int]]:
        """Retrieve on the service; the refiner (an LLM call) runs here, in the caller."""
        hits: list[Retrieved] = self.retrieve(question, k, env_family)
        answer = ExperienceManager.compose_answer(question, hits, refiner, context)
        return answer, [h.id for h in hits]

    def merge(
        self, extractor: MergeExtractor, actor_step: int = 0, policy_version: str = ""
    ) -> Any:
        """The service merges; each chunk's merge call is answered by ``extractor`` here."""
        steps = _RemoteMergeSteps(self._transport, actor_step, policy_version, only_if_due=False)
        return run_merge(steps, extractor)

    def maybe_merge(
        self, actor_step: int, extractor: MergeExtractor, policy_version: str = ""
    ) -> Any:
        """:meth:`merge` when the service's schedule says one is due, else ``None``."""
        steps = _RemoteMergeSteps(self._transport, actor_step, policy_version, only_if_due=True)
        return run_merge(steps, extractor)

    def service_pid(self) -> int:
        """The process id of the service (tests kill it to check durability)."""
        return int(self._transport.pid())

    def close(self) -> None:
        """Flush the service's buffered counters; the shared store stays open."""
        self.save()

    def __enter__(self) -> ExperienceClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# ============================================================================ without Ray
class _ServiceManager(BaseManager):
    """multiprocessing's manager protocol, serving one ExperienceService."""


_SERVICE_METHODS = ("call", "merge_begin", "merge_send", "pid")
_ServiceManager.register("service", exposed=_SERVICE_METHODS)


class SocketTransport:
    """Calls an :class:`ExperienceServer` over its socket; connects lazily once per process,
    so a client pickled into a forked or spawned worker opens its own connection."""

    def __init__(self, address: str | tuple[str, int], authkey: bytes):
        self.address = address
        self.authkey = authkey
        self._proxy: Any = None
        self._pid = -1
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {"address": self.address, "authkey": self.authkey}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["address"], state["authkey"])  # type: ignore[misc]

    def _service(self) -> Any:
        with self._lock:
            if self._proxy is None or self._pid != os.getpid():
                connection = _ServiceManager(address=self.address, authkey=self.authkey)
                connection.connect()
                self._proxy, self._pid = connection.service(), os.getpid()
            return self._proxy

    def call(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return self._service().call(method, args, kwargs)

    def merge_begin(self, *args: Any) -> Any:
        return self._service().merge_begin(*args)

    def merge_send(self, *args: Any) -> Any:
        return self._service().merge_send(*args)

    def pid(self) -> int:
        return self._service().pid()


class ExperienceServer:
    """Serve an open manager to other processes on this machine, from a thread of its owner.

    Args:
        manager: the one manager of the store; its owner keeps using it directly.
        address: a unix socket path, or ``("127.0.0.1", port)`` (port 0 picks a free one);
            default: a socket in a fresh private temporary folder.
        authkey: the shared secret clients must present (default: 32 random bytes).
    """

    def __init__(
        self,
        manager: ExperienceManager,
        address: str | os.PathLike[str] | tuple[str, int] | None = None,
        authkey: bytes | None = None,
    ):
        if isinstance(address, tuple) and address[0] not in ("127.0.0.1", "localhost", "::1"):
            raise ConfigurationError(
                f"ExperienceServer listens on loopback only, got {address[0]!r}; across "
                "machines use the Ray service (start_experience_service)"
            )
        self._folder: str | None = None
        if address is None:
            self._folder = tempfile.mkdtemp(prefix="comprl-experience-")
            address = os.path.join(self._folder, "service.sock")
        self.address: str | tuple[str, int] = (
            address if isinstance(address, tuple) else os.fspath(address)
        )
        self.authkey = authkey or os.urandom(32)
        self.service = ExperienceService(manager)
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> ExperienceServer:
        if self._server is not None:
            return self
        service = self.service

        class _Serving(_ServiceManager):  # the server side: every client gets this service
            pass

        _Serving.register("service", callable=lambda: service, exposed=_SERVICE_METHODS)
        self._server = _Serving(address=self.address, authkey=self.authkey).get_server()
        self.address = self._server.address
        self._thread = threading.Thread(
            target=self._serve, name="comprl-experience-server", daemon=True
        )
        self._thread.start()
        return self

    def _serve(self) -> None:
        with contextlib.suppress(SystemExit):  # serve_forever ends with sys.exit when stopped
            self._server.serve_forever()

    def client(self) -> ExperienceClient:
        """A client for this server (picklable; give it to worker processes)."""
        if self._server is None:
            raise RuntimeError("start the ExperienceServer before asking for clients")
        return ExperienceClient(SocketTransport(self.address, self.authkey))

    def stop(self) -> None:
        """Stop accepting calls (the manager stays open: its owner closes it)."""
        if self._server is None:
            return
        while not hasattr(self._server, "stop_event"):  # serve_forever has not begun yet
            threading.Event().wait(0.01)
        self._server.stop_event.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server.listener.close()
        self._server = None
        if self._folder is not None:
            Path(self.address).unlink(missing_ok=True)  # type: ignore[arg-type]
            Path(self._folder).rmdir()

    def __enter__(self) -> ExperienceServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


# ============================================================================ on Ray
class RayTransport:
    """Calls the experience actor; ``ray.get`` under the hood. Picklable (an actor handle)."""

    def __init__(self, actor: Any):
        self.actor = actor

    def call(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        import ray

        return ray.get(self.actor.call.remote(method, args, kwargs))

    def merge_begin(self, *args: Any) -> Any:
        import ray

        return ray.get(self.actor.merge_begin.remote(*args))

    def merge_send(self, *args: Any) -> Any:
        import ray

        return ray.get(self.actor.merge_send.remote(*args))

    def pid(self) -> int:
        import ray

        return ray.get(self.actor.pid.remote())


def experience_actor_options(dist: DistributedConfig) -> dict[str, Any]:
    """The Ray ``.options()`` of the experience actor (call inside an initialised Ray): named,
    restarted ``max_restarts`` times, every call retried (writes are idempotent), threaded,
    pinned to this node unless the store is on shared storage."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from comprl_gym.distributed.cluster import actor_options  # imports ray: Ray callers only

    dist.validate()
    options: dict[str, Any] = {
        "name": dist.experience_service_name,
        "get_if_exists": True,
        "max_restarts": dist.max_restarts,
        "max_task_retries": -1,
        "max_concurrency": dist.experience_max_concurrency,
        **actor_options(dist.experience_resources),
    }
    if not dist.experience_store_shared:
        options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(
            node_id=ray.get_runtime_context().get_node_id(), soft=False
        )
    return options


def start_experience_service(
    store_dir: str | os.PathLike[str],
    config: ExperienceConfig | None = None,
    embedder: str | None = None,
    distributed: DistributedConfig | None = None,
    namespace: str | None = None,
) -> ExperienceClient:
    """Create (or join, if it runs) the named experience actor and return its client.

    Ray must be initialised (``ray.init(address=...)``). The actor is not detached: it lives
    as long as the job that created it. Unless ``distributed.experience_store_shared``, it is
    pinned to this node (the store folder is a local path; a restart elsewhere would open an
    empty store). Its calls run on ``experience_max_concurrency`` threads (the manager is
    thread-safe and batches concurrent queries).
    """
    import ray

    options = experience_actor_options(distributed or DistributedConfig(enabled=True))
    if namespace is not None:
        options["namespace"] = namespace
    actor = (
        ray.remote(ExperienceServiceActor)
        .options(**options)
        .remote(str(Path(store_dir).resolve()), config, embedder)
    )
    client = ExperienceClient(RayTransport(actor))
    client.service_pid()  # wait until the store is open (and fail here if it cannot be)
    return client


def connect_experience_service(
    name: str = DistributedConfig.experience_service_name, namespace: str | None = None
) -> ExperienceClient:
    """The client of a running experience actor, looked up by name."""
    import ray

    return ExperienceClient(RayTransport(ray.get_actor(name, namespace=namespace)))


def stop_experience_service(client: ExperienceClient) -> None:
    """Close the store (saving counters and indexes) and end the actor for good."""
    import ray

    transport = client._transport
    if not isinstance(transport, RayTransport):
        raise ConfigurationError("stop_experience_service takes a client of the Ray service")
    ray.get(transport.actor.close.remote())
    ray.kill(transport.actor, no_restart=True)
