"""MiniHack text env: the TextEnv contract on real NetHack, seeding, text, actions, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import comprl_gym
from comprl_gym.core import EnvBackendError
from comprl_gym.registration import ENV_TABLE

MINIHACK_IDS = sorted(env_id for env_id, entry in ENV_TABLE.items() if entry.family == "minihack")
MOVES = ["north", "east", "south", "west", "north-east", "south-east", "south-west", "north-west"]


@pytest.fixture
def room5():
    env = gym.make("comprl/MiniHack-Room-5x5-v0", render_mode="ansi")
    yield env
    env.close()


@pytest.mark.slow
@pytest.mark.parametrize("env_id", MINIHACK_IDS)
def test_check_env_passes_on_every_registered_id(env_id):
    env = gym.make(env_id)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(env.unwrapped, skip_render_check=True)
    obs, info = env.reset(seed=5)
    assert set(comprl_gym.INFO_KEYS) <= set(info)
    assert info["env_family"] == "minihack"
    assert "Allowed actions:" in obs
    env.close()


def test_stairs_direction_and_distance_on_fixed_layout(room5):
    # Room-5x5 is the fixed layout: start in the north-west corner, stairs in the south-east.
    obs, _ = room5.reset(seed=0)
    assert "- staircase down: 4 steps east and 4 steps south" in obs
    obs, *_ = room5.step("east")
    assert "- staircase down: 4 steps south and 3 steps east" in obs
    assert "- staircase up: 1 step west" in obs
    assert "west: staircase up" in obs
    assert "Status: HP" in obs and "turn 2" in obs


def test_reaching_the_stairs_wins_and_terminates(room5):
    room5.reset(seed=0)
    for step in range(4):
        obs, reward, terminated, truncated, info = room5.step("south-east")
        assert terminated == (step == 3)
    assert info["won"] is True and info["score"] == 1.0
    assert reward == pytest.approx(1.0)
    assert info["end_status"] == "TASK_SUCCESSFUL"
    assert "you won" in obs
    # NetHack has quit; the last live view (next to the stairs) stays available to render().
    assert room5.render().splitlines()[3].endswith("@.")


def test_task_step_limit_truncates():
    env = gym.make("comprl/MiniHack-Room-5x5-v0")
    assert env.unwrapped.max_steps == 100  # minihack's own limit for Room-5x5 (size * 20)
    env.close()
    env = gym.make("comprl/MiniHack-Room-5x5-v0", max_steps=3)
    env.reset(seed=0)
    results = [env.step("north") for _ in range(3)]  # walks into rock: no progress
    assert [r[3] for r in results] == [False, False, True]
    assert results[-1][4]["won"] is False and results[-1][4]["score"] == 0.0
    env.close()


def test_observation_modes_and_render(room5):
    obs, _ = room5.reset(seed=0)
    assert "Map (" not in obs
    rendered = room5.render()
    assert rendered.splitlines()[0].startswith("@....") and "Status: HP" in rendered
    both = gym.make("comprl/MiniHack-Room-5x5-v0", observation_mode="text+map")
    text, _ = both.reset(seed=0)
    assert "You see:" in text and "@...." in text and "....>" in text
    only_map = gym.make("comprl/MiniHack-Room-5x5-v0", observation_mode="map")
    text, _ = only_map.reset(seed=0)
    assert "You see:" not in text and "....>" in text and "Allowed actions:" in text
    both.close()
    only_map.close()
    with pytest.raises(comprl_gym.ConfigurationError):
        comprl_gym.envs.minihack.MiniHackTextEnv(observation_mode="pixels")
    with pytest.raises(comprl_gym.ConfigurationError):
        comprl_gym.envs.minihack.MiniHackTextEnv(task="MiniHack-NoSuchTask-v0")


def _next_to_you(observation: str) -> dict[str, str]:
    line = next(x for x in observation.splitlines() if x.startswith("Next to you: "))
    pairs = [part.split(": ", 1) for part in line[len("Next to you: ") :].split("; ")]
    return {where: what for where, what, *_ in (p + [""] for p in pairs) if what}


@pytest.mark.parametrize(
    "env_id", ["comprl/MiniHack-Room-Random-5x5-v0", "comprl/MiniHack-Room-Dark-5x5-v0"]
)
def test_compact_mode_tells_the_same_things_once(env_id):
    # The full text mode is the truth: same seeds and moves, the compact observation keeps
    # every "You see" line and every neighbour that is not room floor, and states the task,
    # the status and the allowed actions with the first observation only.
    full = gym.make(env_id)
    compact = gym.make(env_id, observation_mode="compact")
    moves = ["east", "north", "west", "south-east", "north-east", "south", "east", "east"]
    for seed in (0, 1, 2):
        long_obs, _ = full.reset(seed=seed)
        short_obs, _ = compact.reset(seed=seed)
        assert short_obs.splitlines()[0] == long_obs.splitlines()[0]
        assert short_obs.startswith("Task: ")
        assert "Allowed actions: north, east" in short_obs and "Status: HP" in short_obs
        assert "welcome to NetHack" in long_obs and "welcome to NetHack" not in short_obs
        for step, move in enumerate([None, *moves]):
            if move is not None:
                long_obs, _, done, _, _ = full.step(move)
                short_obs, _, short_done, _, _ = compact.step(move)
                assert done == short_done
                if done:
                    break
                assert not short_obs.startswith("Task:") and "Status:" not in short_obs
                assert "Allowed actions" not in short_obs
            seen = [x for x in long_obs.splitlines() if x.startswith("- ")]
            assert seen == [x for x in short_obs.splitlines() if x.startswith("- ")], step
            unusual = {k: v for k, v in _next_to_you(long_obs).items() if v != "floor of a room"}
            line = next(x for x in short_obs.splitlines() if x.startswith("Next to you: "))
            grouped = [g.split(": ") for g in line[len("Next to you: ") :].split("; ")[:-1]]
            assert {w: what for what, wheres in grouped for w in wheres.split(", ")} == unusual
            assert len({what for what, _ in grouped}) == len(grouped)  # each kind named once
            tail = short_obs.split("Next to you: ")[1].splitlines()[0]
            assert tail.endswith("floor all around" if not unusual else "elsewhere floor")
            assert len(short_obs) < len(long_obs)
    full.close()
    compact.close()


def test_action_variants_are_accepted(room5):
    for variant in ("South_East", "  south east ", "SOUTHEAST", "move south-east", "se"):
        room5.reset(seed=0)
        obs, _, _, _, info = room5.step(variant)
        assert info["invalid_action"] is False, variant
        assert "staircase down: 3 steps east and 3 steps south" in obs, variant


def test_generic_id_takes_any_task():
    env = gym.make("comprl/MiniHack-v0", task="MiniHack-Corridor-R2-v0")
    _, info = env.reset(seed=1)
    assert "open north" in info["admissible_actions"]
    assert "kick west" in info["admissible_actions"] and "search" in info["admissible_actions"]
    assert env.unwrapped.max_steps == 1000
    env.close()


def test_keyroom_apply_unlocks_the_door():
    env = gym.make("comprl/MiniHack-KeyRoom-S5-v0")
    obs, info = env.reset(seed=0)
    assert {"pick up", "apply"} <= set(info["admissible_actions"])
    assert "Inventory:" in obs and "key" in obs
    env.step("south")  # onto the key (seed 0 layout)
    obs, *_ = env.step("pick up")
    assert "Master Key of Thievery" in obs.split("Inventory:")[1]
    env.step("north")  # the door is now diagonal: minihack would loop forever walking into it
    obs, _, _, _, info = env.step("apply")
    assert info["invalid_action"] is True and "diagonal" in obs
    env.step("south")
    obs, _, _, _, info = env.step("apply key")
    assert info["invalid_action"] is False
    assert "open door: 1 step west" in obs
    env.close()


@pytest.mark.parametrize(
    "bad",
    ["", "   ", "x" * 10_000, "北へ行く 🚶", "nort", "click[buy now]", "go to desk 1", "search"],
)
def test_bad_actions_are_refused_without_a_game_step(room5, bad):
    room5.reset(seed=0)
    turn_before = int(room5.unwrapped.nle_observation["blstats"][20])
    obs, reward, terminated, truncated, info = room5.step(bad)
    assert info["invalid_action"] is True
    assert reward == 0.0 and not terminated
    assert "Allowed actions: north, east" in obs
    assert int(room5.unwrapped.nle_observation["blstats"][20]) == turn_before
    obs, _, _, _, info = room5.step("east")
    assert info["invalid_action"] is False and "staircase down" in obs


def test_near_miss_gets_a_suggestion(room5):
    room5.reset(seed=0)
    obs, *_ = room5.step("nort")
    assert "Did you mean 'north'?" in obs


def test_dead_nethack_raises_a_clear_error():
    env = gym.make("comprl/MiniHack-Room-5x5-v0")
    env.reset(seed=0)
    env.unwrapped.nle_env.nethack.close()  # the NetHack instance goes away under the env
    with pytest.raises(EnvBackendError, match="NetHack"):
        env.step("east")
    with pytest.raises(EnvBackendError, match="NetHack"):
        env.reset(seed=1)
    env.close()


def test_nle_exception_becomes_env_backend_error(monkeypatch):
    env = gym.make("comprl/MiniHack-Room-5x5-v0")
    env.reset(seed=0)

    def broken(action):
        raise RuntimeError("simulated NetHack crash")

    monkeypatch.setattr(env.unwrapped.nle_env, "step", broken)
    with pytest.raises(EnvBackendError, match="simulated NetHack crash"):
        env.step("east")
    env.close()


_TRAJECTORY_SCRIPT = """
import json, random, sys
import gymnasium as gym
import comprl_gym
runs = {}
for env_id in sys.argv[1].split(","):
    env = gym.make(env_id)
    for seed in (11, 12):
        rng = random.Random(7)
        obs, info = env.reset(seed=seed)
        seen = [obs]
        for _ in range(50):
            obs, reward, terminated, truncated, info = env.step(rng.choice(info["admissible_actions"]))
            seen.append(obs)
            if terminated or truncated:
                obs, info = env.reset()
                seen.append(obs)
        runs[f"{env_id} {seed}"] = seen
