"""The memory family (comprl/Memory-*): the side that wins is never shown, recurs per dungeon,
differs across dungeons, and the held-out pool is out of the training pool's reach.

Truth is taken from the game, not from the generator: a side "wins" when walking it in real
NetHack reaches the stairs.
"""

from __future__ import annotations

import hashlib
import json
import re
import warnings
from pathlib import Path

import gymnasium as gym
import pytest
import yaml
from gymnasium.utils.env_checker import check_env

import comprl_gym
from comprl_gym.agents import make_agent
from comprl_gym.core import ConfigurationError
from comprl_gym.envs.memory import (
    DUNGEON_NAMES,
    SPLITS,
    default_max_steps,
    dungeon,
    inverted_lesson,
    inverted_rule_lesson,
    oracle_lesson,
    placebo_lesson,
    placebo_rule_lesson,
    pool,
    rule_lesson,
)
from comprl_gym.envs.memory.dungeons import slug

IDS = ("comprl/Memory-Fork-v0", "comprl/Memory-Landmark-v0")
SIDE_WORDS = ("east", "west")
DIRECTION_WORDS = ("north", "south", "east", "west")


def make(env_id: str, **kwargs):
    return gym.make(env_id, **kwargs)


def test_ids_are_registered_in_their_own_family():
    for env_id in IDS:
        assert comprl_gym.registration.ENV_TABLE[env_id].family == "memory"
        assert env_id in gym.registry


@pytest.fixture(scope="module", params=IDS)
def test_env(request):
    env = make(request.param, split="test", observation_mode="text+map")
    yield env
    env.close()


def play(env, actions, **reset_kwargs):
    """Reset, then play ``actions`` until the episode ends; the last info and obs."""
    obs, info = env.reset(**reset_kwargs)
    for action in actions:
        obs, _, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            break
    return obs, info


def first_observations(env):
    """The first observation of every held-out dungeon, by task id."""
    return {
        info["task_id"]: (obs, info)
        for obs, info in (env.reset(options={"task_id": k}) for k in range(len(SPLITS["test"])))
    }


def test_no_held_out_first_observation_shows_or_names_the_side(test_env):
    seen = first_observations(test_env)
    assert len(seen) == len(SPLITS["test"])
    for task_id, (obs, info) in seen.items():
        task_line, *rest = obs.splitlines()
        assert task_line == f"Task: {info['task']}"
        # The task names the dungeon and no direction; the rest never mentions the stairs.
        assert dungeon(task_id).name in info["task"]
        assert not any(word in info["task"].lower() for word in DIRECTION_WORDS), task_id
        body = "\n".join(rest)
        assert "stair" not in body.lower().replace("> the staircase down", ""), task_id
        drawn = body.split("Map (@ is you, > the staircase down):\n")[1].split("\nStatus")[0]
        assert ">" not in drawn, task_id


def test_fork_first_observations_are_the_same_whatever_the_side():
    env = make("comprl/Memory-Fork-v0", split="test", observation_mode="text+map")
    seen = first_observations(env)
    env.close()
    sides = {dungeon(task_id).side for task_id in seen}
    assert sides == {"east", "west"}
    # Everything but the dungeon's name is identical across all held-out dungeons.
    bodies = {obs.replace(dungeon(task_id).name, "NAME") for task_id, (obs, _) in seen.items()}
    assert len(bodies) == 1


def walk(env, side, **reset_kwargs):
    obs, info = play(env, [side] * env.unwrapped.max_steps, **reset_kwargs)
    return info


def test_one_side_wins_and_the_other_loses_in_every_held_out_dungeon(test_env):
    for k in range(len(SPLITS["test"])):
        won = {side: walk(test_env, side, options={"task_id": k})["won"] for side in SIDE_WORDS}
        assert sorted(won.values()) == [False, True], (k, won)
        winner = next(side for side, w in won.items() if w)
        assert winner == test_env.unwrapped.dungeon.side


