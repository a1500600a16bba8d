"""comprl/ALFWorld-v0 on generated games: the env contract, the generator, the expert.

Every test here runs on generated games in a fresh cache folder, as CI starts cold.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import gymnasium as gym
import pytest

import comprl_gym
from comprl_gym.core import INFO_KEYS, DataError
from comprl_gym.envs.alfworld import ALFWorldEnv
from comprl_gym.envs.alfworld.data import TASK_TYPES, alfred_domain_and_grammar, collect_games
from comprl_gym.envs.alfworld.expert import ALFWorldExpert
from comprl_gym.envs.alfworld.generator import (
    GENERATOR_VERSION,
    UNSEEN_FLOOR_PLANS,
    GeneratedGames,
)

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module", autouse=True)
def fresh_cache(tmp_path_factory):
    """A cold comprl cache for the whole module (generated games are shared by its tests)."""
    path = tmp_path_factory.mktemp("comprl-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("COMPRL_GYM_CACHE", str(path))
        patch.delenv("ALFWORLD_DATA", raising=False)
        yield path


def play_expert(env, seed=None, task_id=None, mode="oracle"):
    options = {"task_id": task_id} if task_id is not None else None
    obs, info = env.reset(seed=seed, options=options)
    expert = ALFWorldExpert(env, mode=mode)
    expert.reset(info["task"], info)
    commands = []
    while True:
        command = expert.act(obs, info)
        assert command in info["admissible_actions"], (command, info["task_id"])
        commands.append(command)
        obs, reward, terminated, truncated, info = env.step(command)
        if terminated or truncated:
            return info, reward, commands


# ---- the 30 generated games the expert must win ----------------------------------------------
def _generate_and_play(split: str, index: int) -> dict:
    """Worker: generate game ``index`` of ``split`` (cold) and let the expert play it."""
    games = GeneratedGames(split)
    record = games.record(index)
    env = ALFWorldEnv(split=split, task_types=(record.task_type,))
    info, reward, commands = play_expert(env, task_id=record.task_id)
    game = json.loads(record.game_file.read_text())
    traj = json.loads(record.traj_file.read_text())
    return {
        "split": split,
        "index": index,
        "task_id": record.task_id,
        "task_type": info["task_type"],
        "won": info["won"],
        "reward": reward,
        "steps": len(commands),
        "folder": str(record.game_file.parent),
        "game_keys": sorted(game),
        "traj_keys": sorted(traj),
        "scene": traj["scene"]["scene_num"],
        "domain_is_package": game["pddl_domain"] == alfred_domain_and_grammar()[0],
        "receptacles": game["pddl_problem"].count(" - receptacle\n"),
        "objects": sum(
            1
            for line in game["pddl_problem"].splitlines()
            if "_bar_" in line and line.endswith(" - object")
        ),
    }


@pytest.fixture(scope="module")
def generated_results(fresh_cache):
    # 30 games: each task type 3 times in train and twice in valid_unseen (type = index % 6)
    jobs = [("train", index) for index in range(18)] + [("valid_unseen", i) for i in range(12)]
    with ProcessPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(_generate_and_play, *zip(*jobs)))
    return results


@pytest.mark.slow
def test_expert_wins_every_generated_game(generated_results):
    assert len(generated_results) >= 30
    assert {r["task_type"] for r in generated_results} == set(TASK_TYPES)
    assert {r["split"] for r in generated_results} == {"train", "valid_unseen"}
    lost = [r["task_id"] for r in generated_results if not (r["won"] and r["reward"] == 1.0)]
    assert not lost, lost


@pytest.mark.slow
def test_generated_games_have_official_structure_and_scale(generated_results):
    for result in generated_results:
        folder = Path(result["folder"])
        assert sorted(p.name for p in folder.iterdir()) == [
            "game.tw-pddl",
            "initial_state.pddl",
            "traj_data.json",
        ]
        assert {"pddl_domain", "grammar", "pddl_problem", "solvable"} <= set(result["game_keys"])
        assert {"task_type", "pddl_params", "scene", "task_id", "turk_annotations", "plan"} <= set(
            result["traj_keys"]
        )
        assert result["domain_is_package"]
        assert 15 <= result["receptacles"] <= 30, result
        assert result["objects"] >= 15, result
        # the folder name follows json_2.1.1: <task_type>-<obj>-<mrecep>-<recep>-<scene>
        assert folder.parent.name.startswith(result["task_type"] + "-")
        assert folder.parent.name.endswith(f"-{result['scene']}")
    mean_objects = sum(r["objects"] for r in generated_results) / len(generated_results)
    assert mean_objects >= 25  # "dozens of objects", like the official rooms (26-66)


@pytest.mark.slow
def test_split_floor_plans_follow_alfred(generated_results):
    unseen = {r["scene"] for r in generated_results if r["split"] == "valid_unseen"}
    train = {r["scene"] for r in generated_results if r["split"] == "train"}
    assert unseen <= set(UNSEEN_FLOOR_PLANS)
    assert not train & set(UNSEEN_FLOOR_PLANS)


@pytest.mark.slow
def test_generated_folder_is_an_official_split(generated_results, fresh_cache):
    """alfworld's own filter (our collect_games) reads a generated split like json_2.1.1."""
    root = fresh_cache / "alfworld" / f"generated-v{GENERATOR_VERSION}" / "valid_unseen"
    records = collect_games(root, TASK_TYPES)
    assert len(records) >= 12
    env = ALFWorldEnv(split="valid_unseen", data_dir=root.parent)
    assert env.unwrapped.data_source == "official"  # loaded through the official path
    obs, info = env.reset(seed=0)
    assert obs.startswith("-= Welcome to TextWorld, ALFRED! =-")


