"""SWE-bench in real sandboxes: Docker (through the engine) and bubblewrap.

Docker tests need a running engine (CI starts one with scripts/services.sh). Without one they
fail with a clear message, unless COMPRL_NO_DOCKER=1 says this machine has none.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import require_sandbox as _require

from comprl_gym.core import EnvBackendError
from comprl_gym.envs.swebench import SWEBenchEnv, load_instances
from comprl_gym.envs.swebench.expert import SWEBenchExpert
from comprl_gym.envs.swebench.grading import evaluate
from comprl_gym.envs.swebench.images import LABEL, LABEL_OWNER_PID
from comprl_gym.envs.swebench.sandbox import bwrap as bwrap_mod
from comprl_gym.envs.swebench.sandbox.base import SandboxLimits
from comprl_gym.envs.swebench.sandbox.bwrap import episodes_root

SUITE = load_instances()
KINDS = [pytest.param("docker", marks=pytest.mark.docker), "bubblewrap"]
REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(params=KINDS)
def kind(request) -> str:
    _require(request.param)
    return request.param


def _our_containers(pid: int | None = None) -> list:
    import docker

    client = docker.from_env()
    filters = {"label": [f"{LABEL}=episode"]}
    if pid is not None:
        filters["label"].append(f"{LABEL_OWNER_PID}={pid}")
    return client.containers.list(all=True, filters=filters)


def _episode_folders(pid: int) -> list:
    return list(episodes_root().glob(f"ep-{pid}-*"))


def _leftovers(kind: str, pid: int) -> list:
    return _our_containers(pid) if kind == "docker" else _episode_folders(pid)


def _play(env: SWEBenchEnv, agent, task_id: str) -> tuple[float, dict]:
    obs, info = env.reset(options={"task_id": task_id})
    agent.reset(info["task"], info)
    while True:
        obs, reward, terminated, truncated, info = env.step(agent.act(obs, info))
        if terminated or truncated:
            return reward, info


@pytest.mark.slow
def test_gold_patch_resolves_every_embedded_task(kind):
    env = SWEBenchEnv(sandbox=kind)
    expert = SWEBenchExpert(env)
    try:
        results = {inst["instance_id"]: _play(env, expert, inst["instance_id"]) for inst in SUITE}
    finally:
        env.close()
    unresolved = {k: v[1]["report"]["test_log"][-800:] for k, v in results.items() if v[0] != 1.0}
    assert not unresolved, unresolved
    for _reward, info in results.values():
        assert info["won"] and info["report"]["resolution_status"] == "RESOLVED_FULL"
    assert not _leftovers(kind, os.getpid())


@pytest.mark.slow
def test_empty_and_wrong_patches_resolve_nothing(kind):
    env = SWEBenchEnv(sandbox=kind, max_steps=3)
    try:
        # Empty: submit at once, through the env.
        obs, info = env.reset(options={"task_id": SUITE[0]["instance_id"]})
        obs, reward, terminated, _, info = env.step("submit")
        assert terminated and reward == 0.0 and not info["won"]
        assert info["report"]["resolution_status"] == "RESOLVED_NO"
        # Wrong: the gold patch of another task of the same repository fixes the wrong bug
        # (every task); empty: one task per repository (FAIL_TO_PASS fails at the base commit
        # for every task: build_suite.py measures that).
        first_of_repo = {inst["repo"]: inst["instance_id"] for inst in reversed(SUITE)}
        for inst in SUITE:
            sibling = next(
                o
                for o in SUITE
                if o["repo"] == inst["repo"] and o["instance_id"] != inst["instance_id"]
            )
            patches = [sibling["patch"]]
            if first_of_repo[inst["repo"]] == inst["instance_id"]:
                patches.append("")
            for patch in patches:
                grader = env.factory.make(inst)
                try:
                    report = evaluate(grader, inst, patch, timeout=120)
                finally:
                    grader.close()
                assert not report.resolved, (inst["instance_id"], report.test_log[-500:])
                assert report.tests_status["FAIL_TO_PASS"]["failure"]
    finally:
        env.close()
    assert not _leftovers(kind, os.getpid())


HOSTILE_TIMEOUT = 6


@pytest.mark.slow
def test_hostile_commands_are_contained(kind, tmp_path):
    env = SWEBenchEnv(sandbox=kind, max_steps=40, command_timeout=HOSTILE_TIMEOUT)
    sentinel = tmp_path / "host-file"
    sentinel.write_text("untouched")

    def step(command: str) -> tuple[str, dict, float]:
        started = time.monotonic()
        obs, reward, terminated, truncated, info = env.step(f"```bash\n{command}\n```")
        assert not terminated and not truncated and not info["invalid_action"]
        return obs, info, time.monotonic() - started

    try:
        env.reset(options={"task_id": "comprl-gym__textkit-3"})
        # Network.
        obs, info, _ = step(
            "python3 -c \"import socket; socket.create_connection(('1.1.1.1', 80), timeout=3)\""
        )
        assert info["returncode"] != 0 and "unreachable" in obs.lower()
        # Writes outside the repository, and at the host's files.
        obs, info, _ = step(f"touch /etc/pwned; echo x > /usr/bin/pwned; echo x > {sentinel}")
        assert "Read-only file system" in obs or "No such file or directory" in obs
        assert sentinel.read_text() == "untouched" and not os.path.exists("/usr/bin/pwned")
        # Fork bomb: contained by the pids limit and the timeout; the shell still works after.
        obs, info, took = step(":(){ :|:& };:")
        assert took < HOSTILE_TIMEOUT + 30
        obs, info, _ = step("echo alive-after-bomb")
        assert "alive-after-bomb" in obs
        # Disk fill: one huge file, then many medium ones.
        # On a loaded machine the timeout may stop the writer first: also contained.
        obs, info, _ = step("head -c 3G /dev/zero > big.bin; echo rc=$?")
        assert "File size limit exceeded" in obs or "No space left" in obs or info["timed_out"]
        obs, info, _ = step("stat -c %s big.bin")
        assert int(obs.split("<output>")[1].split()[0]) <= 512 << 20
        obs, info, _ = step("for i in 1 2 3 4; do head -c 500M /dev/zero > f$i.bin || break; done")
        assert "No space left" in obs or "File size limit" in obs or info["timed_out"]
        obs, info, _ = step("du -sb /testbed | cut -f1")
        assert int(obs.split("<output>")[1].split()[0]) <= (1 << 30) + (256 << 20) + (1 << 20)
        obs, info, _ = step("rm -f *.bin && echo cleaned")
        assert "cleaned" in obs
        # Sleep forever, also in the background of a new session.
        obs, info, took = step("sleep 100000")
        assert info["timed_out"] and "timed out" in obs and took < HOSTILE_TIMEOUT + 15
        obs, info, took = step("setsid sleep 100000 & echo started")
        assert "started" in obs and took < HOSTILE_TIMEOUT + 15
        # Megabytes of output are cut to head and tail.
        obs, info, _ = step("yes comprl | head -c 8000000")
        assert "bytes of output cut" in obs and len(obs) < 20000
        # Kill PID 1 (and everything else we may signal).
        obs, info, _ = step("kill -9 1; kill -TERM 1; kill -KILL -1; echo tried")
        obs, info, _ = step("echo still-here")
        assert "still-here" in obs
        # The episode still ends with a normal grading.
        obs, reward, terminated, _, info = env.step("submit")
        assert terminated and info["report"]["patch_applied"] and reward == 0.0
    finally:
        env.close()
    assert not _leftovers(kind, os.getpid())


def test_invalid_actions_and_bad_command(kind):
    env = SWEBenchEnv(sandbox=kind, instance_ids=["comprl-gym__kvconf-1"], command_timeout=10)
    try:
        obs, info = env.reset(seed=0)
        assert info["env_family"] == "swebench" and info["admissible_actions"] is None
        assert "<issue>" in obs and "submit" in obs
        obs, _, _, _, info = env.step("```bash\nls\n```\n```bash\npwd\n```")
        assert info["invalid_action"] and "exactly one" in obs
        obs, _, _, _, info = env.step("```bash\nls")
        assert info["invalid_action"]
        obs, _, _, _, info = env.step("no-such-program --x")
        assert not info["invalid_action"] and info["returncode"] == 127
        assert "<returncode>127</returncode>" in obs
        obs, _, _, _, info = env.step("git log --oneline | wc -l")
        assert "<returncode>0</returncode>" in obs
    finally:
        env.close()
    assert not _leftovers(kind, os.getpid())


def test_dead_sandbox_raises_and_leaves_nothing(kind):
    env = SWEBenchEnv(sandbox=kind, instance_ids=["comprl-gym__kvconf-2"])
    try:
        env.reset(seed=0)
        sandbox = env.unwrapped.sandbox
        if kind == "docker":
            sandbox.container.kill()
        else:
            subprocess.run(["rm", "-rf", str(sandbox.folder / "testbed")], check=True)
        with pytest.raises(EnvBackendError, match="(?i)reset"):
            env.step("echo hi")
        assert not _leftovers(kind, os.getpid())
        # The env recovers on reset.
        env.reset(seed=0)
        assert "ok" in env.step("echo ok")[0]
    finally:
        env.close()
    assert not _leftovers(kind, os.getpid())


def test_orphans_of_a_sigkilled_process_are_removed_at_next_start(kind):
    script = textwrap.dedent(f"""
        import sys, time
        from comprl_gym.envs.swebench import SWEBenchEnv
        env = SWEBenchEnv(sandbox={kind!r}, instance_ids=["comprl-gym__intervals-1"])
        env.reset(seed=0)
        print("ready", flush=True)
        time.sleep(600)
    """)
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        assert _leftovers(kind, child.pid), "the child should hold a sandbox"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert _leftovers(kind, child.pid), "SIGKILL leaves the sandbox behind until the next start"
    SWEBenchEnv(sandbox=kind, instance_ids=["comprl-gym__intervals-1"]).close()
    assert not _leftovers(kind, child.pid)


def test_close_at_interpreter_exit(kind):
    script = textwrap.dedent(f"""
        import os
        from comprl_gym.envs.swebench import SWEBenchEnv
        env = SWEBenchEnv(sandbox={kind!r}, instance_ids=["comprl-gym__intervals-2"])
        env.reset(seed=0)
        print(os.getpid(), flush=True)
        # no close(): the atexit hook must remove the sandbox
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert not _leftovers(kind, int(out.stdout.split()[-1]))


