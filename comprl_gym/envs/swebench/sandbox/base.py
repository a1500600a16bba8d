"""What every sandbox offers: run one shell command with a timeout and a bounded output.

Both sandboxes run each command through :data:`COMMAND_WRAPPER` inside the sandbox: a fresh
``bash -c`` in ``/testbed`` under ``timeout`` (which kills the command's whole process group),
its output captured into a file on a small tmpfs of its own (``/run``, so that a full
``/testbed`` or ``/tmp`` does not swallow it), then cut to head and tail. Output
never streams through the host unbounded, and background processes the command leaves behind
cannot hold the call open.
"""

from __future__ import annotations

import base64
import contextlib
import weakref
from dataclasses import dataclass
from typing import ClassVar

from comprl_gym.core import EnvBackendError

#: The marker the wrapper prints where it cut the middle of a long output.
CUT_MARKER = "<<<comprl-gym-cut "

#: ``bash -c WRAPPER wrapper COMMAND TIMEOUT HEAD TAIL``: run COMMAND, print at most HEAD + TAIL
#: bytes of its output (with a cut marker naming how many bytes were left out), exit with its
#: status. 124/137 mean ``timeout`` stopped it. ``timeout`` leads its own process group; the
#: group is killed when the command returns, so background processes do not outlive it
#: (except those that start a new session: the sandbox kills those on timeout).
COMMAND_WRAPPER = r"""
out=$(mktemp /run/comprl/out.XXXXXX 2>/dev/null || mktemp /run/comprl-out.XXXXXX 2>/dev/null ||
  mktemp /tmp/.comprl-out.XXXXXX 2>/dev/null) || out=""
cd /testbed 2>/dev/null || cd /
if [ -z "$out" ]; then
  echo "[comprl-gym: no space left for the output of this command; it is not shown]"
  timeout -k 2 "$2" bash -c "$1" </dev/null >/dev/null 2>&1
  exit $?
fi
timeout -k 2 "$2" bash -c "$1" </dev/null >"$out" 2>&1 &
group=$!
wait $group
rc=$?
# Whatever the command left running in the background (a fork bomb...) dies with it.
kill -KILL -- -$group 2>/dev/null
size=$(stat -c %s "$out" 2>/dev/null || echo 0)
if [ "$size" -gt $(($3 + $4)) ]; then
  head -c "$3" "$out"
  printf '\n<<<comprl-gym-cut %s>>>\n' $((size - $3 - $4))
  tail -c "$4" "$out"
else
  cat "$out"
fi
rm -f "$out"
exit $rc
"""


@dataclass
class CommandResult:
    """One command's outcome.

    Attributes:
        returncode: the command's exit status (124 or 137 when it timed out).
        output: stdout and stderr interleaved, possibly cut in the middle.
        timed_out: the per-command timeout stopped it.
        cut_bytes: how many bytes of output were left out (0 when all is shown).
    """

    returncode: int
    output: str
    timed_out: bool = False
    cut_bytes: int = 0


def split_cut(raw: str) -> tuple[str, int]:
    """Turn the wrapper's cut marker into a readable note; return (text, bytes cut)."""
    start = raw.find("\n" + CUT_MARKER)
    if start < 0:
        return raw, 0
    end = raw.find(">>>\n", start)
    try:
        cut = int(raw[start + 1 + len(CUT_MARKER) : end])
    except ValueError:
        return raw, 0
    note = f"\n[... {cut} bytes of output cut ...]\n"
    return raw[:start] + note + raw[end + 4 :], cut


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one sandbox.

    Attributes:
        memory_bytes: memory limit of everything in the sandbox (tmpfs pages included).
        pids: most processes/threads at once (stops fork bombs).
        cpus: CPU share (1.0 = one core).
        testbed_bytes: size of the writable ``/testbed`` (stops disk fills).
        tmp_bytes: size of the writable ``/tmp`` and home.
        output_bytes: size of the tmpfs that holds one command's output before it is cut.
        file_bytes: largest single file a command may write (RLIMIT_FSIZE).
    """

    memory_bytes: int = 2 << 30
    pids: int = 256
    cpus: float = 1.0
    testbed_bytes: int = 1 << 30
    tmp_bytes: int = 256 << 20
    file_bytes: int = 512 << 20
    output_bytes: int = 64 << 20


class Sandbox:
    """One isolated copy of a repository at ``/testbed``, alive until :meth:`close`."""

    kind: ClassVar[str] = "sandbox"
    _live: ClassVar[weakref.WeakSet[Sandbox]] = weakref.WeakSet()

    def run(
        self, command: str, timeout: float, head_bytes: int = 5000, tail_bytes: int = 5000
    ) -> CommandResult:
        """Run ``command`` with ``bash -c`` in ``/testbed`` as the unprivileged user."""
        raise NotImplementedError

    def close(self) -> None:
        """Remove the sandbox and everything it holds (idempotent)."""
        raise NotImplementedError

    def write_file(self, path: str, data: bytes, timeout: float = 60) -> None:
        """Write ``data`` to ``path`` inside the sandbox (through base64 in small pieces)."""
        encoded = base64.b64encode(data).decode()
        self.run(f": > {path}", timeout)
        for i in range(0, len(encoded), 60000):
            piece = encoded[i : i + 60000]
            result = self.run(f"printf %s '{piece}' | base64 -d >> {path}", timeout)
            if result.returncode != 0:
                raise EnvBackendError(f"writing {path} in the sandbox failed: {result.output}")

    @classmethod
    def close_all(cls) -> None:
        """Close every sandbox still open in this process (registered with atexit)."""
        for sandbox in list(cls._live):
            with contextlib.suppress(Exception):  # best effort at interpreter exit
                sandbox.close()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
