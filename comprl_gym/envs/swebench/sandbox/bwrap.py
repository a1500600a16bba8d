"""A bubblewrap sandbox per episode: the debootstrap root read-only, the repository writable.

Each command is a fresh ``bwrap`` (no network, own PID, IPC and UTS namespaces) over the same
root file system the Docker base image is made from, run as the unprivileged user 1000.

Who owns what matches Docker when we run as root: no user namespace, ``setpriv`` becomes uid
and gid 1000 with no capabilities (and ``no_new_privs``), so root's files are root's inside
and root-only ones (the image's ``/etc/shadow``) stay unreadable. Run by an unprivileged user,
bwrap can only map that user (as uid 1000) in a user namespace: root's files then appear as
``nobody``'s, with their modes, so root-only files are unreadable there too.

The episode's writable folders (``/testbed``, ``/tmp``, home, owned by the sandbox user) live
in one episode folder that is a size-limited tmpfs when we run as root. Memory, process and
CPU limits come from a cgroup (v1 or v2) when the cgroup tree is writable, and the cgroup's
OOM-kill count tells when the memory limit killed a command; otherwise limits come from
rlimits (an allocation past ``RLIMIT_AS`` fails inside the program, which says so itself).
``timeout`` bounds every command, and when a command ends its PID namespace dies with
everything in it.

Example:
    >>> from comprl_gym.envs.swebench.sandbox.bwrap import bwrap_available
    >>> isinstance(bwrap_available(), bool)
    True
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import resource
import shutil
import signal
import subprocess
import uuid
from pathlib import Path
from typing import ClassVar

from comprl_gym.core import EnvBackendError
from comprl_gym.envs.swebench.images import SANDBOX_UID
from comprl_gym.envs.swebench.sandbox.base import (
    COMMAND_WRAPPER,
    CommandResult,
    Sandbox,
    SandboxLimits,
    read_oom_kills,
)
from comprl_gym.utils import cache_dir

logger = logging.getLogger(__name__)

_CGROUP_V1 = Path("/sys/fs/cgroup")
_EPISODE_PREFIX = "ep-"


def bwrap_available() -> bool:
    """True when ``bwrap`` is installed and can create namespaces here."""
    if shutil.which("bwrap") is None:
        return False
    probe = subprocess.run(
        ["bwrap", "--unshare-all", "--ro-bind", "/", "/", "true"],
        capture_output=True,
        timeout=20,
    )
    return probe.returncode == 0


def episodes_root() -> Path:
    """Where episode folders live (``<cache>/swebench/bwrap``)."""
    return cache_dir("swebench", "bwrap")


def _is_mount(path: Path) -> bool:
    try:
        return os.path.ismount(path)
    except OSError:
        return False


class _Cgroup:
    """A cgroup (v1 controllers or v2) holding every process of one sandbox; best effort."""

    def __init__(self, name: str, limits: SandboxLimits):
        self.paths: list[Path] = []
        if os.geteuid() != 0:
            return
        v2 = _CGROUP_V1 / "cgroup.controllers"
        try:
            if v2.exists():
                path = _CGROUP_V1 / f"comprl-gym-{name}"
                path.mkdir()
                self.paths.append(path)
                (path / "memory.max").write_text(str(limits.memory_bytes))
                if (path / "memory.swap.max").exists():
                    (path / "memory.swap.max").write_text("0")
                (path / "pids.max").write_text(str(limits.pids))
                (path / "cpu.max").write_text(f"{int(limits.cpus * 100000)} 100000")
                return
            settings = {
                "memory": {
                    "memory.limit_in_bytes": limits.memory_bytes,
                },
                "pids": {"pids.max": limits.pids},
                "cpu": {"cpu.cfs_period_us": 100000, "cpu.cfs_quota_us": int(limits.cpus * 1e5)},
            }
            for controller, values in settings.items():
                root = _CGROUP_V1 / controller
                if not (root / "cgroup.procs").exists():
                    continue
                path = root / "comprl-gym" / name
                path.mkdir(parents=True)
                self.paths.append(path)
                for key, value in values.items():
                    (path / key).write_text(str(value))
                if controller == "memory" and (path / "memory.memsw.limit_in_bytes").exists():
                    # Memory plus swap: the limit is reached (and the OOM killer acts) without
                    # the command swapping first.
                    (path / "memory.memsw.limit_in_bytes").write_text(str(limits.memory_bytes))
        except OSError as exc:
            logger.warning("cgroup limits unavailable (%s); using rlimits only", exc)
            self.remove()

    @property
    def active(self) -> bool:
        return bool(self.paths)

    def oom_kills(self) -> int | None:
        """Processes the kernel killed for memory in this cgroup so far (``None``: no cgroup)."""
        counts = [read_oom_kills(path) for path in self.paths]
        known = [count for count in counts if count is not None]
        return sum(known) if known else None

    def join(self) -> None:
        """Move the calling process into the cgroup (run in the child before exec)."""
        for path in self.paths:
            (path / "cgroup.procs").write_text(str(os.getpid()))

    def remove(self) -> None:
        for path in self.paths:
            _remove_cgroup(path)
        self.paths = []


def _remove_cgroup(path: Path) -> None:
    procs = path / "cgroup.procs"
    try:
        for pid in procs.read_text().split():
            with contextlib.suppress(OSError):
                os.kill(int(pid), signal.SIGKILL)
        path.rmdir()
    except OSError as exc:
        logger.debug("could not remove cgroup %s: %s", path, exc)


def remove_orphans() -> list[str]:
    """Remove episode folders (and their cgroups) whose owning process is gone."""
    removed = []
    for folder in episodes_root().glob(f"{_EPISODE_PREFIX}*"):
        try:
            pid = int(folder.name.split("-")[1])
        except (IndexError, ValueError):
            continue
        if pid == os.getpid() and any(getattr(s, "folder", None) == folder for s in Sandbox._live):
            continue
        if pid != os.getpid():
            try:
                os.kill(pid, 0)
                continue
            except ProcessLookupError:
                pass
            except PermissionError:
                continue
        _remove_episode_folder(folder)
        for root in [
            _CGROUP_V1 / c / "comprl-gym" / folder.name for c in ("memory", "pids", "cpu")
        ]:
            if root.exists():
                _remove_cgroup(root)
        v2 = _CGROUP_V1 / f"comprl-gym-{folder.name}"
        if v2.exists():
            _remove_cgroup(v2)
        removed.append(folder.name)
        logger.info("removed orphaned bubblewrap episode %s", folder.name)
    return removed


def _remove_episode_folder(folder: Path) -> None:
    if _is_mount(folder):
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)
    shutil.rmtree(folder, ignore_errors=True)


class BubblewrapSandbox(Sandbox):
    """One episode folder with the repository, commands run by ``bwrap`` over ``rootfs``.

    Example (needs bwrap and the base root file system):
        sandbox = BubblewrapSandbox(rootfs, testbed_source)
        sandbox.run("git status --short", timeout=10).returncode
        0
    """

    kind: ClassVar[str] = "bubblewrap"

    def __init__(self, rootfs: Path, testbed: Path, limits: SandboxLimits | None = None):
        if shutil.which("bwrap") is None:
            raise EnvBackendError("bubblewrap is not installed: apt-get install -y bubblewrap")
        self.rootfs = Path(rootfs)
        self.limits = limits or SandboxLimits()
        self._closed = False
        name = f"{_EPISODE_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:10]}"
        self.folder = episodes_root() / name
        self.folder.mkdir()
        Sandbox._live.add(self)
        try:
            if os.geteuid() == 0:
                size = self.limits.testbed_bytes + self.limits.tmp_bytes
                subprocess.run(
                    [
                        "mount",
                        "-t",
                        "tmpfs",
                        "-o",
                        f"size={size},mode=0755",
                        "tmpfs",
                        str(self.folder),
                    ],
                    check=True,
                    capture_output=True,
                )
            for sub in ("tmp", "home"):
                (self.folder / sub).mkdir()
            os.chmod(self.folder / "tmp", 0o1777)
            copy = subprocess.run(
                ["cp", "-a", str(testbed), str(self.folder / "testbed")],
                capture_output=True,
                text=True,
            )
            if copy.returncode != 0:
                raise EnvBackendError(f"copying the repository into the sandbox: {copy.stderr}")
            if os.geteuid() == 0:
                # The sandbox user owns its repository and home, as in the Docker sandbox.
                owner = f"{SANDBOX_UID}:{SANDBOX_UID}"
                for sub in ("testbed", "home"):
                    subprocess.run(["chown", "-R", owner, str(self.folder / sub)], check=True)
            self.cgroup = _Cgroup(name, self.limits)
        except BaseException:
            self.close()
            raise

    def _bwrap_argv(self) -> list[str]:
        """``bwrap`` and its options, up to the command to run as the sandbox user."""
        folder = self.folder
        uid = str(SANDBOX_UID)
        if os.geteuid() == 0:
            # No user namespace: files keep their owners (root's stay root's, /etc/shadow stays
            # unreadable, as in Docker). bwrap keeps only what setpriv needs to become the
            # sandbox user, and setpriv drops every capability on the way (no_new_privs is on).
            identity = [
                "--unshare-ipc",
                "--unshare-pid",
                "--unshare-net",
                "--unshare-uts",
                "--unshare-cgroup-try",
                "--cap-drop",
                "ALL",
                "--cap-add",
                "CAP_SETUID",
                "--cap-add",
                "CAP_SETGID",
                "--cap-add",
                "CAP_SETPCAP",
            ]
            become_user = [
                "/usr/bin/setpriv",
                f"--reuid={uid}",
                f"--regid={uid}",
                "--clear-groups",
                "--inh-caps=-all",
                "--bounding-set=-all",
                "--",
            ]
        else:
            # Unprivileged: a user namespace maps only the caller, as the sandbox user; files
            # of other owners (root's included) appear as nobody's and keep their modes.
            identity = ["--unshare-all", "--unshare-user", "--uid", uid, "--gid", uid]
            become_user = []
        return [
            "bwrap",
            *identity,
            "--hostname", "sandbox",
            "--die-with-parent",
            "--new-session",
            "--ro-bind", str(self.rootfs), "/",
            "--dev", "/dev",
            "--proc", "/proc",
            "--bind", str(folder / "testbed"), "/testbed",
            "--bind", str(folder / "tmp"), "/tmp",
            "--bind", str(folder / "home"), "/home/swe",
            "--perms", "1777", "--size", str(self.limits.output_bytes), "--tmpfs", "/run",
            "--chdir", "/testbed",
            "--clearenv",
            "--setenv", "PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "--setenv", "HOME", "/home/swe",
            "--setenv", "LANG", "C.UTF-8",
            "--setenv", "PYTHONDONTWRITEBYTECODE", "1",
            "--setenv", "PYTHONPATH", "/testbed",
            *become_user,
        ]  # fmt: skip

    def _preexec(self) -> None:
        """In the child, before exec: join the cgroup and set rlimits."""
        self.cgroup.join()
        lim = self.limits
        resource.setrlimit(resource.RLIMIT_FSIZE, (lim.file_bytes, lim.file_bytes))
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))
        if not self.cgroup.active:
            # Without a cgroup, rlimits are what we have (per process / per user).
            resource.setrlimit(resource.RLIMIT_AS, (lim.memory_bytes, lim.memory_bytes))
            if os.geteuid() != 0:
                resource.setrlimit(resource.RLIMIT_NPROC, (lim.pids, lim.pids))

    def run(
        self, command: str, timeout: float, head_bytes: int = 5000, tail_bytes: int = 5000
    ) -> CommandResult:
        if self._closed:
            raise EnvBackendError("the bubblewrap sandbox is closed; reset the env")
        if not (self.folder / "testbed").is_dir():
            raise EnvBackendError(f"the sandbox folder {self.folder} is gone; reset the env")
        seconds = int(max(1, timeout))
        argv = self._bwrap_argv() + [
            "bash", "-c", COMMAND_WRAPPER, "wrapper", command,
            str(seconds), str(head_bytes), str(tail_bytes),
        ]  # fmt: skip
        oom_before = self.cgroup.oom_kills()
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=self._preexec,
        )
        deadline_passed = False
        try:
            raw, _ = proc.communicate(timeout=timeout + 30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raw, _ = proc.communicate()
            raw += b"\n[comprl-gym: the sandbox did not return and was killed]"
            deadline_passed = True
        code = proc.returncode
        if code is not None and code < 0:
            code = 128 - code
        if code == 1 and raw.startswith(b"bwrap:"):
            text = raw.decode("utf-8", errors="replace").strip()
            raise EnvBackendError(f"bubblewrap failed to start the sandbox: {text}")
        oom_after = self.cgroup.oom_kills()
        return CommandResult.from_wrapper(
            raw,
            int(code),
            seconds,
            out_of_memory=oom_before is not None and (oom_after or 0) > oom_before,
            deadline_passed=deadline_passed,
        )

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        Sandbox._live.discard(self)
        cgroup = getattr(self, "cgroup", None)
        if cgroup is not None:
            cgroup.remove()
        _remove_episode_folder(self.folder)


atexit.register(Sandbox.close_all)