def test_a_first_move_down_the_wrong_branch_loses(test_env):
    for k in range(0, len(SPLITS["test"]), 4):
        test_env.reset(options={"task_id": k})
        right = test_env.unwrapped.dungeon.side
        wrong = "west" if right == "east" else "east"
        # One step into the wrong branch ends the episode, however many steps are left.
        test_env.reset(options={"task_id": k})
        obs, _, terminated, truncated, info = test_env.step(wrong)
        assert terminated and not truncated and not info["won"], k
        assert info["end_status"] == "WRONG_BRANCH" and info["step"] == 1
        assert f"the {wrong} branch" in obs
        # Nothing more happens after it.
        obs, _, terminated, _, info = test_env.step(right)
        assert terminated and info["invalid_action"] and not info["won"]
    # Walls and the landmark's alcove are not the wrong branch.
    env = make("comprl/Memory-Landmark-v0", split="test")
    for k in range(8):
        env.reset(options={"task_id": k})
        d = env.unwrapped.dungeon
        vertical = "north" if d.landmark_row == "north" else "south"
        into_alcove = f"{vertical}-{d.side}"
        obs, info = play(env, ["north", "south", into_alcove], options={"task_id": k})
        assert info.get("end_status") != "WRONG_BRANCH" and info["step"] == 3, obs
    env.close()


def test_the_expert_wins_every_episode():
    for env_id in IDS:
        for split in ("train", "test"):
            env = make(env_id, split=split)
            agent = make_agent("expert", env)
            for seed in range(16):
                obs, info = env.reset(seed=seed)
                agent.reset(info["task"], info)
                done = False
                while not done:
                    obs, _, terminated, truncated, info = env.step(agent.act(obs, info))
                    done = terminated or truncated
                assert info["won"] and info["step"] == 3, (env_id, split, seed)
            env.close()


def test_the_landmark_marks_the_stairs_side():
    env = make("comprl/Memory-Landmark-v0", split="test")
    kinds = set()
    for k in range(len(SPLITS["test"])):
        obs, info = env.reset(options={"task_id": k})
        [(kind, where)] = re.findall(r"^- ([a-z ]+): (1 step \w+ and 1 step \w+)$", obs, re.M)
        kinds.add(kind)
        side = next(word for word in SIDE_WORDS if word in where)
        assert walk(env, side, options={"task_id": k})["won"], (k, obs)
    env.close()
    assert kinds == {"fountain", "neutral altar", "sink", "grave"}


@pytest.mark.parametrize("held_out_split", ["test", "test_large", "sealed"])
def test_the_held_out_pool_is_never_reached_from_the_training_pool(held_out_split):
    train = make("comprl/Memory-Fork-v0", split="train")
    seeds = [*range(2 * len(SPLITS["train"])), 2**31 - 2, 10**9 + 7, 123456789]
    train_ids = {train.reset(seed=s)[1]["task_id"] for s in seeds}
    assert len(train_ids) == len(SPLITS["train"])
    test = make("comprl/Memory-Fork-v0", split=held_out_split)
    test_ids = {test.reset(seed=s)[1]["task_id"] for s in range(len(SPLITS[held_out_split]))}
    assert len(test_ids) == len(SPLITS[held_out_split])
    assert not train_ids & test_ids
    assert {dungeon(t).split for t in train_ids} == {"train"}
    assert {dungeon(t).split for t in test_ids} == {held_out_split}
    # Naming a held-out dungeon in the training env, by id, name or position, is refused.
    held_out = next(iter(test_ids))
    for task_id in (held_out, dungeon(held_out).name, len(SPLITS["train"])):
        with pytest.raises(ConfigurationError):
            train.reset(options={"task_id": task_id})
    train.close()
    test.close()


def test_the_large_held_out_pool_shares_no_name_word_and_left_the_first_256_as_they_were():
    words = {
        split: {w for i in indices for w in DUNGEON_NAMES[i].split() if w not in ("the", "of")}
        for split, indices in SPLITS.items()
    }
    assert not words["test_large"] & (words["train"] | words["test"])
    assert len(SPLITS["test_large"]) == 256
    # Dungeons 0..255 as the results committed before test_large was added played them
    # (read from benchmarks/results/experience_transfer_streaming_coin.json's episodes).
    assert dungeon(192).name == "the Vault of Iron" and dungeon(192).side == "west"
    assert dungeon(0).name == "the Barrow of Frost"


