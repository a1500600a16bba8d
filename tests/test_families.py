"""Family specs: the built-in families read from them, a new family is one folder and one line,
and listing the families keeps ``import comprl_gym`` light."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import gymnasium as gym
import pytest

from comprl_gym.agents.prompts import GENERIC_GRAMMAR, PromptConfig, system_prompt
from comprl_gym.core import ConfigurationError
from comprl_gym.evaluation.leaderboard import build_leaderboard
from comprl_gym.families import FAMILY_MODULES, EnvEntry, FamilySpec, family_spec, family_specs
from comprl_gym.lessons.prompts import extractor_system_prompt
from comprl_gym.registration import ENV_TABLE, add_family

ROOT = Path(__file__).resolve().parents[1]

#: Heavy optional packages that ``import comprl_gym`` must not pull in.
HEAVY = ("torch", "vllm", "swebench", "spacy", "nle", "minihack", "textworld", "jinja2", "bm25s")

TOY_PACKAGE = '''
"""A toy family kept outside comprl_gym: call a coin."""

from comprl_gym.core import TextEnv, Transition
from comprl_gym.families import EnvEntry, FamilySpec


class CoinEnv(TextEnv):
    env_family = "toycoin"

    def __init__(self, max_steps=3, render_mode=None):
        super().__init__(max_steps, render_mode)

    def _reset_task(self, seed, options):
        self.task, self.task_id = "Call heads.", f"coin-{seed}"
        return "A coin spins in the air.", {}

    def _step_task(self, action):
        if action not in ("heads", "tails"):
            return Transition("Say heads or tails.", invalid_action=True)
        won = action == "heads"
        return Transition(f"It lands: {action}.", float(won), True, won, float(won))

    def admissible_actions(self):
        return ["heads", "tails"]


class CoinExpert:
    def __init__(self, env):
        self.env = env

    def reset(self, task, info):
        pass

    def act(self, observation, info):
        return "heads"


SPEC = FamilySpec(
    name="toycoin",
    label="Toy Coin",
    entries=(EnvEntry("comprl/ToyCoin-v0", "toycoin_family:CoinEnv", "call a coin"),),
    expert="toycoin_family:CoinExpert",
    action_grammar="You call a coin. An action is heads or tails.",
    extractor_focus="You are a coin-calling archivist.",
)
'''

TOY_SCRIPT = """
import json, sys
import gymnasium as gym
from comprl_gym.agents import make_agent
from comprl_gym.agents.prompts import PromptConfig, system_prompt
from comprl_gym.evaluation.eval import EvalConfig, run_eval
from comprl_gym.evaluation.leaderboard import build_leaderboard, leaderboard_markdown
from comprl_gym.lessons.prompts import extractor_system_prompt
from comprl_gym.registration import ENV_TABLE, add_family, markdown_table

out = {"before": "comprl/ToyCoin-v0" in gym.registry}
add_family("toycoin_family")  # the one line that lists the family