# ---- the env contract ------------------------------------------------------------------------
def test_observation_text_commands_and_info_contract():
    env = gym.make("comprl/ALFWorld-PickAndPlace-v0", split="valid_unseen")
    obs, info = env.reset(seed=0)
    assert set(INFO_KEYS) <= set(info)
    assert info["env_family"] == "alfworld" and info["data_source"] == "generated"
    assert obs.startswith("-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room.")
    assert "Looking quickly around you, you see a " in obs
    assert f"Your task is to: {info['task']}." in obs
    assert info["task_type"] == "pick_and_place_simple"
    assert info["task_id"].startswith(f"generated-v{GENERATOR_VERSION}/valid_unseen/pick_and_place")
    assert {"look", "inventory", "help"} <= set(info["admissible_actions"])
    assert any(a.startswith("go to ") for a in info["admissible_actions"])
    go = next(a for a in info["admissible_actions"] if a.startswith("go to "))
    obs, reward, terminated, truncated, info = env.step(go)
    assert obs.startswith(f"You arrive at {go[6:]}.")
    assert set(INFO_KEYS) <= set(info) and info["step"] == 1 and not info["invalid_action"]


def test_unknown_command_is_nothing_happens_and_invalid():
    env = gym.make("comprl/ALFWorld-v0", split="valid_unseen")
    obs, info = env.reset(seed=1)
    before = info["admissible_actions"]
    obs, reward, terminated, truncated, info = env.step("fly to the moon")
    assert obs == "Nothing happens."
    assert info["invalid_action"] and reward == 0.0 and not terminated
    assert info["admissible_actions"] == before
    # an admissible command in other case/spacing is accepted as that command
    obs, reward, terminated, truncated, info = env.step("  " + before[0].upper() + " ")
    assert not info["invalid_action"] and obs != "Nothing happens."
    obs, reward, terminated, truncated, info = env.step("")
    assert info["invalid_action"]


def test_truncates_at_max_steps():
    env = gym.make("comprl/ALFWorld-v0", split="valid_unseen", max_steps=3)
    env.reset(seed=2)
    for _ in range(3):
        obs, reward, terminated, truncated, info = env.step("look")
    assert truncated and not terminated and info["step"] == 3


def test_check_env():
    from gymnasium.utils.env_checker import check_env

    # two games, so the checker's many seeds do not each generate a new game
    env = ALFWorldEnv(split="valid_unseen", num_games=2)
    check_env(env, skip_render_check=True)
    env = ALFWorldEnv(split="valid_unseen", render_mode="ansi", num_games=2)
    obs, _ = env.reset(seed=0)
    assert env.render() == obs


def test_seed_picks_game_deterministically_and_task_id_option():
    env = gym.make("comprl/ALFWorld-v0", split="valid_unseen")
    first = env.reset(seed=3)
    again = env.reset(seed=3)
    assert first == again
    other = env.reset(seed=4)
    assert other[1]["task_id"] != first[1]["task_id"]
    by_id = env.reset(options={"task_id": first[1]["task_id"]})
    assert by_id == first