@pytest.mark.docker
def test_docker_container_limits():
    _require("docker")
    env = SWEBenchEnv(sandbox="docker", instance_ids=["comprl-gym__textkit-1"])
    try:
        env.reset(seed=0)
        attrs = env.unwrapped.sandbox.container.attrs["HostConfig"]
        assert attrs["NetworkMode"] == "none" and attrs["PidsLimit"] > 0
        assert attrs["Memory"] > 0 and attrs["NanoCpus"] > 0 and attrs["ReadonlyRootfs"]
        obs = env.step("id -u")[0]
        assert "<output>\n1000" in obs
    finally:
        env.close()


@pytest.mark.docker
def test_images_are_reused_and_pruned_to_the_budget():
    _require("docker")
    from comprl_gym.envs.swebench import images

    env = SWEBenchEnv(sandbox="docker")
    client = env.unwrapped.factory._client
    try:
        kv = [inst for inst in SUITE if inst["repo"] == "comprl-gym/kvconf"][:2]
        names = [env.unwrapped.factory.image(inst) for inst in kv]
        # Two instances at the same commit share one image under two SWE-bench names.
        assert len({client.images.get(name).id for name in names}) == 1
        text = [inst for inst in SUITE if inst["repo"] == "comprl-gym/textkit"][0]
        keep = env.unwrapped.factory.image(text)
        removed = images.prune_images(client, budget_bytes=0, keep=(keep,))
        assert set(names) <= set(removed)
        assert images._image_exists(client, keep)
        assert not any(images._image_exists(client, name) for name in names)
    finally:
        env.close()