#: sha256 of json.dumps([(index, name, side, landmark, landmark_row) for dungeons 0..511]),
#: computed from the module at commit b85f911, before the ``sealed`` pool was added.
DUNGEONS_0_511_SHA256 = "04bfe2446167afdf4fff92e556d21ba0c0cef713b718a727a20c0e30b04996b4"


def _name_words(indices) -> set[str]:
    return {w for i in indices for w in DUNGEON_NAMES[i].split() if w not in ("the", "of")}


def test_the_sealed_pool_shares_no_name_word_and_left_the_first_512_as_they_were():
    assert SPLITS["sealed"] == pool("sealed") == range(512, 768)
    others = set().union(*(_name_words(SPLITS[s]) for s in SPLITS if s != "sealed"))
    assert not _name_words(SPLITS["sealed"]) & others
    assert len(_name_words(SPLITS["sealed"])) == 32
    # No shared index between any two pools (train and test share words by design).
    for a in SPLITS:
        for b in SPLITS:
            if a < b:
                assert not set(SPLITS[a]) & set(SPLITS[b]), (a, b)
    sides = [dungeon(i).side for i in SPLITS["sealed"]]
    assert sides.count("east") == sides.count("west") == 128
    assert {dungeon(i).split for i in SPLITS["sealed"]} == {"sealed"}
    # Dungeons 0..511 (names, sides, landmarks) exactly as before the sealed pool existed.
    rows = [(d.index, d.name, d.side, d.landmark, d.landmark_row) for d in map(dungeon, range(512))]
    assert hashlib.sha256(json.dumps(rows).encode()).hexdigest() == DUNGEONS_0_511_SHA256
    assert rows[0] == (0, "the Barrow of Frost", "west", "ALTAR", "north")
    assert rows[255] == (255, "the Cellar of Ash", "west", "SINK", "south")
    assert rows[256] == (256, "the Mire of Pearls", "east", "FOUNTAIN", "north")
    assert rows[511] == (511, "the Mire of Storms", "east", "FOUNTAIN", "north")


def test_nothing_committed_in_development_uses_the_sealed_pool():
    """``sealed`` is reserved for pre-registered tables: no committed result names one of its
    dungeons but those tables' own files (the ``output`` of each committed plan under
    ``benchmarks/preregistered/``), and no config selects it."""
    root = Path(__file__).resolve().parents[1]
    plans = sorted((root / "benchmarks" / "preregistered").glob("*.yaml"))
    assert len(plans) >= 2
    tables = {root / yaml.safe_load(plan.read_text())["output"] for plan in plans}
    sealed_pairs = {tuple(slug(DUNGEON_NAMES[i]).split("-of-")) for i in SPLITS["sealed"]}
    assert len(sealed_pairs) == 256
    pair = re.compile(r"\b([a-z]+)[-\s]+of[-\s]+([a-z]+)\b")
    files = [p for p in (root / "benchmarks" / "results").rglob("*") if p.is_file()]
    texts = [
        p
        for p in files
        if p.suffix in (".json", ".md", ".txt", ".yaml", ".yml") and p.with_suffix("") not in tables
    ]
    assert any(p.suffix == ".json" for p in texts)
    for path in texts:
        found = set(pair.findall(path.read_text(errors="replace").lower())) & sealed_pairs
        assert not found, f"{path} names sealed dungeons: {sorted(found)[:5]}"
    uses_sealed = re.compile(r"""split["']?\s*[:=]\s*["']?sealed\b|--split[\s=]+sealed\b""")
    configs = [p for p in (root / "configs").rglob("*") if p.is_file()]
    assert configs
    for path in configs:
        assert not uses_sealed.search(path.read_text(errors="replace")), path
    # The checks catch what they look for.
    assert set(pair.findall("fork/" + slug(dungeon(600).name))) & sealed_pairs
    assert set(pair.findall(dungeon(600).name.lower())) & sealed_pairs
    assert uses_sealed.search("comprl/Memory-Fork-v0: {split: sealed, moves: open}")


