"""``comprl/SWEBench-v0``: repair a repository with shell commands in a sandbox, graded like
SWE-bench.

Action grammar (one action per step):

* a shell command, bare (``grep -n def textkit/strings.py``) or as the single fenced block of
  the message (````` ```bash ... ``` `````; also ``sh``/``shell`` or no language). It runs
  with ``bash -c`` in ``/testbed`` as an unprivileged user, with no network, in a fresh shell
  (``cd`` and variables do not carry over), and is killed after ``command_timeout`` seconds.
* ``submit`` (alone, or as the only line of the block; mini-swe-agent's
  ``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`` is accepted too): the working tree's diff
  against the base commit is graded in a fresh sandbox and the episode ends.

Observation after a command: ``<returncode>N</returncode>\\n<output>\\n...\\n</output>``, long
output cut to its head and tail with a note of how many bytes were cut, preceded by a
``<warning>`` when the command did not simply exit: it timed out, the sandbox ran out of memory
and the kernel killed it, or a signal killed it (``info`` says which: ``timed_out``,
``out_of_memory``, ``signal``). Like every comprl observation, control characters are shown
escaped (:func:`comprl_gym.core.printable_text`). At the step limit the changes are graded as
if submitted (the episode is then truncated).

Example (needs Docker or bubblewrap and the base image; ~3 min the first time):
    >>> import gymnasium as gym, comprl_gym
    >>> env = gym.make("comprl/SWEBench-v0", sandbox="bubblewrap")
    >>> obs, info = env.reset(seed=0)
    >>> obs, reward, terminated, truncated, info = env.step("```bash\\ngit status\\n```")
    >>> obs.startswith("<returncode>0</returncode>")
    True
    >>> env.step("submit")[1]
    0.0
    >>> env.close()
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from comprl_gym.core import ConfigurationError, EnvBackendError, TextEnv, Transition
from comprl_gym.envs.swebench import images
from comprl_gym.envs.swebench.grading import GradeReport, diff_of, evaluate
from comprl_gym.envs.swebench.instances import (
    TestbedEnv,
    checkout_testbed,
    embedded_repo_source,
    load_instances,
)
from comprl_gym.envs.swebench.real_suite import load_real_suite
from comprl_gym.envs.swebench.sandbox import bwrap as bwrap_mod
from comprl_gym.envs.swebench.sandbox import docker as docker_mod
from comprl_gym.envs.swebench.sandbox.base import Sandbox, SandboxLimits
from comprl_gym.utils import cache_dir

logger = logging.getLogger(__name__)

SandboxKind = Literal["auto", "docker", "bubblewrap"]
_FENCE = re.compile(r"```[ \t]*(?:bash|sh|shell|console)?[ \t]*\n(.*?)```", re.DOTALL)
_SUBMIT = {"submit", "echo complete_task_and_submit_final_output"}


@dataclass
class SWEBenchConfig:
    """Settings of :class:`SWEBenchEnv`.

    Attributes:
        suite: ``embedded`` (three small repositories shipped with the package) or ``real``
            (tasks from real upstream fixes, derived from the ``swe-repos`` bundles in
            ``data_dir``). Ignored when ``dataset`` is given.
        data_dir: the ``swe-repos`` folder of the real suite (default ``$COMPRL_SWE_REPOS``).
        dataset: ``None`` (the suite), a JSON/JSONL file, or a Hugging Face dataset
            name present in the local ``datasets`` cache.
        instance_ids: restrict to these instances (in this order).
        split: dataset split for Hugging Face names.
        sandbox: ``docker``, ``bubblewrap`` or ``auto`` (Docker when an engine answers).
        command_timeout: seconds one command may run before it is killed.
        grading_timeout: seconds the test run at grading may take.
        output_head: bytes of long output kept from the start.
        output_tail: bytes of long output kept from the end.
        limits: memory, processes, CPU and disk of each sandbox.
        image_disk_budget_gb: instance images (built or pulled) beyond this size are pruned,
            oldest use first.
        pull: official SWE-bench images of instances we cannot build: ``missing`` pulls those
            not present, ``always`` pulls before each use (updates), ``never`` only uses
            local ones.
        image_namespace: the registry namespace of official images (Docker Hub's
            ``swebench``; a mirror such as ``registry.example:5000/swebench``).
        pull_retries: retries (exponential backoff) on rate limits and network errors.
        repo_sources: ``{"owner/name": path}`` of local git repositories or bundles, used to
            build images for instances that are not embedded and have no image.
    """

    suite: Literal["embedded", "real"] = "embedded"
    data_dir: str | None = None
    dataset: str | None = None
    instance_ids: list[str] | None = None
    split: str = "test"
    sandbox: SandboxKind = "auto"
    command_timeout: float = 60.0
    grading_timeout: float = 300.0
    output_head: int = 5000
    output_tail: int = 5000
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    image_disk_budget_gb: float = 20.0
    pull: Literal["never", "missing", "always"] = "missing"
    image_namespace: str = "swebench"
    pull_retries: int = 4
    repo_sources: dict[str, str] = field(default_factory=dict)


def resolve_sandbox_kind(kind: str) -> str:
    """``auto`` -> ``docker`` when an engine answers, else ``bubblewrap`` when it works."""
    if kind not in ("auto", "docker", "bubblewrap"):
        raise ConfigurationError(f"sandbox must be 'auto', 'docker' or 'bubblewrap', got {kind!r}")
    if kind != "auto":
        return kind
    if docker_mod.docker_available():
        return "docker"
    if bwrap_mod.bwrap_available():
        logger.info("no Docker engine answers; using the bubblewrap sandbox")
        return "bubblewrap"
    raise EnvBackendError(
        "neither a Docker engine nor bubblewrap is available: run scripts/services.sh start "
        "or apt-get install -y bubblewrap"
    )


class SandboxFactory:
    """Makes sandboxes of one kind for instances: builds and reuses images / checkouts."""

    def __init__(self, kind: str, config: SWEBenchConfig):
        self.kind = kind
        self.config = config
        self._client: Any = None
        if kind == "docker":
            self._client = docker_mod.docker_client()
            docker_mod.remove_orphans(self._client)
        else:
            bwrap_mod.remove_orphans()

    def _source(self, instance: dict[str, Any]) -> Path:
        repo = instance["repo"]
        if repo in self.config.repo_sources:
            return Path(self.config.repo_sources[repo])
        embedded = embedded_repo_source(repo)
        if embedded is None:
            raise ConfigurationError(
                f"no image {images.instance_image_name(instance['instance_id'])} and no local "
                f"source for {repo}: pull or build the official SWE-bench image, or pass "
                f"repo_sources={{{repo!r}: '/path/to/clone'}}"
            )
        return embedded

    def testbed(self, instance: dict[str, Any]) -> Path:
        """A cached checkout of the instance's repository at its base commit."""
        root = cache_dir("swebench", "testbeds")
        # "h1": checkouts without later history (HISTORY_SCRUB); older ones are not reused.
        key = f"{instance['instance_id']}-{instance['base_commit'][:12]}-h1"
        generated = TestbedEnv.of(instance).generated_files
        if generated:  # a different set of generated files is a different checkout
            key += (
                "-" + hashlib.sha256(json.dumps(generated, sort_keys=True).encode()).hexdigest()[:8]
            )
        target = root / key
        if (target / ".git").exists():
            return target
        partial = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=root))
        try:
            checkout_testbed(self._source(instance), instance["base_commit"], partial / "tb")
            TestbedEnv.of(instance).write_generated_files(partial / "tb")
            # Another process may have won the race; its checkout is as good.
            with contextlib.suppress(OSError):
                (partial / "tb").rename(target)
        finally:
            shutil.rmtree(partial, ignore_errors=True)
        return target

    def _buildable(self, instance: dict[str, Any]) -> bool:
        repo = instance["repo"]
        return repo in self.config.repo_sources or embedded_repo_source(repo) is not None

    def image(self, instance: dict[str, Any]) -> str:
        """An image for the instance: a local official one, a pulled one (instances we cannot
        build, per ``pull``), or our own build."""
        client, cfg = self._client, self.config
        buildable = self._buildable(instance)
        if cfg.pull == "always" and not buildable:
            return self._pull(instance)
        for name in images.official_image_names(instance["instance_id"], cfg.image_namespace):
            if images.foreign_image_exists(client, name):
                images.touch_image(name)
                return name
        if cfg.pull == "missing" and not buildable:
            return self._pull(instance)
        env = TestbedEnv.of(instance)
        name = images.build_instance_image(
            client,
            instance["instance_id"],
            self.testbed(instance),
            testbed_key=f"{instance['repo']}@{instance['base_commit']}-h1",
            requirements=env.requirements,
            pythonpath=env.pythonpath_value(),
        )
        return self._keep(name)

    def _pull(self, instance: dict[str, Any]) -> str:
        name = images.registry_image_name(instance["instance_id"], self.config.image_namespace)
        images.pull_image(self._client, name, retries=self.config.pull_retries)
        return self._keep(name)

    def _keep(self, name: str) -> str:
        images.touch_image(name)
        budget = int(self.config.image_disk_budget_gb * (1 << 30))
        images.prune_images(self._client, budget, keep=(name,))
        return name

    def make(self, instance: dict[str, Any]) -> Sandbox:
        if self.kind == "docker":
            return docker_mod.DockerSandbox(self._client, self.image(instance), self.config.limits)
        rootfs = images.build_rootfs()
        env = TestbedEnv.of(instance)
        deps = images.build_requirements(env.requirements) if env.requirements else None
        return bwrap_mod.BubblewrapSandbox(
            rootfs, self.testbed(instance), self.config.limits, deps, env.pythonpath_value()
        )