out["registered"] = "comprl/ToyCoin-v0" in gym.registry and "comprl/ToyCoin-v0" in ENV_TABLE
out["readme_row"] = "| `comprl/ToyCoin-v0` | toycoin | call a coin |" in markdown_table()
env = gym.make("comprl/ToyCoin-v0")
agent = make_agent("expert", env)
obs, info = env.reset(seed=0)
agent.reset(info["task"], info)
action = agent.act(obs, info)
*_, info = env.step(action)
out["expert"] = [type(agent).__name__, action, info["won"]]
out["system_prompt"] = system_prompt("toycoin", PromptConfig())
out["extractor_prompt"] = extractor_system_prompt("toycoin")
config = EvalConfig(
    env_ids=["comprl/ToyCoin-v0"], agent="expert", episodes=2, out_dir=sys.argv[1], progress=False
)
run_eval(config)
board = build_leaderboard([sys.argv[1]])
out["listed"] = [board["families"], board["labels"], board["rows"][0]["families"]["toycoin"]]
out["markdown_header"] = leaderboard_markdown(board).splitlines()[4]
print(json.dumps(out))
"""


def test_every_builtin_family_is_listed_and_complete():
    specs = family_specs()
    assert list(specs) == ["minihack", "alfworld", "webshop", "swebench", "memory", "ladder"]
    assert [module.rsplit(".", 1)[1] for module in FAMILY_MODULES] == list(specs)
    for name, spec in specs.items():
        assert spec.label and spec.expert and spec.action_grammar and spec.extractor_focus, name
        assert spec.entries and all(entry.family == name for entry in spec.entries)
    # the registry is exactly the union of the specs' ids, in the families' order
    assert list(ENV_TABLE) == [e.env_id for s in specs.values() for e in s.entries]


def test_prompts_read_the_family_specs():
    webshop = family_spec("webshop")
    assert system_prompt("webshop", PromptConfig()).startswith(webshop.action_grammar)
    assert "search[keywords]" in webshop.action_grammar
    assert extractor_system_prompt("minihack").startswith(family_spec("minihack").extractor_focus)
    assert system_prompt("no-such-family", PromptConfig()).startswith(GENERIC_GRAMMAR)
    assert "knowledge archivist" in extractor_system_prompt("no-such-family")


def test_a_spec_refuses_ids_of_another_family():
    stray = EnvEntry(
        "comprl/Stray-v0", "m:C", "an id filed under the wrong family", family="webshop"
    )
    with pytest.raises(ConfigurationError, match="another family"):
        FamilySpec("minihack", "MiniHack", (stray,), "", "", "")


def test_bad_family_modules_are_refused_and_change_nothing(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "no_spec_family.py").write_text("X = 1\n")
    (tmp_path / "second_webshop_family.py").write_text(
        "from comprl_gym.envs.webshop import SPEC as _OURS\n"
        "from dataclasses import replace\n"
        "SPEC = replace(_OURS, label='Another WebShop')\n"
    )
    before = family_specs()
    with pytest.raises(ConfigurationError, match="exports no FamilySpec"):
        add_family("no_spec_family")
    with pytest.raises(ConfigurationError, match="two modules define the env family 'webshop'"):
        add_family("second_webshop_family")
    assert family_specs() == before and family_spec("webshop").label == "WebShop"


def test_a_new_family_is_one_folder_and_one_line(tmp_path):
    """A toy family from a package outside comprl_gym reaches the registry, the expert agent,
    both prompts, the README table and the leaderboard."""
    (tmp_path / "toycoin_family").mkdir()
    (tmp_path / "toycoin_family" / "__init__.py").write_text(textwrap.dedent(TOY_PACKAGE))
    script = tmp_path / "check_toy.py"
    script.write_text(TOY_SCRIPT)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "runs")],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["before"] is False and out["registered"] and out["readme_row"]
    assert out["expert"] == ["CoinExpert", "heads", True]
    assert out["system_prompt"].startswith("You call a coin. An action is heads or tails.")
    assert out["extractor_prompt"].startswith("You are a coin-calling archivist.")
    families, labels, toy = out["listed"]
    assert families == ["toycoin"] and labels == {"toycoin": "Toy Coin"}
    assert toy["mean"] == 1.0 and toy["n"] == 2  # the expert wins both episodes
    assert "| Toy Coin |" in out["markdown_header"]
    # Where the family is not listed (this process), its results keep their column.
    unlisted = build_leaderboard([tmp_path / "runs"])
    assert unlisted["families"] == ["toycoin"] and unlisted["labels"] == {"toycoin": "toycoin"}
    assert unlisted["rows"][0]["families"]["toycoin"]["mean"] == 1.0


def test_import_comprl_gym_stays_light():
    """Listing the families imports no engine: entry points and experts are strings."""
    code = (
        "import sys, gymnasium as gym, comprl_gym\n"
        "from comprl_gym.families import family_specs\n"
        "family_specs()\n"
        "assert 'comprl/SWEBench-v0' in gym.registry\n"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "", f"import comprl_gym imported {done.stdout.strip()}"


def test_family_packages_export_their_env_classes_lazily():
    from comprl_gym.envs import webshop

    assert webshop.WebShopEnv.env_family == "webshop"
    assert gym.spec("comprl/WebShop-v0").entry_point == "comprl_gym.envs.webshop:WebShopEnv"
    with pytest.raises(AttributeError, match="NoSuchThing"):
        webshop.NoSuchThing  # noqa: B018


# ---- what a family tells evaluation: suite content, data, validation, lesson verdicts --------
HOOKS = ("suite_content", "missing_data")


def test_every_hook_a_builtin_family_names_is_a_function_of_that_family():
    from comprl_gym.utils import load_object

    for name, spec in family_specs().items():
        for hook in HOOKS:
            where = getattr(spec, hook)
            if where:
                assert where.startswith(f"comprl_gym.envs.{name}."), (name, hook, where)
                assert callable(load_object(where)), (name, hook, where)
    # What every built-in family's suites hash beyond the first observations.
    assert {n: s.suite_engines for n, s in family_specs().items()} == {
        "minihack": ("minihack", "nle"),
        "alfworld": ("alfworld", "textworld"),
        "webshop": ("bm25s", "spacy"),
        "swebench": ("swebench",),
        "memory": ("minihack", "nle"),
        "ladder": (),  # pure Python: its code is the whole of what it plays
    }


class _Coin:
    """A made-up env whose first observation names its seed's side, and that says when it
    is closed."""

    def __init__(self, sides):
        self.sides, self.closed = sides, False

    def reset(self, seed):
        return f"The coin shows {self.sides[seed]}.", {
            "task": "Call it.",
            "task_id": f"coin/{seed}",
        }

    def close(self):
        self.closed = True


def test_a_family_without_suite_hooks_is_hashed_by_its_first_observations():
    spec = FamilySpec("toycoin", "Toy Coin", (), "", "", "")
    made = []

    def make_env(sides=("heads", "tails")):
        made.append(_Coin(sides))
        return made[-1]

    content = spec.content_of([0, 1], {}, make_env)
    assert list(content) == ["first_observations"] and len(content["first_observations"]) == 64
    assert made[-1].closed
    assert spec.content_of([0, 1], {}, make_env) == content  # the same game, the same hash
    flipped = spec.content_of([0, 1], {}, lambda: make_env(("tails", "heads")))
    assert flipped != content  # another first observation, another hash
    assert spec.data_missing({"data_dir": "/nowhere"}) == ""


def test_alfworld_names_the_official_games_it_misses(tmp_path):
    spec = family_spec("alfworld")
    missing = spec.data_missing({"split": "valid_unseen", "data_dir": str(tmp_path)})
    assert missing.startswith("ALFWorld's official valid_unseen games, which are not here")
    (tmp_path / "json_2.1.1" / "valid_unseen").mkdir(parents=True)
    assert spec.data_missing({"split": "valid_unseen", "data_dir": str(tmp_path)}) == ""


def test_validation_profiles_come_from_the_family_specs():
    minihack, swebench = family_spec("minihack"), family_spec("swebench")
    assert minihack.validation_for("comprl/MiniHack-Room-5x5-v0").seeds_vary is False
    assert minihack.validation_for("comprl/MiniHack-Room-Random-5x5-v0").seeds_vary is True
    assert minihack.validation_for("comprl/MiniHack-Room-Ultimate-15x15-v0").expert_floor == 0.5
    assert swebench.validation_for("comprl/SWEBench-v0").noop_actions == ("submit",)
    memory = family_spec("memory").validation
    answer = memory.solution_texts(None, {"task_id": "fork/vault-of-marrow"})
    assert answer == ["In the Vault of Marrow the staircase down is at the end of the west branch."]


def test_verdicts_are_counted_only_for_a_family_that_can_judge():
    from comprl_gym.families import verdict_counts

    assert verdict_counts(family_spec("memory"), []) == {
        "right": 0,
        "wrong": 0,
        "both": 0,
        "neither": 0,
        "no_task": 0,
    }
    with pytest.raises(ConfigurationError, match="family 'webshop' has no lesson judge"):
        verdict_counts(family_spec("webshop"), ["Search by brand."])
    assert family_spec("webshop").judge("Search by brand.") is None
    # A judge that answers outside the verdicts is named, not counted somewhere.
    memory = family_spec("memory")
    sloppy = replace(memory, lessons=replace(memory.lessons, judge=_sloppy_judge))
    with pytest.raises(ConfigurationError, match="lesson judge answered 'maybe'"):
        verdict_counts(sloppy, ["anything"])


def _sloppy_judge(text):
    from comprl_gym.lessons.core import LessonVerdict

    return LessonVerdict(task_id=1, verdict="maybe")
