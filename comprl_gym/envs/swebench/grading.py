"""Grade a patch the way SWE-bench does, with the ``swebench`` package's own parsers.

Pinned API: swebench 4.1.x (``MAP_REPO_TO_PARSER``, ``MAP_REPO_VERSION_TO_SPECS``,
``make_test_spec``, ``get_eval_report``, ``get_eval_tests_report``,
``get_resolution_status``). Steps: apply the model patch to a pristine ``/testbed`` in a fresh
sandbox (``git apply``, then ``patch --fuzz=5`` as the harness does), reset the test files,
apply the test patch, run the tests between SWE-bench's start/end markers, parse the log.

Repositories SWE-bench knows use their official eval script and ``get_eval_report``; others
(the embedded suite, your own) run ``pytest -rA`` on the files the test patch touches and are
parsed by swebench's ``parse_log_pytest``.

Example:
    >>> from comprl_gym.envs.swebench.grading import patched_files
    >>> patched_files("diff --git a/tests/test_x.py b/tests/test_x.py\\n")
    ['tests/test_x.py']
"""

from __future__ import annotations

import base64
import functools
import re
import shlex
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from comprl_gym.envs.swebench.instances import TestbedEnv
from comprl_gym.envs.swebench.sandbox.base import Sandbox

_DIFF_FILE = re.compile(r"^diff --git a/(\S+) b/", re.MULTILINE)
_APPLY = (
    "git apply -v /tmp/comprl-model.patch || patch --batch --fuzz=5 -p1 -i /tmp/comprl-model.patch"
)


@functools.cache
def sb() -> SimpleNamespace:
    """The swebench 4.1 names we use, imported on first use (``import swebench`` takes ~5 s:
    it pulls in datasets, pandas and modal)."""
    from swebench.harness import constants, grading
    from swebench.harness.log_parsers.python import parse_log_pytest
    from swebench.harness.test_spec.test_spec import make_test_spec

    names = {
        name: getattr(constants, name)
        for name in (
            "APPLY_PATCH_FAIL", "END_TEST_OUTPUT", "FAIL_TO_PASS", "KEY_INSTANCE_ID",
            "KEY_MODEL", "KEY_PREDICTION", "MAP_REPO_VERSION_TO_SPECS", "PASS_TO_PASS",
            "RESET_FAILED", "START_TEST_OUTPUT", "TESTS_ERROR", "TESTS_TIMEOUT",
            "ResolvedStatus",
        )
    }  # fmt: skip
    return SimpleNamespace(
        **names,
        get_eval_report=grading.get_eval_report,
        get_eval_tests_report=grading.get_eval_tests_report,
        get_resolution_status=grading.get_resolution_status,
        parse_log_pytest=parse_log_pytest,
        make_test_spec=make_test_spec,
    )


def patched_files(test_patch: str) -> list[str]:
    """Files a patch touches (in order, without repeats)."""
    return list(dict.fromkeys(_DIFF_FILE.findall(test_patch)))


def known_to_swebench(instance: dict[str, Any]) -> bool:
    """True when swebench has an official test spec for the instance's repo and version."""
    return instance.get("version", "") in sb().MAP_REPO_VERSION_TO_SPECS.get(instance["repo"], {})


def pytest_eval_script(instance: dict[str, Any]) -> str:
    """An eval script in SWE-bench's shape for repositories swebench has no spec for."""
    files = " ".join(shlex.quote(f) for f in patched_files(instance["test_patch"]))
    base = shlex.quote(instance["base_commit"])
    args = "".join(f" {shlex.quote(a)}" for a in TestbedEnv.of(instance).pytest_args)
    return f"""cd /testbed
for f in {files}; do
  git checkout -q {base} -- "$f" 2>/dev/null || rm -f "$f"
done
git apply -v /tmp/comprl-test.patch || {{ echo "{sb().RESET_FAILED}"; exit 1; }}
echo "{sb().START_TEST_OUTPUT}"
python3 -m pytest -rA -p no:cacheprovider --color=no{args} {files}
echo "{sb().END_TEST_OUTPUT}"
"""


@dataclass
class GradeReport:
    """The verdict on one patch.

    Attributes:
        resolved: SWE-bench's FULL resolution (every FAIL_TO_PASS and PASS_TO_PASS passes).
        status: ``RESOLVED_FULL``, ``RESOLVED_PARTIAL`` or ``RESOLVED_NO``.
        patch_applied: the model patch applied and the tests ran.
        tests_status: swebench's report: FAIL_TO_PASS/PASS_TO_PASS -> success/failure lists.
        test_log: the eval script's output (cut to its tail).
        patch: the graded patch.
    """

    resolved: bool
    status: str
    patch_applied: bool
    tests_status: dict[str, Any] = field(default_factory=dict)
    test_log: str = ""
    patch: str = ""

    def as_info(self) -> dict[str, Any]:
        return {
            "resolved": self.resolved,
            "resolution_status": self.status,
            "patch_applied": self.patch_applied,
            "tests_status": self.tests_status,
            "test_log": self.test_log[-20000:],
        }


