"""SWE-bench as a text env: instances, Docker and bubblewrap sandboxes, swebench grading.

Example:
    >>> from comprl_gym.envs.swebench import load_instances
    >>> len(load_instances()) >= 12
    True
"""

from comprl_gym.envs.swebench import benchmarking
from comprl_gym.families import EnvEntry, FamilySpec, ValidationProfile, lazy_exports

SPEC = FamilySpec(
    name="swebench",
    label="SWE-bench",
    entries=(
        EnvEntry(
            "comprl/SWEBench-v0",
            "comprl_gym.envs.swebench:SWEBenchEnv",
            "SWE-bench style repository repair in a Docker or bubblewrap sandbox",
            {},
        ),
    ),
    expert="comprl_gym.envs.swebench.expert:SWEBenchExpert",
    action_grammar=(
        "You fix a bug in a software repository inside a sandbox. An action is one shell "
        "command (run in the repository root), whose output you then see. Read the code, edit "
        "files (for example with sed, or python -c, or cat <<'EOF' > file), run the tests, and "
        "when the fix is complete answer with the action 'submit'."
    ),
    extractor_focus=(
        "You are a software-repair archivist for SWE-bench style tasks (a repository, an issue, "
        "a test suite, a shell). Extract reusable debugging tactics: locating the code the issue "
        "names, reproducing the failure, making minimal edits, and running the relevant tests "
        "before submitting."
    ),
    suite_content="comprl_gym.envs.swebench.benchmarking:suite_content",
    suite_engines=("swebench",),
    # Doing nothing is submitting at once, the "empty answer".
    validation=ValidationProfile(
        noop_actions=("submit",), solution_texts=benchmarking.solution_texts
    ),
)

# The env reaches for Docker, bubblewrap and swebench's grading: import it on first use.
__getattr__ = lazy_exports(
    __name__,
    {
        "SWEBenchConfig": "comprl_gym.envs.swebench.env",
        "SWEBenchEnv": "comprl_gym.envs.swebench.env",
        "load_instances": "comprl_gym.envs.swebench.instances",
    },
)

__all__ = ["SPEC", "SWEBenchConfig", "SWEBenchEnv", "load_instances"]
