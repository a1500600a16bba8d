"""``return_freed_memory``: freed large buffers go back to the system (a training run's heap
otherwise grows with fragments of freed tensors; the trainer sets it when it starts)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

#: Frees 300 MiB of 1 MiB blocks, each followed by a small block that stays alive (as a
#: training step's tensors sit among long-lived objects), and prints the resident MiB before
#: and after. The first freed 1 MiB block is what makes glibc raise its threshold.
SCRIPT = """
import sys
if sys.argv[1] == "fix":
    from comprl_gym.utils import return_freed_memory
    assert return_freed_memory()
def rss():
    return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) // 1024
first = bytes(1 << 20); del first
big, small = [], []
for _ in range(300):
    big.append(b"x" * (1 << 20))
    small.append(b"y" * 2048)
before = rss()
del big
print(before, rss())
"""


def resident(mode: str) -> tuple[int, int]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, env=env, check=True
    )
    before, after = map(int, out.stdout.split())
    return before, after


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")
def test_freed_tensor_sized_blocks_leave_the_process():
    before, after = resident("fix")
    assert before - after >= 250  # of the 300 MiB freed
    # without it glibc keeps most of them (on this machine's glibc about 210 of 300 MiB)
    plain_before, plain_after = resident("plain")
    assert plain_before - plain_after < before - after


def test_a_users_own_setting_stands(monkeypatch):
    from comprl_gym.utils import return_freed_memory

    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    assert return_freed_memory() is False
