"""What every sandbox offers: run one shell command with a timeout and a bounded output.

The Docker sandbox runs each command through :data:`COMMAND_WRAPPER` inside the sandbox: a fresh
``bash -c`` in ``/testbed`` under ``timeout`` (which kills the command's whole process group),
its output captured into a file on a small tmpfs of its own (``/run``, so that a full
``/testbed`` or ``/tmp`` does not swallow it), then cut to head and tail. Output
never streams through the host unbounded, and background processes the command leaves behind
cannot hold the call open. The bubblewrap sandbox needs no wrapper: its host process reads
the output as it streams (keeping head and tail), and the command's PID namespace dies with it.
"""

from __future__ import annotations

import base64
import contextlib
import signal
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from comprl_gym.core import EnvBackendError

#: The marker the wrapper prints where it cut the middle of a long output.
CUT_MARKER = "<<<comprl-gym-cut "

#: The marker of the wrapper's last line: the command's exit status and how long it ran (ms).
STATUS_MARKER = "<<<comprl-gym-status "

#: ``bash -c WRAPPER wrapper COMMAND TIMEOUT HEAD TAIL``: run COMMAND, print at most HEAD + TAIL
#: bytes of its output (with a cut marker naming how many bytes were left out), then a status
#: line (exit status, milliseconds run), and exit with the command's status. ``timeout`` leads
#: its own process group; the group is killed when the command returns, so background
#: processes do not outlive it (except those that start a new session: the sandbox kills those
#: after a kill or a timeout). No status line means the wrapper itself was killed.
COMMAND_WRAPPER = r"""
out=$(mktemp /run/comprl/out.XXXXXX 2>/dev/null || mktemp /run/comprl-out.XXXXXX 2>/dev/null ||
  mktemp /tmp/.comprl-out.XXXXXX 2>/dev/null) || out=""
cd /testbed 2>/dev/null || cd /
start=${EPOCHREALTIME/[.,]/}
if [ -z "$out" ]; then
  echo "[comprl-gym: no space left for the output of this command; it is not shown]"
  timeout -k 2 "$2" bash -c "$1" </dev/null >/dev/null 2>&1
  rc=$?
  end=${EPOCHREALTIME/[.,]/}
  ran_ms=-1; [ -n "$start" ] && ran_ms=$(( (end - start) / 1000 ))
  printf '\n<<<comprl-gym-status %s %s>>>' $rc $ran_ms
  exit $rc
fi
timeout -k 2 "$2" bash -c "$1" </dev/null >"$out" 2>&1 &
group=$!
# (wait's own "Killed" notice is the wrapper's business, not the command's output)
wait $group 2>/dev/null
rc=$?
end=${EPOCHREALTIME/[.,]/}
# bash < 5 has no EPOCHREALTIME: -1 says the time is unknown.
ran_ms=-1; [ -n "$start" ] && ran_ms=$(( (end - start) / 1000 ))
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
printf '\n<<<comprl-gym-status %s %s>>>' $rc $ran_ms
exit $rc
"""