def test_gymnasium_env_checker_passes():
    from gymnasium.utils.env_checker import check_env

    env = SWEBenchEnv(sandbox="bubblewrap", instance_ids=["comprl-gym__textkit-1"])
    try:
        check_env(env, skip_render_check=True)
    finally:
        env.close()
    assert not _episode_folders(os.getpid())


def test_gym_make_expert_run_and_grading_at_the_step_limit():
    import gymnasium as gym

    import comprl_gym  # noqa: F401 - registers the ids
    from comprl_gym.agents.base import make_agent
    from comprl_gym.rollouts import run_episode

    env = gym.make("comprl/SWEBench-v0", sandbox="bubblewrap")
    try:
        result = run_episode(env, make_agent("expert", env), seed=5)
        assert result.won and result.total_reward == 1.0 and result.steps == 3
    finally:
        env.close()
    # Two steps: the patch is written and applied but never submitted; the step limit grades it.
    env = SWEBenchEnv(sandbox="bubblewrap", max_steps=2, instance_ids=["comprl-gym__kvconf-4"])
    try:
        expert = SWEBenchExpert(env)
        obs, info = env.reset(seed=0)
        expert.reset(info["task"], info)
        env.step(expert.act(obs, info))
        obs, reward, terminated, truncated, info = env.step(expert.act(obs, info))
        assert truncated and not terminated and reward == 1.0 and "step limit" in obs
        obs, reward, *_, info = env.step("ls")
        assert info["invalid_action"] and "reset" in obs
    finally:
        env.close()