def _status_from_log(instance: dict[str, Any], log: str) -> tuple[dict[str, str], bool]:
    """swebench's ``get_logs_eval`` for a repo swebench has no parser entry for."""
    if any(
        code in log
        for code in (sb().APPLY_PATCH_FAIL, sb().RESET_FAILED, sb().TESTS_ERROR, sb().TESTS_TIMEOUT)
    ):
        return {}, False
    if sb().START_TEST_OUTPUT not in log or sb().END_TEST_OUTPUT not in log:
        return {}, False
    section = log.split(sb().START_TEST_OUTPUT)[1].split(sb().END_TEST_OUTPUT)[0]
    return sb().parse_log_pytest(section, None), True


def grade_log(instance: dict[str, Any], log: str, patch: str) -> GradeReport:
    """Turn an eval log into a :class:`GradeReport` using swebench's grading functions."""
    if known_to_swebench(instance):
        spec = sb().make_test_spec(instance)
        with tempfile.TemporaryDirectory() as tmp:
            log_path = Path(tmp) / "test_output.txt"
            log_path.write_text(log)
            prediction = {
                sb().KEY_INSTANCE_ID: instance["instance_id"],
                sb().KEY_MODEL: "comprl-gym",
                sb().KEY_PREDICTION: patch,
            }
            report = sb().get_eval_report(spec, prediction, str(log_path), True)[
                instance["instance_id"]
            ]
        tests_status = report.get("tests_status", {})
        status = (
            sb().get_resolution_status(tests_status)
            if tests_status
            else sb().ResolvedStatus.NO.value
        )
        return GradeReport(
            resolved=bool(report["resolved"]),
            status=status,
            patch_applied=bool(report["patch_successfully_applied"]),
            tests_status=tests_status,
            test_log=log,
            patch=patch,
        )
    status_map, applied = _status_from_log(instance, log)
    if not applied:
        return GradeReport(False, sb().ResolvedStatus.NO.value, False, {}, log, patch)
    reference = {
        sb().KEY_INSTANCE_ID: instance["instance_id"],
        sb().FAIL_TO_PASS: instance["FAIL_TO_PASS"],
        sb().PASS_TO_PASS: instance["PASS_TO_PASS"],
    }
    tests_status = sb().get_eval_tests_report(status_map, reference)
    status = sb().get_resolution_status(tests_status)
    return GradeReport(
        resolved=status == sb().ResolvedStatus.FULL.value,
        status=status,
        patch_applied=True,
        tests_status=tests_status,
        test_log=log,
        patch=patch,
    )


def diff_of(sandbox: Sandbox, instance: dict[str, Any], timeout: float = 120) -> str:
    """The working tree's changes against the base commit, new files included."""
    command = (
        "git add -A >/dev/null 2>&1; "
        f"git -c core.fileMode=false diff --cached --binary {shlex.quote(instance['base_commit'])}"
    )
    result = sandbox.run(command, timeout, head_bytes=64 << 20, tail_bytes=0)
    if result.returncode != 0:
        return ""
    return result.output


#: Files up to this many base64 characters travel inside the grading command itself (one
#: sandbox call); larger ones are written first in pieces (an argument may hold 128 KiB).
_INLINE_BASE64 = 90_000


def evaluate(sandbox: Sandbox, instance: dict[str, Any], patch: str, timeout: float) -> GradeReport:
    """Apply ``patch`` and the test patch in a fresh ``sandbox``, run the tests, grade.

    Everything runs as one script in one sandbox call: stage the files, apply the model patch
    (``git apply``, then ``patch --fuzz=5``), then the eval script.
    """
    if known_to_swebench(instance):
        script = sb().make_test_spec(instance).eval_script
        files = {"/tmp/comprl-model.patch": patch, "/tmp/comprl-eval.sh": script}
    else:
        files = {
            "/tmp/comprl-model.patch": patch,
            "/tmp/comprl-test.patch": instance["test_patch"],
            "/tmp/comprl-eval.sh": pytest_eval_script(instance),
        }
    staging = []
    for path, text in files.items():
        encoded = base64.b64encode(text.encode()).decode()
        if len(encoded) <= _INLINE_BASE64:
            staging.append(f"printf %s '{encoded}' | base64 -d > {path}")
        else:
            sandbox.write_file(path, text.encode())
    apply_fail = sb().APPLY_PATCH_FAIL
    command = "\n".join(
        [
            *staging,
            "cd /testbed",
            "if [ -s /tmp/comprl-model.patch ]; then",
            f"  {{ {_APPLY}; }} || {{ echo '{apply_fail}'; exit 1; }}",
            "fi",
            "bash /tmp/comprl-eval.sh",
        ]
    )
    result = sandbox.run(command, timeout, head_bytes=1 << 20, tail_bytes=1 << 20)
    log = result.output
    if result.timed_out:
        log += f"\n{sb().TESTS_TIMEOUT} after {timeout:.0f} s"
    return grade_log(instance, log, patch)
