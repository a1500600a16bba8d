"""comprl/ALFWorld-v0 on the official json_2.1.1 games (valid_seen + valid_unseen).

The games live beside the clone (``../shared/data/alfworld``; CI puts ``shared/`` there) or
under ``$COMPRL_SHARED_DATA``. They are required: a missing folder fails with a message.
"""

from __future__ import annotations

import json
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import gymnasium as gym
import pytest

import comprl_gym  # noqa: F401 - registers the ids
from comprl_gym.envs.alfworld import ALFWorldEnv
from comprl_gym.envs.alfworld.data import TASK_TYPES, collect_games, load_game
from comprl_gym.envs.alfworld.expert import ALFWorldExpert


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory, shared_data: Path) -> Path:
    path = shared_data / "alfworld"
    cache = tmp_path_factory.mktemp("comprl-cache")
    with pytest.MonkeyPatch.context() as patch:  # cold compiled-game cache, as in CI
        patch.setenv("COMPRL_GYM_CACHE", str(cache))
        yield path


def test_official_splits_load_with_alfworlds_filter(data_dir):
    seen = collect_games(data_dir / "json_2.1.1" / "valid_seen", TASK_TYPES)
    unseen = collect_games(data_dir / "json_2.1.1" / "valid_unseen", TASK_TYPES)
    assert (len(seen), len(unseen)) == (140, 134)
    assert not any("movable" in r.task_id or "Sliced" in r.task_id for r in seen + unseen)
    env = ALFWorldEnv(split="valid_unseen", data_dir=data_dir)
    assert env.data_source == "official" and env.num_games == 134
    env = gym.make("comprl/ALFWorld-PickTwoObjAndPlace-v0", split="valid_seen", data_dir=data_dir)
    assert env.unwrapped.num_games == sum(r.task_type == "pick_two_obj_and_place" for r in seen)


def test_task_sentence_is_the_datasets_own(data_dir):
    env = ALFWorldEnv(split="valid_unseen", data_dir=data_dir)
    obs, info = env.reset(seed=0)
    record = env.unwrapped.game
    original = json.loads(record.game_file.read_text())["grammar"]
    assert f"Your task is to: {info['task']}." in original
    assert info["task_id"] == "valid_unseen/" + str(
        record.game_file.parent.relative_to(data_dir / "json_2.1.1" / "valid_unseen")
    )


# ---- identical to alfworld's AlfredTWEnv -------------------------------------------------------
def _alfred_tw_env(game_dir: Path):
    from alfworld.agents.environment.alfred_tw_env import AlfredTWEnv

    config = {
        "env": {
            "goal_desc_human_anns_prob": 0.0,
            "task_types": [1, 2, 3, 4, 5, 6],
            "domain_randomization": False,
            "expert_type": "planner",
        },
        "dataset": {
            "data_path": str(game_dir),
            "eval_id_data_path": str(game_dir),
            "eval_ood_data_path": str(game_dir),
            "num_train_games": -1,
            "num_eval_games": -1,
        },
        "general": {"training_method": "dagger"},
        "dagger": {"training": {"max_nb_steps_per_episode": 100}},
    }
    return AlfredTWEnv(config, train_eval="eval_out_of_distribution").init_env(batch_size=1)


@pytest.mark.slow
@pytest.mark.parametrize(
    "task_type", ["look_at_obj_in_light", "pick_heat_then_place_in_recep", "pick_two_obj_and_place"]
)
def test_text_and_commands_identical_to_alfred_tw_env(data_dir, tmp_path, task_type):
    env = ALFWorldEnv(
        split="valid_unseen", data_dir=data_dir, task_types=(task_type,), max_steps=100
    )
    obs, info = env.reset(seed=1)
    # The same game for AlfredTWEnv: the json_2.1.1 file made loadable as NOTES.md describes
    # (package domain, grammar with the task), written to a copy; the user's file is untouched.
    game_data, traj = load_game(env.game)
    game_dir = tmp_path / "valid_unseen" / env.game.game_file.parent.parent.name / "trial_0"
    game_dir.mkdir(parents=True)
    (game_dir / "game.tw-pddl").write_text(json.dumps(game_data))
    (game_dir / "traj_data.json").write_text(json.dumps(traj))
    upstream = _alfred_tw_env(tmp_path)
    try:
        up_obs, up_infos = upstream.reset()
        assert obs == up_obs[0]
        assert info["admissible_actions"] == up_infos["admissible_commands"][0]
        expert = ALFWorldExpert(env)
        expert.reset(info["task"], info)
        commands = ["inventory", "jump around", "look"]
        while True:
            command = commands.pop(0) if commands else expert.act(obs, info)
            obs, reward, terminated, truncated, info = env.step(command)
            up_obs, up_scores, up_dones, up_infos = upstream.step([command])
            assert obs == up_obs[0], command
            assert info["admissible_actions"] == up_infos["admissible_commands"][0], command
            assert info["won"] == bool(up_infos["won"][0])
            if command == "jump around":
                assert obs == "Nothing happens." and info["invalid_action"]
            if terminated or truncated:
                break
        assert info["won"] and up_dones[0]
    finally:
        upstream.close()


# ---- the expert wins all 274 -------------------------------------------------------------------
_ENVS: dict[str, ALFWorldEnv] = {}


def _play_official(split: str, data_dir: str, position: int) -> tuple[str, bool, int]:
    env = _ENVS.get(split)
    if env is None:
        env = _ENVS[split] = ALFWorldEnv(split=split, data_dir=data_dir, max_steps=50)
    obs, info = env.reset(seed=position)
    expert = ALFWorldExpert(env)
    expert.reset(info["task"], info)
    steps = 0
    while True:
        obs, reward, terminated, truncated, info = env.step(expert.act(obs, info))
        steps += 1
        if terminated or truncated:
            return info["task_id"], bool(info["won"] and reward == 1.0), steps


@pytest.mark.slow
def test_expert_wins_all_274_official_games(data_dir):
    jobs = [
        (split, str(data_dir), position)
        for split, count in (("valid_seen", 140), ("valid_unseen", 134))
        for position in range(count)
    ]
    with ProcessPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(_play_official, *zip(*jobs), chunksize=8))
    assert len({task_id for task_id, _, _ in results}) == 274
    lost = [task_id for task_id, won, _ in results if not won]
    assert not lost, lost
    assert max(steps for _, _, steps in results) <= 30