# ---- observations that tell the truth (issue 18) ---------------------------------------------
TRUTH_LIMITS = SandboxLimits(memory_bytes=256 << 20)
TRUTH_TIMEOUT = 3
#: Bytes a hostile or careless command prints: NUL, invalid UTF-8, a clear-screen escape.
GARBAGE_COMMAND = "printf '\\x00\\xff\\xfe garbage \\x1b[2J'"
GARBAGE_SHOWN = "\\x00\ufffd\ufffd garbage \\x1b[2J"


def _truth_env(kind: str) -> SWEBenchEnv:
    return SWEBenchEnv(
        sandbox=kind,
        instance_ids=["comprl-gym__kvconf-1"],
        command_timeout=TRUTH_TIMEOUT,
        limits=TRUTH_LIMITS,
    )


def _run(env: SWEBenchEnv, command: str) -> tuple[str, dict, float]:
    started = time.monotonic()
    obs, _, terminated, truncated, info = env.step(command)
    assert not terminated and not truncated and not info["invalid_action"]
    return obs, info, time.monotonic() - started


def test_observations_say_how_a_command_ended(kind):
    env = _truth_env(kind)
    try:
        env.reset(seed=0)
        # 8 GB in a 256 MiB sandbox: the kernel kills it at once, and the agent is told so.
        obs, info, took = _run(env, "python3 -c 'b = bytearray(8 << 30)'")
        assert info["out_of_memory"] and info["signal"] == 9 and not info["timed_out"], obs
        assert info["returncode"] == 137 and took < TRUTH_TIMEOUT
        assert "ran out of memory (limit 256 MiB)" in obs and "timed out" not in obs
        # A process killed for memory while the command goes on to exit by itself.
        obs, info, _ = _run(env, "python3 -c 'b = bytearray(8 << 30)'; echo went-on")
        assert info["out_of_memory"] and info["returncode"] == 0 and info["signal"] is None
        assert "went-on" in obs and "killed a process of the command" in obs
        if kind == "docker":
            # An engine whose cgroups this host cannot read: Docker's oom event says it.
            env.unwrapped.sandbox._memory_cgroup = None
            obs, info, _ = _run(env, "python3 -c 'b = bytearray(8 << 30)'")
            assert info["out_of_memory"] and "ran out of memory" in obs
        # Killed by a signal: its own, then everyone's (the shell collecting output dies too).
        obs, info, _ = _run(env, "kill -TERM $$")
        assert info["signal"] == 15 and not info["timed_out"] and not info["out_of_memory"]
        assert "killed by signal 15 (SIGTERM)" in obs and "timed out" not in obs
        obs, info, took = _run(env, "kill -9 -1; kill -9 1; echo after")
        if kind == "docker":
            assert info["signal"] == 9 and not info["timed_out"] and not info["out_of_memory"]
            assert "killed by signal 9 (SIGKILL)" in obs and "output is lost" in obs
        else:
            # No wrapper shell to kill: ``kill -1`` spares its caller, and PID 1 (bwrap's
            # init) is not the agent's to signal, so the command goes on and says so.
            assert "after" in obs and info["returncode"] == 0 and info["signal"] is None
        assert "timed out" not in obs and took < TRUTH_TIMEOUT
        assert "alive" in _run(env, "echo alive")[0]
        if kind == "docker":
            # The dead wrapper's output file was removed: only this command's own is there.
            assert "<output>\n1\n" in _run(env, "ls /run/comprl | wc -l")[0]
        # Exit statuses that only look like a timeout, then a real one.
        obs, info, _ = _run(env, "exit 124")
        assert info["returncode"] == 124 and not info["timed_out"] and "<warning>" not in obs
        obs, info, took = _run(env, "sleep 1000")
        assert info["timed_out"] and info["signal"] is None and not info["out_of_memory"]
        assert f"timed out after {TRUTH_TIMEOUT} s" in obs and took >= TRUTH_TIMEOUT
    finally:
        env.close()
    assert not _leftovers(kind, os.getpid())