def test_determinism_across_processes(tmp_path):
    """Seed 1 yields the same game, text and commands in a new process with a cold cache."""
    script = textwrap.dedent(
        """
        import hashlib, json, sys
        import gymnasium as gym
        import comprl_gym
        env = gym.make("comprl/ALFWorld-v0", split="valid_unseen")
        obs, info = env.reset(seed=1)
        obs2, *_ , info2 = env.step(info["admissible_actions"][0])
        game = open(info["gamefile"], "rb").read()
        print(json.dumps([obs, info["admissible_actions"], info["task_id"], obs2,
                          hashlib.sha256(game).hexdigest()]))
        """
    )
    env_vars = dict(os.environ, COMPRL_GYM_CACHE=str(tmp_path / "other-cache"))
    out = subprocess.run(
        [sys.executable, "-c", script],
        env=env_vars,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    theirs = json.loads(out.stdout.strip().splitlines()[-1])
    env = gym.make("comprl/ALFWorld-v0", split="valid_unseen")
    obs, info = env.reset(seed=1)
    obs2, *_, info2 = env.step(info["admissible_actions"][0])
    game = Path(info["gamefile"]).read_bytes()
    assert theirs == [
        obs,
        info["admissible_actions"],
        info["task_id"],
        obs2,
        hashlib.sha256(game).hexdigest(),
    ]


def test_sync_vector_env():
    envs = gym.vector.SyncVectorEnv(
        [lambda: gym.make("comprl/ALFWorld-v0", split="valid_unseen") for _ in range(2)]
    )
    obs, infos = envs.reset(seed=[0, 1])
    assert len(obs) == 2 and all(o.startswith("-= Welcome") for o in obs)
    actions = [infos["admissible_actions"][i][0] for i in range(2)]
    obs, rewards, terminated, truncated, infos = envs.step(actions)
    assert list(infos["invalid_action"]) == [False, False]
    envs.close()


def test_async_vector_env():
    envs = gym.vector.AsyncVectorEnv(
        [lambda: gym.make("comprl/ALFWorld-v0", split="valid_unseen") for _ in range(2)]
    )
    obs, infos = envs.reset(seed=[0, 1])
    assert all(o.startswith("-= Welcome to TextWorld, ALFRED! =-") for o in obs)
    obs, rewards, terminated, truncated, infos = envs.step(["look", "fly"])
    assert list(infos["invalid_action"]) == [False, True]
    assert obs[1] == "Nothing happens."
    envs.close()


def test_planner_expert_mode_wins():
    env = gym.make("comprl/ALFWorld-LookAtObjInLight-v0", split="valid_unseen")
    info, reward, commands = play_expert(env, seed=0, mode="planner")
    assert info["won"] and reward == 1.0


# ---- bad input -------------------------------------------------------------------------------
def test_empty_data_dir_falls_back_to_generated_and_says_so(tmp_path, caplog):
    with caplog.at_level("WARNING"):
        env = ALFWorldEnv(split="valid_unseen", data_dir=tmp_path)
    assert env.data_source == "generated"
    assert "alfworld-download" in caplog.text and str(tmp_path) in caplog.text
    obs, info = env.reset(seed=0)
    assert info["data_source"] == "generated"


def _copy_game(record, dest: Path) -> Path:
    folder = dest / "valid_unseen" / "pick_and_place_simple-X-None-Y-10" / "trial_T0"
    folder.mkdir(parents=True)
    (folder / "traj_data.json").write_bytes(record.traj_file.read_bytes())
    (folder / "game.tw-pddl").write_bytes(record.game_file.read_bytes())
    return folder


def test_corrupt_game_file_raises_data_error_naming_it(tmp_path):
    record = GeneratedGames("valid_unseen").record(0)
    folder = _copy_game(record, tmp_path)
    game_file = folder / "game.tw-pddl"
    game_file.write_text(game_file.read_text()[:5000])  # truncated download
    env = ALFWorldEnv(split="valid_unseen", data_dir=tmp_path)
    assert env.data_source == "official"
    with pytest.raises(DataError) as error:
        env.reset(seed=0)
    assert str(game_file) in str(error.value) and "not valid JSON" in str(error.value)
    assert game_file.read_text()  # the user's file is left as it was


def test_game_without_problem_raises_data_error(tmp_path):
    record = GeneratedGames("valid_unseen").record(0)
    folder = _copy_game(record, tmp_path)
    game = json.loads((folder / "game.tw-pddl").read_text())
    del game["pddl_problem"]
    (folder / "game.tw-pddl").write_text(json.dumps(game))
    env = ALFWorldEnv(split="valid_unseen", data_dir=tmp_path)
    with pytest.raises(DataError, match="pddl_problem"):
        env.reset(seed=0)


def test_bad_arguments_are_configuration_errors():
    with pytest.raises(comprl_gym.core.ConfigurationError):
        ALFWorldEnv(split="test")
    with pytest.raises(comprl_gym.core.ConfigurationError):
        ALFWorldEnv(task_types=("pick_three_obj",))