def test_a_dungeon_recurs_and_the_same_seed_plays_the_same_episode():
    a = make("comprl/Memory-Fork-v0", split="test")
    b = make("comprl/Memory-Fork-v0", split="test")
    obs_a, info_a = a.reset(seed=7)
    obs_b, info_b = b.reset(seed=7)
    assert obs_a == obs_b and info_a == info_b
    for action in ("north", "east", "west"):
        assert a.step(action)[:4] == b.step(action)[:4]
    # seed 7 + 64 is the same dungeon: same task id, same side.
    side = a.unwrapped.dungeon.side
    assert a.reset(seed=7 + len(SPLITS["test"]))[1]["task_id"] == info_a["task_id"]
    assert walk(a, side, seed=7 + len(SPLITS["test"]))["won"]
    a.close()
    b.close()


def test_sides_are_balanced_and_names_never_give_them_away():
    for split, indices in SPLITS.items():
        sides = [dungeon(i).side for i in indices]
        assert sides.count("east") == sides.count("west"), split
    assert len(set(DUNGEON_NAMES)) == len(DUNGEON_NAMES) == 768
    for name in DUNGEON_NAMES:
        assert not any(
            word in name.lower() for word in (*DIRECTION_WORDS, "stair", "left", "right")
        )


def side_named(text: str) -> str:
    [side] = [word for word in SIDE_WORDS if re.search(rf"\b{word}\b", text)]
    return side


def test_oracle_lessons_win_and_inverted_lessons_lose_when_followed(test_env):
    for k in range(0, len(SPLITS["test"]), 3):
        task_id = test_env.reset(options={"task_id": k})[1]["task_id"]
        oracle, inverted = oracle_lesson(task_id), inverted_lesson(task_id)
        assert dungeon(task_id).name in oracle and dungeon(task_id).name in inverted
        assert side_named(oracle) != side_named(inverted)
        assert walk(test_env, side_named(oracle), options={"task_id": k})["won"]
        assert not walk(test_env, side_named(inverted), options={"task_id": k})["won"]


def test_the_placebo_says_nothing_and_is_as_long():
    for index in (0, 100, 200, 255):
        oracle, placebo = oracle_lesson(index), placebo_lesson(index)
        words = placebo.lower().split()
        assert not any(w.strip(".,") in (*DIRECTION_WORDS, "branch", "stairs") for w in words)
        assert "stair" not in placebo.lower()
        assert len(words) == len(oracle.split())
        assert abs(len(placebo) - len(oracle)) <= 3
        assert dungeon(index).name in placebo
    assert len(rule_lesson().split()) - len(inverted_rule_lesson().split()) in (-1, 0, 1)


def test_check_env_and_malformed_actions_never_raise():
    for env_id in IDS:
        env = make(env_id)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            check_env(env.unwrapped, skip_render_check=True)
        obs, info = env.reset(seed=3)
        assert set(comprl_gym.INFO_KEYS) <= set(info)
        for bad in ("dance", "", 3, "x" * 10_000):
            obs, reward, terminated, truncated, info = env.step(bad)
            assert info["invalid_action"] and reward == 0.0
        env.close()


def test_bad_configurations_are_refused():
    with pytest.raises(ConfigurationError):
        make("comprl/Memory-Fork-v0", split="valid")
    with pytest.raises(ConfigurationError):
        make("comprl/Memory-Fork-v0", variant="maze")
    with pytest.raises(ConfigurationError):
        make("comprl/Memory-Fork-v0", branch_length=1)
    with pytest.raises(ConfigurationError, match="moves"):
        make("comprl/Memory-Fork-v0", moves="some")
    env = make("comprl/Memory-Fork-v0", branch_length=5)
    assert env.unwrapped.max_steps == default_max_steps(5) == 7
    env.reset(seed=1)
    assert walk(env, env.unwrapped.dungeon.side, seed=1)["step"] == 5
    env.close()


