"""Sandboxes for SWE-bench episodes: a Docker container or a bubblewrap jail per episode."""

from comprl_gym.envs.swebench.sandbox.base import CommandResult, Sandbox, SandboxLimits
from comprl_gym.envs.swebench.sandbox.bwrap import BubblewrapSandbox, bwrap_available
from comprl_gym.envs.swebench.sandbox.docker import DockerSandbox, docker_available

__all__ = [
    "BubblewrapSandbox",
    "CommandResult",
    "DockerSandbox",
    "Sandbox",
    "SandboxLimits",
    "bwrap_available",
    "docker_available",
]
