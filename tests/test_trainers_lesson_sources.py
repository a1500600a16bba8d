"""Where a trainer's lessons come from: the extractor in a lesson format, or a memory without a
model; what the trainer refuses at start; where a write goes; the extractor-advantage hook.

The stores are real, the episodes are Trajectory records (what the extractor and the memories
read: task, moves, outcome, what was shown), the lesson texts and advantages are worked by
hand, and the trainers are the library's on the tiny model.
"""

from __future__ import annotations

import os

import pytest
from conftest import ScriptedBackend

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from comprl_gym.core import ConfigurationError  # noqa: E402
from comprl_gym.experience import ExperienceConfig, ExperienceManager, default_embedder  # noqa: E402
from comprl_gym.rollouts import Trajectory, Turn  # noqa: E402
from comprl_gym.trainers import TrainConfig, make_trainer  # noqa: E402
from comprl_gym.trainers.complementary import ComplementaryRLTrainer  # noqa: E402
from comprl_gym.trainers.config import ExperienceSettings  # noqa: E402
from comprl_gym.trainers.extractor import ExperienceExtractor, ExtractorGeneration  # noqa: E402
from comprl_gym.trainers.policy import PolicyOptimizer  # noqa: E402

ROOM = "comprl/MiniHack-Room-5x5-v0"
FORK = "comprl/Memory-Fork-v0"

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def embedder():
    return default_embedder()


def _store(path, embedder):
    return ExperienceManager(path, config=ExperienceConfig(diversify=False), embedder=embedder)


def _episode(task="Find the stairs.", won=True, shown=(), actions=("east",)):
    return Trajectory(
        "it1-0",
        ROOM,
        "minihack",
        "7",
        task,
        0,
        turns=[Turn(i, "a room", a, "a wall") for i, a in enumerate(actions)],
        won=won,
        experience_ids=list(shown),
        meta={"group": 0, "with_experience": True},
    )


def _config(tmp_path, algorithm="complementary", env_ids=(ROOM,), **experience):
    return TrainConfig.from_dict(
        {
            "algorithm": algorithm,
            "seed": 1,
            "env_ids": list(env_ids),
            "iterations": 1,
            "groups_per_iteration": 2,
            "group_size": 4,
            "max_episode_steps": 2,
            "task_pool": 4,
            "actor": {"model": "tiny", "lr": 1e-3, "max_new_tokens": 6},
            "extractor": {"model": "tiny", "lr": 1e-3, "max_new_tokens": 8},
            "experience": {
                "extractor_format": "plain",
                "inject_top_k": 1,
                "search_and_ask_budget": 0,
                "min_uses": 1,
                "train_cooldown_steps": 0,
                "merge_interval_steps": 0,
                "async_extraction": False,
                "diversify": False,
                **experience,
            },
            "output_dir": str(tmp_path / "run"),
            "eval_tasks": 0,
            "progress": False,
            "tensorboard": False,
        }
    )


@pytest.fixture
def loaded_models(monkeypatch):
    """The names of the models the trainer loads (actor, extractor), in order."""
    names: list[str] = []
    load = PolicyOptimizer.from_settings.__func__

    def recording(cls, settings, name="policy", *args, **kwargs):
        names.append(name)
        return load(cls, settings, name, *args, **kwargs)

    monkeypatch.setattr(PolicyOptimizer, "from_settings", classmethod(recording))
    return names


def test_a_format_a_family_cannot_write_is_refused_before_any_model_loads(tmp_path, loaded_models):
    with pytest.raises(ConfigurationError, match="'stem'.*family 'minihack' has none"):
        make_trainer(_config(tmp_path, env_ids=(FORK, ROOM), extractor_format="stem"))
    assert loaded_models == []  # refused at start: not even the actor loaded


def test_the_old_exemplar_spelling_is_read_as_the_exemplar_memory():
    with pytest.warns(DeprecationWarning, match="memory: exemplar"):
        settings = ExperienceSettings(extractor_format="exemplar")
    assert (settings.memory, settings.extractor_format) == ("exemplar", "operations")
    with pytest.raises(ConfigurationError, match="contradicts"):
        ExperienceSettings(extractor_format="exemplar", memory="cases")
    with pytest.raises(ConfigurationError, match="'exemplar' is a memory"):
        ExperienceExtractor(None, None, None, ExperienceSettings(), output_format="exemplar")