print(json.dumps(runs))
"""
SEEDED_IDS = ["comprl/MiniHack-Room-Monster-15x15-v0", "comprl/MiniHack-MultiRoom-N2-v0"]


def _trajectories() -> dict[str, list[str]]:
    out = subprocess.run(
        [sys.executable, "-c", _TRAJECTORY_SCRIPT, ",".join(SEEDED_IDS)],
        check=True,
        capture_output=True,
        text=True,
        timeout=180,
    )
    return json.loads(out.stdout)


@pytest.mark.slow
def test_same_seed_in_two_processes_gives_the_same_observations():
    first, second = _trajectories(), _trajectories()
    for env_id in SEEDED_IDS:
        run = first[f"{env_id} 11"]
        assert len(run) >= 51
        assert run == second[f"{env_id} 11"], env_id
        assert first[f"{env_id} 12"] == second[f"{env_id} 12"], env_id
        assert first[f"{env_id} 12"][0] != run[0], env_id  # another seed, another level


def test_reset_seed_reproduces_within_a_process():
    env = gym.make("comprl/MiniHack-Room-Random-15x15-v0")
    first, _ = env.reset(seed=3)
    env.step("north")
    env.reset(seed=4)
    again, _ = env.reset(seed=3)
    assert first == again
    env.close()


@pytest.mark.slow
@pytest.mark.parametrize("vector_class", [gym.vector.SyncVectorEnv, gym.vector.AsyncVectorEnv])
def test_vector_envs_with_four_copies(vector_class):
    envs = vector_class([lambda: gym.make("comprl/MiniHack-Room-5x5-v0") for _ in range(4)])
    try:
        observations, infos = envs.reset(seed=[0, 1, 2, 3])
        assert len(observations) == 4 and all("staircase down" in o for o in observations)
        observations, rewards, terminated, truncated, infos = envs.step(
            ("south-east", "east", "bogus", "south")
        )
        assert list(infos["invalid_action"]) == [False, False, True, False]
        assert "Invalid action 'bogus'" in observations[2]
        for _ in range(3):
            observations, rewards, terminated, truncated, infos = envs.step(("south-east",) * 4)
        assert terminated[0] and rewards[0] == pytest.approx(1.0)
    finally:
        envs.close()


def test_full_action_set_gets_unique_names():
    env = gym.make("comprl/MiniHack-v0", task="MiniHack-Eat-v0")
    _, info = env.reset(seed=0)
    names = info["admissible_actions"]
    assert len(names) == len(set(names)) > 100
    assert {"north", "far north", "eat", "pick up", "apply", "wait"} <= set(names)
    _, _, _, _, info = env.step("n")  # short alias of north, not of "far north"
    assert info["invalid_action"] is False
    env.close()


def test_generated_north_corridor_is_the_layout_its_des_file_draws():
    """``Corridor-North-4`` (envs/minihack/layouts.py), the demo task: whatever the seed, the
    staircase is three steps north of a start walled in on both sides; walls cost a step and
    move nothing; three steps north win."""
    env = gym.make("comprl/MiniHack-Corridor-North-4-v0", max_steps=5, observation_mode="compact")
    for seed in range(6):
        obs, _ = env.reset(seed=seed)
        assert "- staircase down: 3 steps north" in obs.splitlines()
        assert "Next to you: wall: east, south, west, north-east," in obs  # only north is open
    env.reset(seed=0)
    obs, _, terminated, _, info = env.step("east")  # the wall: no move
    assert not terminated and "- staircase down: 3 steps north" in obs.splitlines()
    assert info["step"] == 1
    for last in (False, False, True):
        obs, reward, terminated, truncated, info = env.step("north")
        assert terminated == last and not truncated
    assert info["won"] is True and reward > 0
    obs, _ = env.reset(seed=1)
    for _ in range(5):  # never north: the step limit ends it, lost
        obs, _, terminated, truncated, info = env.step("south")
    assert truncated and not info["won"]
    env.close()


def test_generated_east_room_is_the_layout_its_des_file_draws():
    """``Room-East-4x3`` (envs/minihack/layouts.py), the demo task: the start row varies with
    the seed, the staircase is always three columns east, and walking there wins."""
    env = gym.make("comprl/MiniHack-Room-East-4x3-v0")
    offsets = set()
    for seed in range(12):
        obs, _ = env.reset(seed=seed)
        stairs = next(line for line in obs.splitlines() if line.startswith("- staircase down:"))
        offsets.add(stairs)
        assert stairs.startswith("- staircase down: 3 steps east")
        assert "west: wall" in obs  # the west column
    # Rows 1-3 of the west column: on the stairs' row, one north of it, one south of it.
    assert offsets == {
        "- staircase down: 3 steps east",
        "- staircase down: 3 steps east and 1 step north",
        "- staircase down: 3 steps east and 1 step south",
    }
    obs, _ = env.reset(seed=0)
    first = (
        "south-east" if "1 step south" in obs else "north-east" if "1 step north" in obs else "east"
    )
    for action, last in ((first, False), ("east", False), ("east", True)):
        obs, reward, terminated, truncated, info = env.step(action)
        assert terminated == last
    assert info["won"] is True
    env.close()
