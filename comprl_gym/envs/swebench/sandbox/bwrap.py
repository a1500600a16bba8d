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
The host's deadline bounds every command (it kills bwrap, and ``--die-with-parent`` the
sandbox), and when a command ends its PID namespace dies with everything in it. No wrapper
process runs around the command: per command it costs what a bare ``bwrap`` with the same
mounts costs (benchmarks/speed/swebench.py measures both).

Example:
    >>> from comprl_gym.envs.swebench.sandbox.bwrap import bwrap_available
    >>> isinstance(bwrap_available(), bool)
    True
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import queue
import select
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from comprl_gym.core import EnvBackendError
from comprl_gym.envs.swebench.images import DEPS_MOUNT, SANDBOX_UID
from comprl_gym.envs.swebench.sandbox.base import (
    CommandResult,
    Sandbox,
    SandboxLimits,
    cut_note,
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


#: The device nodes bwrap's ``--dev`` offers: (name, major, minor).
_DEVICES = (("null", 1, 3), ("zero", 1, 5), ("full", 1, 7), ("random", 1, 8),
            ("urandom", 1, 9), ("tty", 5, 0))  # fmt: skip


def device_folder() -> Path:
    """A folder with the harmless device nodes and links of a minimal ``/dev`` (made once, as
    root), bound into every sandbox."""
    folder = cache_dir("swebench", "bwrap-dev") / "v1"
    if folder.is_dir():  # renamed into place only when complete
        return folder
    partial = Path(tempfile.mkdtemp(prefix=".dev-", dir=folder.parent))
    try:
        for name, major, minor in _DEVICES:
            os.mknod(partial / name, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
            os.chmod(partial / name, 0o666)
        for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                             ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2"),
                             ("ptmx", "pts/ptmx")):  # fmt: skip
            os.symlink(target, partial / name)
        for name in ("shm", "pts"):
            (partial / name).mkdir()
        os.chmod(partial, 0o755)
        try:
            os.rename(partial, folder)
        except OSError:  # another process made it first
            shutil.rmtree(partial, ignore_errors=True)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return folder


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

    def add(self, *pids: int) -> None:
        """Move processes into the cgroup (their later children are born in it)."""
        for path in self.paths:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    (path / "cgroup.procs").write_text(str(pid))

    def remove(self) -> None:
        for path in self.paths:
            _remove_cgroup(path)
        self.paths = []


class _CgroupSpawner:
    """A thread of this process that lives in a v1 cgroup and starts every bwrap of one
    sandbox: a child inherits its creating thread's cgroups, so each command is born inside
    the sandbox's limits with no per-command cgroup write and no ``preexec_fn`` (which would
    force a full ``fork`` of this process instead of ``vfork``).

    cgroup v1 lets one thread join a cgroup (its ``tasks`` file); v2 does not, and there
    :meth:`BubblewrapSandbox.run` admits each sandbox through ``--block-fd`` instead.
    """

    def __init__(self, cgroup_paths: list[Path]):
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        joined: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(
            target=self._serve, args=(cgroup_paths, joined), name="bwrap-spawner", daemon=True
        )
        self._thread.start()
        error = joined.get()
        if error is not None:
            self._thread.join()
            raise error

    def _serve(self, cgroup_paths: list[Path], joined: queue.SimpleQueue) -> None:
        try:
            for path in cgroup_paths:
                (path / "tasks").write_text(str(threading.get_native_id()))
        except OSError as exc:
            joined.put(exc)
            return
        joined.put(None)
        while True:
            request = self._requests.get()
            if request is None:
                return  # the thread ends, leaving the cgroup empty of us
            kwargs, answer = request
            try:
                answer.put(subprocess.Popen(**kwargs))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                answer.put(exc)

    def popen(self, **kwargs: Any) -> subprocess.Popen:
        answer: queue.SimpleQueue = queue.SimpleQueue()
        self._requests.put((kwargs, answer))
        result = answer.get()
        if isinstance(result, BaseException):
            raise result
        return result

    def stop(self) -> None:
        if self._thread.is_alive():
            self._requests.put(None)
            self._thread.join(10)


def _remove_cgroup(path: Path) -> None:
    procs = path / "cgroup.procs"
    for attempt in range(100):
        try:
            for pid in procs.read_text().split():
                if int(pid) == os.getpid():
                    continue  # a spawner thread of ours still leaving it (v1 lists its process)
                with contextlib.suppress(OSError):
                    os.kill(int(pid), signal.SIGKILL)
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            # Busy while killed processes (or our exiting spawner thread) are still leaving.
            if attempt == 99:
                logger.debug("could not remove cgroup %s: %s", path, exc)
            time.sleep(0.01)


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


def _read_child_pid(fd: int) -> int | None:
    """The host PID of the sandbox's first process, from bwrap's ``--info-fd`` JSON."""
    data = b""
    while True:
        chunk = os.read(fd, 4096)
        if not chunk:
            return None  # bwrap failed before making the sandbox
        data += chunk
        try:
            return int(json.loads(data)["child-pid"])
        except (ValueError, KeyError):
            continue


@dataclass
class _Output:
    text: str
    cut: int
    deadline_passed: bool


def _collect_output(
    proc: subprocess.Popen, deadline: float, head_bytes: int, tail_bytes: int
) -> _Output:
    """Read the command's output until it ends, keeping only its head and tail; at the
    deadline kill bwrap (its sandbox dies with it: ``--die-with-parent``)."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    head = bytearray()
    tail = bytearray()
    total = 0
    deadline_passed = False
    while True:
        wait = deadline - time.monotonic()
        if wait <= 0 and not deadline_passed:
            deadline_passed = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            deadline = time.monotonic() + 10  # what is left in the pipe, then give up
            continue
        if wait <= 0:
            break
        ready, _, _ = select.select([fd], [], [], wait)
        if not ready:
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        total += len(chunk)
        room = head_bytes - len(head)
        if room > 0:
            head += chunk[:room]
            chunk = chunk[room:]
        tail += chunk
        if len(tail) > tail_bytes:
            del tail[: len(tail) - tail_bytes]
    proc.stdout.close()
    cut = total - len(head) - len(tail)
    raw = bytes(head) + (cut_note(cut).encode() if cut > 0 else b"") + bytes(tail)
    return _Output(raw.decode("utf-8", errors="replace"), max(cut, 0), deadline_passed)


class BubblewrapSandbox(Sandbox):
    """One episode folder with the repository, commands run by ``bwrap`` over ``rootfs``.

    Example (needs bwrap and the base root file system):
        sandbox = BubblewrapSandbox(rootfs, testbed_source)
        sandbox.run("git status --short", timeout=10).returncode
        0
    """

    kind: ClassVar[str] = "bubblewrap"

    def __init__(
        self,
        rootfs: Path,
        testbed: Path,
        limits: SandboxLimits | None = None,
        deps: Path | None = None,
        pythonpath: str = "/testbed",
    ):
        if shutil.which("bwrap") is None:
            raise EnvBackendError("bubblewrap is not installed: apt-get install -y bubblewrap")
        self.rootfs = Path(rootfs)
        self.limits = limits or SandboxLimits()
        #: The repository's dependencies (read-only at DEPS_MOUNT) and the import path.
        self.deps = deps
        self.pythonpath = pythonpath
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
            for sub in ("tmp", "home", "shm"):
                (self.folder / sub).mkdir()
            os.chmod(self.folder / "tmp", 0o1777)
            os.chmod(self.folder / "shm", 0o1777)
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
            self._spawner: _CgroupSpawner | None = None
            if self.cgroup.active and not (_CGROUP_V1 / "cgroup.controllers").exists():
                try:
                    self._spawner = _CgroupSpawner(self.cgroup.paths)
                except OSError as exc:
                    logger.debug("no spawner thread in the cgroup (%s); admitting each", exc)
        except BaseException:
            self.close()
            raise

    def _dev_mounts(self) -> list[str]:
        """``/dev``: as root, one bind of a prepared folder of the usual device nodes plus the
        episode's own ``/dev/shm`` (2 mounts instead of the ~8 of ``--dev``: each mount costs
        the kernel a round at namespace set-up and teardown, the most of a command's time)."""
        if os.geteuid() != 0:
            return ["--dev", "/dev"]
        return [
            "--dev-bind", str(device_folder()), "/dev",
            "--bind", str(self.folder / "shm"), "/dev/shm",
        ]  # fmt: skip

    def _bwrap_argv(self, extra: list[str] | tuple[str, ...] = ()) -> list[str]:
        """``bwrap`` and its options (``extra`` among them), up to the command to run as the
        sandbox user."""
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
            *extra,
            "--hostname", "sandbox",
            "--die-with-parent",
            "--new-session",
            "--ro-bind", str(self.rootfs), "/",
            *self._dev_mounts(),
            "--proc", "/proc",
            "--bind", str(folder / "testbed"), "/testbed",
            "--bind", str(folder / "tmp"), "/tmp",
            "--bind", str(folder / "home"), "/home/swe",
            *(["--ro-bind", str(self.deps), DEPS_MOUNT] if self.deps is not None else []),
            "--chdir", "/testbed",
            "--clearenv",
            "--setenv", "PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "--setenv", "HOME", "/home/swe",
            "--setenv", "LANG", "C.UTF-8",
            "--setenv", "PYTHONDONTWRITEBYTECODE", "1",
            "--setenv", "PYTHONPATH", self.pythonpath,
            *become_user,
        ]  # fmt: skip

    def _limits_prefix(self) -> str:
        """``ulimit`` (a bash builtin: no extra process) setting soft and hard limits, so the
        unprivileged command cannot raise them again."""
        lim = self.limits
        limits = f"-f {lim.file_bytes // 1024} -n 1024"
        if not self.cgroup.active:
            # Without a cgroup, rlimits are what we have (per process / per user).
            limits += f" -v {lim.memory_bytes // 1024}"
            if os.geteuid() != 0:
                limits += f" -u {lim.pids}"
        return f"ulimit {limits}\n"

    def run(
        self, command: str, timeout: float, head_bytes: int = 5000, tail_bytes: int = 5000
    ) -> CommandResult:
        """One ``bwrap`` per command, as lean as a bare call: no wrapper processes and no
        ``preexec_fn`` (which forces a full ``fork`` of this process). The host keeps the
        head and tail of the output as it streams and enforces the timeout; when the command
        ends, the PID namespace ends and takes whatever it left running with it.

        With a cgroup, every process of the command is born inside it: started by a thread
        that lives in the cgroup (v1, :class:`_CgroupSpawner`), or (v2) bwrap waits
        (``--block-fd``) until the sandbox's first process (``--info-fd`` names it) is moved
        in.
        """
        if self._closed:
            raise EnvBackendError("the bubblewrap sandbox is closed; reset the env")
        if not (self.folder / "testbed").is_dir():
            raise EnvBackendError(f"the sandbox folder {self.folder} is gone; reset the env")
        gate: tuple[int, int, int, int] | None = None
        extra: list[str] = []
        if self.cgroup.active and self._spawner is None:
            info_read, info_write = os.pipe()
            block_read, block_write = os.pipe()
            gate = (info_read, info_write, block_read, block_write)
            extra = ["--info-fd", str(info_write), "--block-fd", str(block_read)]
        argv = self._bwrap_argv(extra) + ["bash", "-c", self._limits_prefix() + command]
        oom_before = self.cgroup.oom_kills()
        started = time.monotonic()
        spawn = {
            "args": argv,
            "stdin": subprocess.DEVNULL,
            "stdout": subprocess.PIPE,
            "stderr": subprocess.STDOUT,
            "start_new_session": True,
            "pass_fds": (gate[1], gate[2]) if gate else (),
        }
        try:
            proc = self._spawner.popen(**spawn) if self._spawner else subprocess.Popen(**spawn)
        except BaseException:
            if gate:
                for fd in gate:
                    os.close(fd)
            raise
        if gate:
            self._admit(*gate)
        assert proc.stdout is not None
        collected = _collect_output(proc, started + timeout, head_bytes, tail_bytes)
        code = proc.wait()
        timed_out = collected.deadline_passed
        if code < 0:  # bwrap itself died of a signal: ours at the deadline
            code = 124 if timed_out else 128 - code
        if not timed_out and code == 1 and collected.text.startswith("bwrap:"):
            raise EnvBackendError(
                f"bubblewrap failed to start the sandbox: {collected.text.strip()}"
            )
        if timed_out:
            code = 124
        oom_after = self.cgroup.oom_kills()
        signal_number = code - 128 if not timed_out and 128 < code <= 128 + 64 else None
        return CommandResult(
            returncode=code,
            output=collected.text,
            timed_out=timed_out,
            cut_bytes=collected.cut,
            out_of_memory=oom_before is not None and (oom_after or 0) > oom_before,
            signal=signal_number,
        )

    def _admit(self, info_read: int, info_write: int, block_read: int, block_write: int) -> None:
        """Move the sandbox's first process into the cgroup, then let it go on."""
        os.close(info_write)
        os.close(block_read)
        try:
            # Only the sandbox's first process: every process of the command descends from it
            # (bwrap itself just waits outside; each move costs the kernel a lock round).
            child = _read_child_pid(info_read)
            if child:
                self.cgroup.add(child)
        finally:
            os.close(info_read)
            with contextlib.suppress(OSError):  # bwrap may have failed already
                os.write(block_write, b"go")
            os.close(block_write)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        Sandbox._live.discard(self)
        spawner = getattr(self, "_spawner", None)
        if spawner is not None:
            spawner.stop()
        cgroup = getattr(self, "cgroup", None)
        if cgroup is not None:
            cgroup.remove()
        _remove_episode_folder(self.folder)


atexit.register(Sandbox.close_all)