def test_open_moves_list_the_two_branches_and_still_accept_a_wall_bump():
    """``moves="open"`` lists what NetHack lets you walk into: the fork's two branches at the
    start (both, whatever the side), the way back and on inside a branch; a move into a wall
    is still played (a wasted turn, not an invalid action)."""
    env = make("comprl/Memory-Fork-v0", split="test", moves="open", observation_mode="compact")
    for task in range(4):
        obs, info = env.reset(options={"task_id": task})
        assert info["admissible_actions"] == ["east", "west"]
        assert "Allowed actions: east, west" in obs
        side = env.unwrapped.dungeon.side
        obs, _, terminated, _, info = env.step(side)
        assert not terminated and sorted(info["admissible_actions"]) == ["east", "west"]
    obs, info = env.reset(options={"task_id": 0})
    obs, reward, terminated, _, info = env.step("north")
    assert not info["invalid_action"] and not terminated and "wall" in obs
    assert info["admissible_actions"] == ["east", "west"]
    env.close()
    every = make("comprl/Memory-Fork-v0", split="test")
    assert every.reset(seed=0)[1]["admissible_actions"][:4] == ["north", "east", "south", "west"]
    every.close()


# ---- the family's lesson judge and fixed lessons (envs/memory/judge.py) ----------------------
#: Hand-written lessons and what they say: the Vault of Marrow (dungeon 159) keeps its stairs
#: west, the Sanctum of Marrow (3) east (the game's truth: the oracle-lesson test above walks
#: them). A store experience is "## Title / ## Description / ## Content"; only the content's
#: side is the lesson's fact.
HAND_JUDGED = [
    ("In the Vault of Marrow the stairs are down the west branch.", 159, "right"),
    ("The Vault of Marrow: go east.", 159, "wrong"),  # capital article
    ("vault of marrow -> WEST", 159, "right"),  # no article, any case
    ("In fork/vault-of-marrow take the west branch.", 159, "right"),  # its task-id slug
    ("In the Sanctum of Marrow go east, not west.", 3, "both"),
    # The first dungeon named is the lesson's; every side in its content counts.
    ("In the Sanctum of Marrow, walk east; the Vault of Marrow is west.", 3, "both"),
    ("In the Sanctum of Marrow the air is cold.", 3, "neither"),
    ("Dark halls fork in two: pick east.", None, "neither"),  # names no dungeon
    (
        "## Title: Vault of Marrow, east or west?\n## Description: which branch\n"
        "## Content: In the Vault of Marrow the stairs are at the end of the west branch.",
        159,
        "right",
    ),
    (
        "## Title: West is wrong\n## Description: the Sanctum of Marrow\n## Content: go east",
        3,
        "right",
    ),
]


@pytest.mark.parametrize(("text", "task_id", "verdict"), HAND_JUDGED)
def test_the_judge_reads_the_dungeon_and_the_side_of_hand_written_lessons(text, task_id, verdict):
    judged = comprl_gym.families.family_spec("memory").judge(text)
    assert (judged.task_id, judged.verdict) == (task_id, verdict)


def test_fixed_lessons_are_judged_as_what_they_are():
    spec = comprl_gym.families.family_spec("memory")
    assert tuple(spec.lessons.fixed) == (
        "oracle",
        "inverted",
        "placebo",
        "rule",
        "inverted_rule",
        "rule_placebo",
    )
    expected = {"oracle": "right", "inverted": "wrong", "placebo": "neither"}
    for index in (*SPLITS["test"], 0, 300):
        task_id = dungeon(index).task_id("landmark")
        for kind, verdict in expected.items():
            assert spec.judge(spec.fixed_lesson(kind, task_id)) == (
                comprl_gym.lessons.core.LessonVerdict(index, verdict)
            )
    assert spec.fixed_lesson("oracle", 159) == oracle_lesson("fork/vault-of-marrow")
    with pytest.raises(ConfigurationError, match="no fixed lesson 'rules'"):
        spec.fixed_lesson("rules", 159)