def test_memory_rlimit_without_a_cgroup_is_reported_as_the_failed_allocation(monkeypatch, tmp_path):
    """Bubblewrap without a writable cgroup tree limits memory by RLIMIT_AS: the allocation
    fails inside the program (nothing is killed), and the observation says just that."""
    monkeypatch.setattr(bwrap_mod, "_CGROUP_V1", tmp_path)  # no cgroup tree here
    env = _truth_env("bubblewrap")
    try:
        env.reset(seed=0)
        assert not env.unwrapped.sandbox.cgroup.active
        obs, info, took = _run(env, "python3 -c 'b = bytearray(8 << 30)'")
        assert info["returncode"] == 1 and "MemoryError" in obs and took < TRUTH_TIMEOUT
        assert not info["timed_out"] and not info["out_of_memory"] and info["signal"] is None
        assert "<warning>" not in obs
    finally:
        env.close()


def test_observations_are_printable_text(kind):
    env = _truth_env(kind)
    try:
        env.reset(seed=0)
        obs, info, _ = _run(env, GARBAGE_COMMAND)
        assert info["returncode"] == 0 and GARBAGE_SHOWN in obs
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", obs), repr(obs)
    finally:
        env.close()


def test_play_shows_the_sanitised_text(kind):
    env_args = [
        "--env-arg",
        f"sandbox={kind}",
        "--env-arg",
        'instance_ids=["comprl-gym__kvconf-1"]',
    ]
    result = subprocess.run(
        [sys.executable, "-m", "comprl_gym.cli", "play", "comprl/SWEBench-v0", *env_args],
        input=f"{GARBAGE_COMMAND}\nquit\n".encode(),
        capture_output=True,
        timeout=300,
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONIOENCODING": "utf-8"},
    )
    assert result.returncode == 0, result.stderr.decode(errors="replace")[-2000:]
    assert GARBAGE_SHOWN.encode() in result.stdout
    assert b"\x00" not in result.stdout and b"\x1b" not in result.stdout


def test_files_keep_their_owners_and_the_agent_is_not_root(kind):
    """Root's files are root's inside, unreadable when root-only; the agent owns its repo."""
    env = _truth_env(kind)
    try:
        env.reset(seed=0)
        obs, info, _ = _run(env, "id -u; id -g; id -G; stat -c '%U:%G %a' /etc/shadow / /usr/bin")
        assert obs.split("<output>\n")[1].split("\n")[:6] == [
            "1000", "1000", "1000", "root:shadow 640", "root:root 755", "root:root 755"
        ]  # fmt: skip
        obs, info, _ = _run(env, "cat /etc/shadow")
        assert info["returncode"] == 1 and "Permission denied" in obs
        obs, info, _ = _run(env, "grep -E '^Cap(Prm|Eff|Amb):' /proc/self/status | cut -f2")
        assert obs.split("<output>\n")[1].split("\n")[:3] == ["0000000000000000"] * 3
        obs, info, _ = _run(env, "touch /testbed/new && stat -c %U:%G /testbed/new /testbed")
        assert obs.split("<output>\n")[1].split("\n")[:2] == ["swe:swe", "swe:swe"]
        obs, info, _ = _run(env, "touch /etc/x /root/x 2>&1; mount -t tmpfs none /mnt")
        assert info["returncode"] != 0 and "/etc/x" in obs and "/root/x" in obs
    finally:
        env.close()
