"""What a benchmark must know about SWE-bench: what decides what a suite plays (the family's
:attr:`~comprl_gym.families.FamilySpec.suite_content`) and the answer no observation may show
(its validation profile's ``solution_texts``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from comprl_gym.utils import files_sha256

#: Added lines of a gold patch shorter than this are too generic to count as a leak.
MIN_PATCH_LINE_CHARS = 24


def suite_content(
    seeds: list[int], env_kwargs: dict[str, Any], make_env: Callable[[], Any]
) -> dict[str, Any]:
    """The task manifest (``suite="real"``: commit shas, tests, problem statements) or the
    offline instances and their repository bundles; no env is made (a sandbox costs seconds
    and the manifest decides every task)."""
    from comprl_gym.envs.swebench.real_suite import MANIFEST

    tasks = Path(MANIFEST).parent
    if env_kwargs.get("suite") == "real":
        return {"manifest": files_sha256([Path(MANIFEST)])}
    return {
        "instances": files_sha256(
            sorted(tasks.glob("instances.json")) + sorted(tasks.glob("*.bundle"))
        )
    }


def solution_texts(env: Any, info: dict[str, Any]) -> list[str]:
    """The gold patch, and each of its added lines that is specific enough to be the fix."""
    instance = getattr(env.unwrapped, "current_instance", None) or {}
    patch = str(instance.get("patch") or "")
    if not patch:
        return []
    added = [
        line[1:].strip()
        for line in patch.splitlines()
        if line.startswith("+") and not line.startswith("+++")
    ]
    statement = str(instance.get("problem_statement", ""))
    # A line the issue itself quotes is the text, not the answer.
    return [patch] + [
        line for line in added if len(line) >= MIN_PATCH_LINE_CHARS and line not in statement
    ]