def test_the_rule_lessons_are_one_text_for_every_landmark_dungeon():
    """The Landmark variant's rule, its inversion and its placebo: the same words for every
    dungeon (what a first visit can use), naming no dungeon (the judge: neither, no task), the
    placebo naming no side and no relation as long as the rule; a fork dungeon is refused."""
    spec = comprl_gym.families.family_spec("memory")
    placebo = placebo_rule_lesson()
    for kind, text in (
        ("rule", rule_lesson()),
        ("inverted_rule", inverted_rule_lesson()),
        ("rule_placebo", placebo),
    ):
        for index in (0, 159, 300, 600):
            assert spec.fixed_lesson(kind, dungeon(index).task_id("landmark")) == text
        assert spec.judge(text) == comprl_gym.lessons.core.LessonVerdict(None, "neither")
        with pytest.raises(ConfigurationError, match="fork dungeon.*Memory-Landmark-v0"):
            spec.fixed_lesson(kind, "fork/vault-of-marrow")
    words = placebo.lower().replace(",", "").split()
    assert not set(words) & {*DIRECTION_WORDS, "same", "other", "side"}
    assert {"fountain", "altar", "sink", "grave", "staircase"} <= set(words)
    assert len(words) == len(rule_lesson().split()) == 27


def test_lessons_are_counted_by_verdict():
    from comprl_gym.families import verdict_counts

    counts = verdict_counts(
        comprl_gym.families.family_spec("memory"), [text for text, _, _ in HAND_JUDGED]
    )
    assert counts == {"right": 5, "wrong": 1, "both": 2, "neither": 1, "no_task": 1}


def test_the_trainer_logs_the_store_lessons_that_name_the_right_side(tmp_path):
    """``store/memory/<verdict>`` counts the memory lessons of a real store, whichever other
    family's lessons it holds; a trained family without a judge logs nothing."""
    from types import SimpleNamespace

    from comprl_gym.experience import ExperienceManager, default_embedder
    from comprl_gym.trainers.base import Trainer

    manager = ExperienceManager(tmp_path / "store", embedder=default_embedder())
    try:
        # Stored as "## Title / ## Description / ## Content" (a plain lesson is its own title
        # and content), the way the judge reads them.
        manager.add([text for text, _, _ in HAND_JUDGED], env_family="memory")
        # A MiniHack lesson that would read as a memory lesson: another family's, not counted.
        manager.add(["In the Vault of Marrow go west."], env_family="minihack")
        trainer = SimpleNamespace(
            config=SimpleNamespace(
                env_ids=["comprl/Memory-Fork-v0", "comprl/MiniHack-Room-5x5-v0"]
            ),
            manager=manager,
        )
        assert Trainer.store_verdicts(trainer) == {
            "store/memory/right": 5,
            "store/memory/wrong": 1,
            "store/memory/both": 2,
            "store/memory/neither": 1,
            "store/memory/no_task": 1,
        }
        trainer.config.env_ids = ["comprl/MiniHack-Room-5x5-v0"]
        assert Trainer.store_verdicts(trainer) == {}
    finally:
        manager.close()


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_a_tiny_run_logs_how_many_stored_lessons_name_the_right_side(tmp_path):
    """One iteration of Complementary RL on the memory family with tiny models: the stem
    extractor writes lessons that name their dungeon and one side, so every stored lesson is
    right or wrong, and the metrics say how many."""
    import json

    from comprl_gym.trainers import TrainConfig, make_trainer

    config = TrainConfig.from_dict(
        {
            "algorithm": "complementary",
            "seed": 0,
            "env_ids": ["comprl/Memory-Fork-v0"],
            "iterations": 1,
            "groups_per_iteration": 1,
            "group_size": 4,
            "max_episode_steps": 2,
            "history_turns": 1,
            "task_pool": 4,
            "actor": {"model": "tiny", "lr": 1e-3, "max_new_tokens": 4},
            "extractor": {"model": "tiny", "lr": 1e-3, "max_new_tokens": 4},
            "experience": {"extractor_format": "stem", "async_extraction": False},
            "output_dir": str(tmp_path / "run"),
            "eval_tasks": 0,
            "eval_before": False,
            "progress": False,
            "tensorboard": False,
        }
    )
    trainer = make_trainer(config)
    try:
        trainer.train()
        stored = len(trainer.manager.experiences(env_family="memory"))
    finally:
        trainer.close()
    [record] = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    counts = {k.rsplit("/", 1)[1]: v for k, v in record.items() if k.startswith("store/memory/")}
    assert set(counts) == {"right", "wrong", "both", "neither", "no_task"}
    assert stored >= 1 and counts["right"] + counts["wrong"] == stored == record["store_size"]
