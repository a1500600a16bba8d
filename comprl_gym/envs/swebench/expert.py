"""The SWE-bench expert: writes the gold patch into the sandbox with shell commands, applies
it with ``git apply``, and submits. It resolves every instance whose gold patch is right.

Example (needs a sandbox):
    import gymnasium as gym, comprl_gym
    from comprl_gym.rollouts import run_episode
    env = gym.make("comprl/SWEBench-v0")
    expert = SWEBenchExpert(env)
"""

from __future__ import annotations

import base64
from typing import Any

#: Base64 characters per command (actions are at most 8192 characters).
CHUNK_CHARS = 6000
PATCH_PATH = "/tmp/gold.patch"


class SWEBenchExpert:
    """An :class:`~comprl_gym.agents.base.Agent` that applies the instance's gold patch."""

    def __init__(self, env: Any):
        self.env = env
        self._plan: list[str] = []

    def reset(self, task: str, info: dict[str, Any]) -> None:
        instance = self.env.unwrapped._by_id[info["task_id"]]
        encoded = base64.b64encode(instance["patch"].encode()).decode()
        pieces = [encoded[i : i + CHUNK_CHARS] for i in range(0, len(encoded), CHUNK_CHARS)]
        self._plan = [
            f"```bash\nprintf %s '{piece}' | base64 -d {'>' if i == 0 else '>>'} {PATCH_PATH}\n```"
            for i, piece in enumerate(pieces)
        ]
        self._plan.append(f"```bash\ngit apply {PATCH_PATH} && git status --short\n```")
        self._plan.append("submit")

    def act(self, observation: str, info: dict[str, Any]) -> str:
        return self._plan.pop(0) if self._plan else "submit"