def test_a_write_into_another_store_leaves_the_extractors_own_alone(tmp_path, embedder):
    """A probe's scratch store gets the lessons; the extractor's store, its manager and its
    training samples are untouched. The operations format reads the lessons the episode was
    shown from that store too: its ``update`` of shown lesson 1 replaces the scratch lesson."""
    own, scratch = _store(tmp_path / "own", embedder), _store(tmp_path / "scratch", embedder)
    plain = ExperienceExtractor(
        ScriptedBackend(["Walk east first."]),
        None,
        own,
        ExperienceSettings(),
        output_format="plain",
    )
    [lesson] = plain.write(_episode(), actor_step=1, into=scratch)
    assert scratch.get_one(lesson).content == "Walk east first."
    assert scratch.get_one(lesson).title == "minihack: Find the stairs."
    assert (len(own), plain.manager, plain.pending) == (0, own, [])
    assert plain.counts.written == plain.counts.extractions == 0  # the probe's, not training's

    # The shown lessons are read from the target store, even an empty one: the extractor's
    # own lesson of the same id is not shown.
    [mine] = own.add(["<title>Keys</title><content>Keys open the doors.</content>"])
    add = '<answer>[{"function_name": "add", "parameters": {"new_memory": "Go east."}}]</answer>'
    backend = ScriptedBackend([add])
    operations = ExperienceExtractor(backend, None, own, ExperienceSettings())
    empty = _store(tmp_path / "empty", embedder)
    [added] = operations.write(_episode(shown=[mine]), actor_step=1, into=empty)
    assert "[No previous memories]" in backend.prompts[0][-1]["content"]
    assert "Keys open the doors" not in backend.prompts[0][-1]["content"]
    assert empty.get_one(added).content == "Go east." and len(own) == 1
    empty.close()

    [old] = scratch.add(["<title>Doors</title><content>Doors hide the stairs.</content>"])
    update = (
        '<answer>[{"function_name": "update", "parameters": {"target_idx": [1], "new_memory": '
        '"<title>Doors</title><content>Open the east door first.</content>"}}]</answer>'
    )
    operations = ExperienceExtractor(ScriptedBackend([update]), None, own, ExperienceSettings())
    [new] = operations.write(_episode(shown=[old]), actor_step=1, into=scratch)
    assert scratch.get_one(old).status == "merged"
    assert scratch.get_one(new).content == "Open the east door first."
    assert len(own) == 1 and operations.pending == []
    own.close()
    scratch.close()


class FlippedCredit(ComplementaryRLTrainer):
    """Complementary RL whose extractor is rewarded for what hurt the actor."""

    algorithm = "flipped-credit"

    def extractor_advantages(self, rewards, answers=None):
        return [-a for a in super().extractor_advantages(rewards, answers)]


@pytest.mark.slow
def test_the_extractor_advantages_hook_sets_the_advantages_of_the_cispo_step(tmp_path):
    """Lesson A was read by one won episode (r = +1), B by one lost (r = -1): the reference
    rule's advantages are r - mean = +1 and -1; the hook flips them, and the step trains on
    the flipped ones."""
    trainer = make_trainer(
        _config(tmp_path, algorithm=f"{__name__}:FlippedCredit", extractor_batch_size=2)
    )
    try:
        a, b = trainer.manager.add(["lesson A: go east", "lesson B: go west"])
        trainer.manager.report_outcome([a], won=True)
        trainer.manager.report_outcome([b], won=False)
        trainer.extractor.pending = [
            ExtractorGeneration([1, 2, 3], [4, 5], None, [lesson], actor_step=1)
            for lesson in (a, b)
        ]
        trainer.experience_job({"episodes": [], "step": 2})
        log = trainer.extractor.batch_log
        assert [(r["ids"], r["r_batch"]) for r in log] == [([a], 1.0), ([b], -1.0)]
        assert [r["advantage"] for r in log] == [-1.0, 1.0]
        assert trainer.extractor.updates == 1 and all(r["stepped"] for r in log)
    finally:
        trainer.close()


class RecordingTrainer(ComplementaryRLTrainer):
    """Complementary RL that keeps the episodes handed to step 6 (the test reads them)."""

    algorithm = "recording"

    def experience_job(self, job):
        self.handed = job["episodes"]
        super().experience_job(job)


@pytest.mark.slow
def test_a_memory_trainer_loads_no_extractor_and_stores_every_case(tmp_path, loaded_models):
    """``memory: cases``: only the actor loads; one iteration stores one lesson per
    with-experience episode (2 groups x K/2 = 4), its task and moves, won or lost; a resumed
    trainer has the same store and counts."""
    cfg = _config(tmp_path, algorithm=f"{__name__}:RecordingTrainer", memory="cases")
    trainer = make_trainer(cfg)
    try:
        assert loaded_models == ["actor"] and trainer.extractor is None
        record = trainer.train_iteration()
        cases = [e for e in trainer.handed if e.with_experience]
        assert len(cases) == 4 and len(trainer.manager) == 4
        expected = {
            f"Task: {e.task}\nActions that {'won' if e.won else 'lost'} it, in order: "
            f"{', '.join(t.action.strip() for t in e.turns)}."
            for e in cases
        }
        assert {e.content for e in trainer.manager.experiences()} == expected
        assert record["memory/episodes"] == 4 and record["store_size"] == 4
        trainer.save_checkpoint()
    finally:
        trainer.close()
    resumed = make_trainer(cfg)
    try:
        assert resumed.iteration == 1 and len(resumed.manager) == 4
        assert resumed.memory.state_dict() == {"episodes": 4, "declined": 0}
    finally:
        resumed.close()
