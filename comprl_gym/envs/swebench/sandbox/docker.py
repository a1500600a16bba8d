"""A Docker container per episode, through the Docker SDK for Python.

The container has no network (``network_mode="none"``), memory, pids and CPU limits, a
read-only root file system, size-limited tmpfs for ``/testbed`` (images built by comprl-gym),
``/tmp`` and the home folder, a file-size ulimit, and ``docker-init`` as PID 1 running as root
so that the unprivileged user cannot signal it. Commands run as uid 1000.

Containers carry labels with the owning process and host; :func:`remove_orphans` removes
those whose owner is gone (a SIGKILLed run), and an ``atexit`` hook closes the rest.

Example:
    >>> from comprl_gym.envs.swebench.sandbox.docker import docker_available
    >>> isinstance(docker_available(), bool)
    True
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any, ClassVar

from comprl_gym.core import EnvBackendError
from comprl_gym.envs.swebench.images import LABEL, LABEL_OWNER_HOST, LABEL_OWNER_PID, SANDBOX_UID
from comprl_gym.envs.swebench.sandbox.base import (
    COMMAND_WRAPPER,
    CommandResult,
    Sandbox,
    SandboxLimits,
    read_oom_kills,
)

logger = logging.getLogger(__name__)

#: Where comprl-gym images keep a pristine copy of the repository; it is copied into the
#: size-limited tmpfs at ``/testbed`` when an episode starts.
PRISTINE_TESTBED = "/opt/comprl-testbed"


def docker_client(timeout: int = 120) -> Any:
    """A Docker SDK client for the local engine, or :class:`EnvBackendError` if none answers."""
    import docker

    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
        return client
    except Exception as exc:  # docker.errors.DockerException and socket errors
        raise EnvBackendError(
            f"no Docker engine answers ({exc}); start one (scripts/services.sh start) "
            "or use sandbox='bubblewrap'"
        ) from exc


def docker_available() -> bool:
    """True when a Docker engine answers on this machine."""
    try:
        docker_client(timeout=5).close()
        return True
    except Exception:  # noqa: BLE001
        return False


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_orphans(client: Any) -> list[str]:
    """Remove comprl-gym containers whose owning process on this host no longer exists."""
    removed = []
    host = socket.gethostname()
    for container in client.containers.list(all=True, filters={"label": f"{LABEL}=episode"}):
        labels = container.labels
        if labels.get(LABEL_OWNER_HOST) != host:
            continue
        try:
            pid = int(labels.get(LABEL_OWNER_PID, "0"))
        except ValueError:
            pid = 0
        if pid > 0 and _pid_alive(pid) and pid != os.getpid():
            continue
        if pid == os.getpid() and any(s.container_id == container.id for s in Sandbox._live):
            continue
        try:
            container.remove(force=True)
            removed.append(container.name)
            logger.info("removed orphaned sandbox container %s", container.name)
        except Exception as exc:  # noqa: BLE001 - it may be going away already
            logger.debug("could not remove %s: %s", container.name, exc)
    return removed


class DockerSandbox(Sandbox):
    """One container from ``image``; ``close()`` removes it.

    Example (needs a Docker engine and the image):
        sandbox = DockerSandbox(docker_client(), image)
        sandbox.run("echo hi", timeout=10).output
        'hi\\n'
    """

    kind: ClassVar[str] = "docker"

    def __init__(self, client: Any, image: str, limits: SandboxLimits | None = None):
        import docker

        self.client = client
        self.image = image
        self.limits = limits or SandboxLimits()
        self.container_id: str | None = None
        self._closed = False
        image_obj = client.images.get(image)
        labels = image_obj.labels or {}
        #: comprl-gym's own images: pristine repo copied into a size-limited tmpfs, read-only
        #: root, user 1000. Foreign (official SWE-bench) images keep /testbed on the writable
        #: layer and run as root, as the official harness does.
        self.own_image = labels.get(LABEL) == "instance"
        self.user = f"{SANDBOX_UID}:{SANDBOX_UID}" if self.own_image else "root"
        lim = self.limits
        tmpfs = {
            "/tmp": f"size={lim.tmp_bytes},mode=1777",
            "/run/comprl": f"size={lim.output_bytes},mode=1777",
            "/home/swe": f"size={lim.tmp_bytes},uid={SANDBOX_UID},gid={SANDBOX_UID},mode=0755",
        }
        if self.own_image:
            tmpfs["/testbed"] = f"size={lim.testbed_bytes},uid={SANDBOX_UID},gid={SANDBOX_UID}"
        name = f"comprl-swe-{uuid.uuid4().hex[:12]}"
        try:
            container = client.containers.run(
                image,
                command=["sleep", "infinity"],
                name=name,
                detach=True,
                init=True,
                user="root",
                network_mode="none",
                mem_limit=lim.memory_bytes,
                memswap_limit=lim.memory_bytes,
                pids_limit=lim.pids,
                nano_cpus=int(lim.cpus * 1e9),
                read_only=self.own_image,
                tmpfs=tmpfs,
                ulimits=[
                    docker.types.Ulimit(name="fsize", soft=lim.file_bytes, hard=lim.file_bytes),
                    docker.types.Ulimit(name="nofile", soft=1024, hard=1024),
                ],
                cap_drop=["ALL"] if self.own_image else None,
                security_opt=["no-new-privileges"],
                working_dir="/testbed",
                environment={"HOME": "/home/swe" if self.own_image else "/root"},
                labels={
                    LABEL: "episode",
                    LABEL_OWNER_PID: str(os.getpid()),
                    LABEL_OWNER_HOST: socket.gethostname(),
                },
            )
        except docker.errors.APIError as exc:
            raise EnvBackendError(f"could not start a container from {image}: {exc}") from exc
        self.container = container
        self.container_id = container.id
        Sandbox._live.add(self)
        try:
            #: Where the host reads the container's OOM-kill count (None: a remote engine).
            self._memory_cgroup = self._host_cgroup("memory")
            if self.own_image:
                prepare = f"cp -a {PRISTINE_TESTBED}/. /testbed/"
                result = self._exec(["bash", "-c", prepare], self.user)
                if result[0] != 0:
                    raise EnvBackendError(f"preparing /testbed in {name} failed: {result[1]!r}")
        except BaseException:
            self.close()
            raise
        self._prefix = ""
        if not self.own_image:
            # Official SWE-bench images keep the project's interpreter in a conda env.
            self._prefix = (
                "if [ -f /opt/miniconda3/bin/activate ]; then "
                "source /opt/miniconda3/bin/activate && conda activate testbed; fi; "
            )

    # ---- running commands -----------------------------------------------------------------
    def _exec(self, argv: list[str], user: str) -> tuple[int, bytes]:
        import docker
        import requests

        if self._closed:
            raise EnvBackendError("the sandbox is closed")
        try:
            exit_code, output = self.container.exec_run(argv, user=user, workdir="/testbed")
        except (docker.errors.APIError, requests.exceptions.RequestException) as exc:
            raise self._dead(exc) from exc
        if exit_code is None:
            raise self._dead("the command returned no exit status")
        return exit_code, output or b""

    def _dead(self, cause: object) -> EnvBackendError:
        import docker

        state = "gone"
        try:
            self.container.reload()
            state = self.container.status
        except docker.errors.NotFound:
            state = "removed"
        except Exception:  # noqa: BLE001
            pass
        return EnvBackendError(
            f"the sandbox container {self.container.name} is {state}; the episode cannot go on "
            f"({cause}). Reset the env to start a new container."
        )

    def check_alive(self) -> None:
        """Raise :class:`EnvBackendError` if the container is no longer running."""
        import docker

        try:
            self.container.reload()
        except docker.errors.NotFound as exc:
            raise self._dead(exc) from exc
        if self.container.status != "running":
            raise self._dead(f"status {self.container.status}")

    def run(
        self, command: str, timeout: float, head_bytes: int = 5000, tail_bytes: int = 5000
    ) -> CommandResult:
        self.check_alive()
        seconds = int(max(1, timeout))
        argv = [
            "bash",
            "-c",
            COMMAND_WRAPPER,
            "wrapper",
            self._prefix + command,
            str(seconds),
            str(head_bytes),
            str(tail_bytes),
        ]
        outcome: dict[str, Any] = {}

        def target() -> None:
            try:
                outcome["result"] = self._exec(argv, self.user)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                outcome["error"] = exc

        oom_before = self._oom_kills()
        started = time.time()
        worker = threading.Thread(target=target, daemon=True)
        worker.start()
        # The wrapper's own timeout stops the command; this deadline guards the host against
        # a sandbox that cannot even run the wrapper's last steps (e.g. no pids left).
        worker.join(timeout + 30)
        if worker.is_alive():
            self._kill_user_processes()
            worker.join(10)
            if worker.is_alive():
                raise self._dead(f"a command did not return {timeout + 40:.0f} s after its timeout")
        if "error" in outcome:
            raise outcome["error"]
        code, raw = outcome["result"]
        result = CommandResult.from_wrapper(raw, code, seconds)
        killed = result.timed_out or result.signal is not None
        if oom_before is not None:
            result.out_of_memory = (self._oom_kills() or 0) > oom_before
        elif killed:
            result.out_of_memory = self._oom_event_since(started)
        if (
            killed
            or code in (126, 254)
            or "fork: Resource temporarily unavailable" in result.output
        ):
            # Whatever it started in the background goes too.
            self._kill_user_processes()
            self.check_alive()
        if result.output_lost:
            # The wrapper died before removing its output file from the small /run tmpfs.
            self._exec(["bash", "-c", "rm -f /run/comprl/out.* /tmp/.comprl-out.*"], self.user)
        return result

    # ---- the container's cgroups, seen from the host ----------------------------------------
    def _host_cgroup(self, controller: str) -> Path | None:
        """The container's cgroup folder of ``controller`` (v1) or its v2 folder, on this host.

        ``None`` when the engine is not local or the folder cannot be found.
        """
        try:
            self.container.reload()
            init_pid = int(self.container.attrs["State"]["Pid"])
            lines = Path(f"/proc/{init_pid}/cgroup").read_text().splitlines()
        except (OSError, ValueError, KeyError, TypeError):
            return None
        for line in lines:
            _, controllers, path = line.split(":", 2)
            if controller in controllers.split(","):
                folder = Path(f"/sys/fs/cgroup/{controller}{path}")
            elif controllers == "":
                folder = Path(f"/sys/fs/cgroup{path}")
            else:
                continue
            if folder.is_dir():
                return folder
        return None

    def _oom_kills(self) -> int | None:
        """Processes the kernel killed for memory in this container so far (local engine)."""
        return None if self._memory_cgroup is None else read_oom_kills(self._memory_cgroup)

    def _oom_event_since(self, started: float) -> bool:
        """Whether the engine reported an ``oom`` event of this container since ``started``.

        For engines whose cgroups this host cannot read. Docker reports ``State.OOMKilled``
        only when a container's main process dies, not for a command run in it.
        """
        try:
            events = self.client.api.events(
                since=f"{started:.6f}",  # the engine reads fractional seconds
                until=f"{time.time() + 0.5:.6f}",
                filters={"container": self.container_id, "event": "oom"},
                decode=True,
            )
            return any(True for _ in events)
        except Exception as exc:  # noqa: BLE001 - a missing answer must not break the step
            logger.debug("reading the oom events of %s failed: %s", self.container_id, exc)
            return False

    def _kill_user_processes(self) -> None:
        """SIGKILL every process in the container except PID 1 (docker-init) and its sleep.

        With a local engine this is done from the host through the container's pids cgroup,
        which works even when a fork bomb left no pid free for an exec; otherwise by
        ``kill -KILL -1`` inside.
        """
        if self._kill_from_host():
            return
        try:
            self.container.exec_run(["bash", "-c", "kill -KILL -1"], user=self.user)
        except Exception as exc:  # noqa: BLE001
            logger.debug("kill -1 in %s failed: %s", self.container_id, exc)

    def _kill_from_host(self) -> bool:
        pids_cgroup = self._host_cgroup("pids")
        try:
            init_pid = int(self.container.attrs["State"]["Pid"])
            keep = {init_pid}
            children = Path(f"/proc/{init_pid}/task/{init_pid}/children").read_text().split()
            keep.update(int(pid) for pid in children)
        except (OSError, ValueError, KeyError, TypeError):
            return False
        procs = None if pids_cgroup is None else pids_cgroup / "cgroup.procs"
        if procs is None or not procs.exists():
            return False
        for _ in range(20):
            pids = [int(p) for p in procs.read_text().split() if int(p) not in keep]
            if not pids:
                return True
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, 9)
            time.sleep(0.05)
        return True

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        Sandbox._live.discard(self)
        if self.container_id is None:
            return
        import docker

        for attempt in range(3):
            try:
                self.client.api.remove_container(self.container_id, force=True, v=True)
                return
            except docker.errors.NotFound:
                return
            except Exception as exc:  # noqa: BLE001 - retry: the engine may be busy
                logger.warning("removing container %s failed: %s", self.container_id, exc)
                time.sleep(0.5 * (attempt + 1))


atexit.register(Sandbox.close_all)
