"""Connect to a Ray cluster, or start a local one, from :class:`DistributedConfig`.

``address`` empty: a local one-node cluster bound to the loopback interface only (every Ray
server listens on 127.0.0.1), ``num_cpus`` CPUs, no dashboard. ``address`` set (``"auto"`` or
``"HOST:PORT"``): join a cluster started with ``ray start --head`` / ``ray start --address``
(``docs/distributed.md``). :class:`RayCluster` is a context manager: leaving it shuts down what
it started, so no ``raylet`` or ``gcs_server`` outlives a local run.

Example (starts Ray, ~10 s on two cores)::

    >>> from comprl_gym.distributed import DistributedConfig
    >>> with RayCluster(DistributedConfig(enabled=True, num_cpus=2)) as cluster:  # doctest: +SKIP
    ...     cluster.node_addresses()
    ['127.0.0.1']
"""

from __future__ import annotations

import logging
import os
from typing import Any

import ray
from ray._private import ray_constants
from ray.exceptions import GetTimeoutError

from comprl_gym.core import ComprlGymError, ConfigurationError
from comprl_gym.distributed.config import DistributedConfig

logger = logging.getLogger(__name__)

#: Ray >= 2.50 binds its servers to the node's IP and picks that IP from the default route;
#: with this switch off it picks the loopback address (``ray._private.services``
#: ``get_node_ip_address``), so a local cluster is reachable from this machine only.
_LOOPBACK_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def loopback_only() -> None:
    """Make the next local Ray node (``ray.init``, ``ray.cluster_utils.Cluster``) advertise and
    bind 127.0.0.1 only (call before starting it)."""
    os.environ[_LOOPBACK_SWITCH] = "0"
    # Ray reads the switch once, at import: set its module constant as well.
    ray_constants.ENABLE_RAY_CLUSTER = False


def actor_options(resources: dict[str, float]) -> dict[str, Any]:
    """Ray ``.options()`` from a ``distributed.*_resources`` map: ``num_cpus``/``num_gpus``/
    ``memory`` as they are, any other key as a custom resource.

    Example:
        >>> actor_options({"num_cpus": 1, "accelerator_h100": 1})
        {'num_cpus': 1, 'resources': {'accelerator_h100': 1}}
    """
    named = {k: v for k, v in resources.items() if k in ("num_cpus", "num_gpus", "memory")}
    custom = {k: v for k, v in resources.items() if k not in named}
    return {**named, **({"resources": custom} if custom else {})}


def remote_capable() -> None:
    """Undo :func:`loopback_only` before joining a real multi-node cluster."""
    os.environ.pop(_LOOPBACK_SWITCH, None)
    ray_constants.ENABLE_RAY_CLUSTER = True


class RayCluster:
    """Ray for one run: ``start()`` (or ``with``) connects, ``shutdown()`` disconnects and
    stops what this object started.

    A local cluster uses Ray's token authentication unless ``RAY_AUTH_MODE`` says otherwise
    (Ray's default since 2.50); the driver's log lines from the workers are dropped
    (``log_to_driver=False``): the workers log into Ray's session directory.
    """

    def __init__(self, config: DistributedConfig, namespace: str = "comprl-gym"):
        config.validate()
        self.config = config
        self.namespace = namespace
        self._started = False

    @property
    def local(self) -> bool:
        """Whether this object starts its own one-node cluster (``address`` empty)."""
        return not self.config.address

    def start(self) -> RayCluster:
        if ray.is_initialized():
            raise ComprlGymError(
                "Ray is already initialised in this process: shut it down first "
                "(ray.shutdown()) or pass its address in distributed.address"
            )
        kwargs: dict[str, Any] = {
            "namespace": self.namespace,
            "logging_level": logging.WARNING,
            "log_to_driver": False,
        }
        if self.local:
            loopback_only()
            # "local": a new cluster even when another one runs on this machine (plain
            # ray.init() would join that one).
            kwargs.update(
                address="local", include_dashboard=False, num_cpus=self.config.num_cpus or None
            )
        else:
            if self.config.address.split(":")[0] not in ("auto", "127.0.0.1", "localhost"):
                remote_capable()
            kwargs["address"] = self.config.address
        ray.init(**kwargs)
        self._started = True
        logger.info(
            "ray %s: %s", "local cluster" if self.local else "joined", self.node_addresses()
        )
        return self

    def node_addresses(self) -> list[str]:
        """The IP address of every live node."""
        return [node["NodeManagerAddress"] for node in ray.nodes() if node["Alive"]]

    def shutdown(self) -> None:
        """Disconnect; a local cluster's processes (raylet, gcs_server, workers) end with it."""
        if not self._started:
            return
        ray.shutdown()
        self._started = False

    def __enter__(self) -> RayCluster:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()


def wait_for_actors(
    actors: list[Any],
    what: str,
    resources: dict[str, float],
    timeout_s: float,
    first_call: str = "place",
) -> list[Any]:
    """Call ``first_call`` on each actor of a new group and ``ray.get`` the answers; fail
    clearly where they cannot all be placed (Ray would wait forever for resources the cluster
    does not have), and then kill the whole group (none of it started: nothing to close).

    The check up front catches a group larger than the whole cluster; the timeout catches one
    that does not fit beside the actors already running.
    """
    try:
        total = ray.cluster_resources()
        key_of = {"num_cpus": "CPU", "num_gpus": "GPU"}
        for name, amount in resources.items():
            need = amount * len(actors)
            have = total.get(key_of.get(name, name), 0.0)
            if need > have:
                raise ConfigurationError(
                    f"{len(actors)} {what} ask for {need:g} {name} in all; the whole cluster "
                    f"has {have:g}: lower their number or their resources, or add nodes"
                )
        calls = [getattr(actor, first_call).remote() for actor in actors]
        try:
            return ray.get(calls, timeout=timeout_s)
        except GetTimeoutError as exc:
            raise ConfigurationError(
                f"{len(actors)} {what} (each {resources}) did not all start within "
                f"{timeout_s:.0f} s; free now: {ray.available_resources()}: give the cluster "
                "more resources, fewer actors or distributed.actor_start_timeout_s"
            ) from exc
    except Exception:
        for actor in actors:
            ray.kill(actor, no_restart=True)
        raise