@dataclass
class CommandResult:
    """One command's outcome, and how it ended.

    Attributes:
        returncode: the command's exit status (128 + N when signal N killed it).
        output: stdout and stderr interleaved, possibly cut in the middle.
        timed_out: the per-command timeout stopped it.
        cut_bytes: how many bytes of output were left out (0 when all is shown).
        out_of_memory: while it ran, the sandbox reached its memory limit and the kernel
            killed one of its processes.
        signal: the signal that killed the command (or the shell collecting its output) when
            it did not exit by itself and did not time out; ``None`` otherwise.
        output_lost: the shell collecting the output was killed (by ``kill -1``, say), so
            the output is lost.
    """

    returncode: int
    output: str
    timed_out: bool = False
    cut_bytes: int = 0
    out_of_memory: bool = False
    signal: int | None = None
    output_lost: bool = False

    @classmethod
    def from_wrapper(
        cls,
        raw: bytes,
        exit_code: int,
        timeout: int,
        out_of_memory: bool = False,
        deadline_passed: bool = False,
    ) -> CommandResult:
        """Read what :data:`COMMAND_WRAPPER` printed and exited with.

        ``timeout`` is the whole seconds the wrapper was given; ``out_of_memory`` whether the
        sandbox's OOM-kill count rose during the call; ``deadline_passed`` whether the host
        had to kill a sandbox that did not return. Exit status 124 or 137 is a timeout only
        when the command ran for the whole timeout (``exit 124`` or ``kill -9 $$`` are not).

        Example:
            >>> r = CommandResult.from_wrapper(b"hi\\n\\n<<<comprl-gym-status 137 104>>>", 137, 60)
            >>> r.output, r.timed_out, r.signal
            ('hi\\n', False, 9)
            >>> CommandResult.from_wrapper(b"\\n<<<comprl-gym-status 124 60012>>>", 124, 60).timed_out
            True
            >>> CommandResult.from_wrapper(b"", 137, 60).output_lost
            True
        """
        text = raw.decode("utf-8", errors="replace")
        status = text.rfind("\n" + STATUS_MARKER)
        fields = text[status + 1 + len(STATUS_MARKER) :].removesuffix(">>>").split()
        reported = status >= 0 and len(fields) == 2 and all(f.lstrip("-").isdigit() for f in fields)
        ran_ms = -1
        if reported:
            text = text[:status]
            exit_code, ran_ms = int(fields[0]), int(fields[1])
        text, cut = split_cut(text)
        # ran_ms is -1 where the shell cannot tell time (bash < 5): trust the exit status.
        ran_all = ran_ms < 0 or ran_ms >= 1000 * timeout - 50
        timed_out = deadline_passed or (reported and exit_code in (124, 137) and ran_all)
        signal = None
        if not timed_out and 128 < exit_code <= 128 + 64:
            signal = exit_code - 128
        return cls(
            returncode=exit_code,
            output=text,
            timed_out=timed_out,
            cut_bytes=cut,
            out_of_memory=out_of_memory,
            signal=signal,
            output_lost=not reported and signal is not None,
        )

    def warning(self, timeout: float, memory_bytes: int) -> str:
        """What the agent is told about how the command ended; empty when it just exited.

        Example:
            >>> CommandResult(137, "", out_of_memory=True, signal=9).warning(60, 1 << 30)
            'The sandbox ran out of memory (limit 1024 MiB) and the kernel killed the command (SIGKILL).'
            >>> CommandResult(137, "", signal=9, output_lost=True).warning(60, 1 << 30)[:47]
            'The command was killed by signal 9 (SIGKILL). T'
        """
        notes = []
        if self.out_of_memory:
            victim = "the command" if self.signal == 9 else "a process of the command"
            notes.append(
                f"The sandbox ran out of memory (limit {memory_bytes >> 20} MiB) and the kernel "
                f"killed {victim} (SIGKILL)."
            )
        if self.timed_out:
            notes.append(
                f"The command timed out after {timeout:.0f} s and was killed, with everything "
                "it started."
            )
        elif self.signal is not None and not self.out_of_memory:
            notes.append(
                f"The command was killed by signal {self.signal} ({_signal_name(self.signal)})."
            )
        if self.output_lost:
            notes.append(
                "The shell collecting its output was killed too (as `kill -1` does), so its "
                "output is lost; what it left running was stopped."
            )
        return " ".join(notes)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def read_oom_kills(cgroup: Path) -> int | None:
    """How many processes the kernel killed for memory in this memory cgroup (v1 or v2).

    ``None`` when the folder has no such counter (not a memory cgroup, or unreadable).
    """
    for name in ("memory.events", "memory.oom_control"):
        try:
            lines = (cgroup / name).read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
    return None


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
    return raw[:start] + cut_note(cut) + raw[end + 4 :], cut


def cut_note(cut: int) -> str:
    """What the agent sees where ``cut`` bytes were left out of the middle of an output."""
    return f"\n[... {cut} bytes of output cut ...]\n"


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