class SWEBenchEnv(TextEnv):
    """SWE-bench instances as a gymnasium text env with a sandbox per episode.

    See the module docstring for the action grammar and observation format.
    """

    env_family: ClassVar[str] = "swebench"

    def __init__(
        self,
        dataset: str | None = None,
        suite: Literal["embedded", "real"] = "embedded",
        data_dir: str | None = None,
        instance_ids: list[str] | None = None,
        sandbox: SandboxKind = "auto",
        max_steps: int = 30,
        command_timeout: float = 60.0,
        render_mode: str | None = None,
        **config: Any,
    ):
        super().__init__(max_steps=max_steps, render_mode=render_mode)
        try:
            self.config = SWEBenchConfig(
                suite=suite,
                data_dir=None if data_dir is None else str(data_dir),
                dataset=dataset,
                instance_ids=instance_ids,
                sandbox=sandbox,
                command_timeout=command_timeout,
                **config,
            )
        except TypeError as exc:
            raise ConfigurationError(f"SWEBenchEnv: {exc}") from exc
        if command_timeout <= 0:
            raise ConfigurationError(f"command_timeout must be positive, got {command_timeout}")
        if self.config.pull not in ("never", "missing", "always"):
            raise ConfigurationError(
                f"pull must be 'never', 'missing' or 'always', got {self.config.pull!r}"
            )
        if suite not in ("embedded", "real"):
            raise ConfigurationError(f"suite must be 'embedded' or 'real', got {suite!r}")
        if suite == "real" and dataset is None:
            real, sources = load_real_suite(data_dir)
            self.config.repo_sources = {**sources, **self.config.repo_sources}
            self.instances = load_instances(real, instance_ids, self.config.split)
        else:
            self.instances = load_instances(dataset, instance_ids, self.config.split)
        self._by_id = {inst["instance_id"]: inst for inst in self.instances}
        self.sandbox_kind = resolve_sandbox_kind(sandbox)
        # Made now, not at the first reset: it removes sandboxes orphaned by killed runs.
        self._factory: SandboxFactory | None = SandboxFactory(self.sandbox_kind, self.config)
        self._sandbox: Sandbox | None = None
        self.current_instance: dict[str, Any] | None = None
        self.last_report: GradeReport | None = None

    @property
    def factory(self) -> SandboxFactory:
        if self._factory is None:
            self._factory = SandboxFactory(self.sandbox_kind, self.config)
        return self._factory

    # ---- TextEnv hooks ---------------------------------------------------------------------
    def admissible_actions(self) -> list[str] | None:
        return None

    def _reset_task(self, seed: int, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self._close_sandbox()
        task_id = options.get("task_id")
        if task_id is not None:
            if task_id not in self._by_id:
                raise ConfigurationError(f"unknown task_id {task_id!r}")
            instance = self._by_id[task_id]
        else:
            instance = self.instances[seed % len(self.instances)]
        self.current_instance = instance
        self.last_report = None
        self.task_id = instance["instance_id"]
        self.task = instance["problem_statement"]
        self._sandbox = self.factory.make(instance)
        return self._intro(instance), self._extra()

    def _intro(self, instance: dict[str, Any]) -> str:
        cfg = self.config
        return (
            f"You are fixing an issue in the repository {instance['repo']}, checked out at "
            f"/testbed (commit {instance['base_commit'][:12]}).\n\n"
            f"<issue>\n{instance['problem_statement'].strip()}\n</issue>\n\n"
            "Each step, send ONE shell command: bare, or as the only ```bash fenced block of "
            "your message. It runs with bash -c in /testbed as an unprivileged user without "
            "network; every command starts a fresh shell (cd and variables do not carry over) "
            f"and is killed after {cfg.command_timeout:.0f} s. Output longer than "
            f"{cfg.output_head + cfg.output_tail} bytes is cut in the middle. When the issue is "
            "fixed, send `submit`: your changes (git diff against the base commit) are graded "
            f"by running the project's tests. You have {self.max_steps} steps."
        )

    def _extra(self, **more: Any) -> dict[str, Any]:
        instance = self.current_instance or {}
        return {
            "instance_id": instance.get("instance_id", ""),
            "repo": instance.get("repo", ""),
            "sandbox": self.sandbox_kind,
            **more,
        }

    def _parse(self, action: str) -> tuple[str | None, str | None]:
        """(command, None) or (None, reason it is invalid)."""
        text = action.strip()
        blocks = _FENCE.findall(text)
        if len(blocks) > 1:
            return None, f"send exactly one ```bash block per step, got {len(blocks)}"
        if blocks:
            command = blocks[0].strip()
        elif "```" in text:
            return None, "the ``` fenced block is not closed"
        else:
            command = text
        if not command:
            return None, "the command is empty"
        return command, None

    def _step_task(self, action: str) -> Transition:
        if self._sandbox is None or self.current_instance is None:
            if self._episode_over or self.current_instance is not None:
                return self._refuse(action, "the episode is over; call reset()")
            return self._refuse(action, "call reset() first")
        command, problem = self._parse(action)
        if command is None:
            return self._refuse(action, f"{problem}; or send `submit`")
        if command.lower() in _SUBMIT:
            return self._grade(reason="submitted")
        try:
            result = self._sandbox.run(
                command,
                self.config.command_timeout,
                self.config.output_head,
                self.config.output_tail,
            )
        except EnvBackendError:
            self._close_sandbox()
            raise
        observation = ""
        warning = result.warning(self.config.command_timeout, self.config.limits.memory_bytes)
        if warning:
            observation = f"<warning>{warning}</warning>\n"
        observation += f"<returncode>{result.returncode}</returncode>\n<output>\n{result.output}"
        observation += (
            "" if result.output.endswith("\n") or not result.output else "\n"
        ) + "</output>"
        extra = self._extra(
            returncode=result.returncode,
            timed_out=result.timed_out,
            out_of_memory=result.out_of_memory,
            signal=result.signal,
        )
        if self._step_count + 1 >= self.max_steps:
            graded = self._grade(reason="step limit reached")
            graded.observation = observation + "\n\n" + graded.observation
            graded.terminated = False  # TextEnv marks the episode truncated
            graded.info.update(extra)
            return graded
        return Transition(observation=observation, info=extra)

    def _grade(self, reason: str) -> Transition:
        assert self._sandbox is not None and self.current_instance is not None
        instance = self.current_instance
        try:
            patch = diff_of(self._sandbox, instance)
        except EnvBackendError:
            self._close_sandbox()
            raise
        self._close_sandbox()
        grader = self.factory.make(instance)
        try:
            report = evaluate(grader, instance, patch, self.config.grading_timeout)
        finally:
            grader.close()
        self.last_report = report
        reward = 1.0 if report.resolved else 0.0
        tests = report.tests_status
        f2p = tests.get("FAIL_TO_PASS", {})
        p2p = tests.get("PASS_TO_PASS", {})
        summary = (
            f"Submitted ({reason}). Resolution: {report.status}. "
            f"FAIL_TO_PASS passing {len(f2p.get('success', []))}/"
            f"{len(instance['FAIL_TO_PASS'])}, PASS_TO_PASS passing "
            f"{len(p2p.get('success', []))}/{len(instance['PASS_TO_PASS'])}."
        )
        if not report.patch_applied:
            summary += " The patch did not apply or the tests did not run."
        return Transition(
            observation=summary,
            reward=reward,
            terminated=True,
            won=report.resolved,
            score=reward,
            info=self._extra(report=report.as_info(), patch=patch),
        )

    # ---- lifecycle -------------------------------------------------------------------------
    def _close_sandbox(self) -> None:
        sandbox, self._sandbox = self._sandbox, None
        if sandbox is not None:
            sandbox.close()

    @property
    def sandbox(self) -> Sandbox | None:
        """The running episode's sandbox (``None`` between episodes)."""
        return self._sandbox

    def close(self) -> None:
        self._close_sandbox()
        super().close()
