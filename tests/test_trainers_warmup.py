"""The reading warm-up (``TrainConfig.warmup``) and ``init_weights`` on the tiny model."""

from __future__ import annotations

import hashlib
import json
import os
import random
from dataclasses import replace

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from comprl_gym.agents.prompts import PromptConfig  # noqa: E402
from comprl_gym.core import ConfigurationError  # noqa: E402
from comprl_gym.envs.memory import dungeon, lesson_text  # noqa: E402
from comprl_gym.envs.memory.lessons import reading_examples as memory_examples  # noqa: E402
from comprl_gym.trainers import TrainConfig, make_trainer  # noqa: E402
from comprl_gym.trainers.config import LoraSettings, ModelSettings, WarmupConfig  # noqa: E402
from comprl_gym.trainers.losses import CrossEntropy  # noqa: E402
from comprl_gym.trainers.policy import PolicyOptimizer, TrainSample  # noqa: E402
from comprl_gym.trainers.warmup import (  # noqa: E402
    draw_batch,
    reading_examples,
    reading_samples,
    run_warmup,
    warmup_optimizer,
)

ENV_ID = "comprl/Memory-Fork-v0"
#: The memory env as the experience-transfer benchmark plays it: the fork lists east and west.
ENV_KWARGS = {"observation_mode": "compact", "branch_length": 2, "moves": "open"}

#: The box is shared: one torch thread is far faster than two under contention.
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _config(tmp_path, **overrides):
    data = {
        "algorithm": "grpo",
        "seed": 0,
        "env_ids": [ENV_ID],
        "env_kwargs": {ENV_ID: ENV_KWARGS},
        "iterations": 1,
        "groups_per_iteration": 1,
        "group_size": 2,
        "max_episode_steps": 2,
        "task_pool": 4,
        "conversation": "multi_turn",
        "actor": {"model": "tiny", "lr": 1e-4, "max_new_tokens": 4},
        "warmup": {"steps": 6, "formats": ["oracle"], "sides": "true", "batch_size": 4},
        "eval_tasks": 0,
        "output_dir": str(tmp_path / "run"),
        "progress": False,
        "tensorboard": False,
    }
    for key, value in overrides.items():
        merge = key in ("actor", "warmup")  # a section's other settings stay
        data[key] = {**data[key], **value} if merge else value
    return TrainConfig.from_dict(data)


def _per_example_losses(model, samples) -> list[float]:
    """The benchmark's old warm-up loss, one forward pass per example (written out as
    ``bench_experience_transfer.reading_warmup`` had it): the mean of ``-log p`` of the
    answer's number given the prompt and of the end token given the number."""
    out = []
    with torch.no_grad():
        for sample in samples:
            *prompt, answer, end = sample.input_ids
            ids = torch.tensor([[*prompt, answer]])
            logp = model(ids).logits[0, -2:].float().log_softmax(-1)
            out.append(float(-(logp[0, answer] + logp[1, end]) / 2))
    return out


def _samples(trainer, count=None):
    cfg = trainer.config
    examples = reading_examples(cfg)[:count]
    return reading_samples(cfg, examples, trainer.actor.tokenizer, PromptConfig("multi_turn"))


def _trained(optimizer) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in optimizer.model.named_parameters() if p.requires_grad}


# ---------------------------------------------------------------- the memory family's examples
def test_memory_reading_examples_for_two_dungeons_by_hand():
    # Dungeon 0 is the Barrow of Frost, dungeon 1 the Sanctum of Whispers; both hide the
    # stairs in the west branch (dungeons.py draws the sides). Their neighbours (a training
    # dungeon whose name shares a word) are 15, the Caves of Frost (west), and 3, the Sanctum
    # of Marrow (east).
    assert [(dungeon(i).name, dungeon(i).side) for i in (0, 1, 15, 3)] == [
        ("the Barrow of Frost", "west"),
        ("the Sanctum of Whispers", "west"),
        ("the Caves of Frost", "west"),
        ("the Sanctum of Marrow", "east"),
    ]
    stairs = "the staircase down is at the end of the"
    oracle = memory_examples("train", ["oracle"], "both", ENV_KWARGS)
    assert len(oracle) == 2 * 192  # both sides of every training dungeon
    assert [(e.task_id, e.reset_options, e.lessons, e.answer, e.format) for e in oracle[:4]] == [
        ("fork/barrow-of-frost", {"task_id": 0}, (f"In the Barrow of Frost {stairs} east branch.",), "east", "oracle"),
        ("fork/barrow-of-frost", {"task_id": 0}, (f"In the Barrow of Frost {stairs} west branch.",), "west", "oracle"),
        ("fork/sanctum-of-whispers", {"task_id": 1}, (f"In the Sanctum of Whispers {stairs} east branch.",), "east", "oracle"),
        ("fork/sanctum-of-whispers", {"task_id": 1}, (f"In the Sanctum of Whispers {stairs} west branch.",), "west", "oracle"),
    ]  # fmt: skip
    # Its own side only: one example a dungeon.
    true_side = memory_examples("train", ["oracle"], "true", ENV_KWARGS)
    assert [(e.lessons, e.answer) for e in true_side[:2]] == [
        ((f"In the Barrow of Frost {stairs} west branch.",), "west"),
        ((f"In the Sanctum of Whispers {stairs} west branch.",), "west"),
    ]
    # No lesson: the prompt labelled once with each side, whatever `sides` says.
    for sides in ("both", "true"):
        blind = memory_examples("train", ["none"], sides, ENV_KWARGS)
        assert [(e.task_id, e.lessons, e.answer) for e in blind[:4]] == [
            ("fork/barrow-of-frost", (), "east"),
            ("fork/barrow-of-frost", (), "west"),
            ("fork/sanctum-of-whispers", (), "east"),
            ("fork/sanctum-of-whispers", (), "west"),
        ]
    # The exemplar: the task and the two winning moves (branch_length 2); a lost case: the one
    # step into the other branch, labelled with the side the lesson names.
    task = (
        "Task: You are in the Barrow of Frost, a dark hall that splits into two branches at your "
        "feet. The staircase down (>) is at the end of one branch, out of sight: reach it."
    )
    exemplar = memory_examples("train", ["exemplar"], "both", ENV_KWARGS)[:2]
    assert [(e.lessons, e.answer) for e in exemplar] == [
        ((f"{task}\nActions that won it, in order: east, east.",), "east"),
        ((f"{task}\nActions that won it, in order: west, west.",), "west"),
    ]
    lost = memory_examples("train", ["lost_case"], "both", ENV_KWARGS)[:2]
    assert [(e.lessons, e.answer) for e in lost] == [
        ((f"{task}\nActions that lost it, in order: west.",), "east"),
        ((f"{task}\nActions that lost it, in order: east.",), "west"),
    ]
    # A neighbour's lesson, a coin: the oracle's sentence at even pool positions, the
    # exemplar's moves at odd ones (branch_length 2).
    mismatched = memory_examples("train", ["mismatched"], "true", ENV_KWARGS)[:4]
    sanctum = (
        "Task: You are in the Sanctum of Marrow, a dark hall that splits into two branches at "
        "your feet. The staircase down (>) is at the end of one branch, out of sight: reach it."
        "\nActions that won it, in order: east, east."
    )
    assert [(e.lessons, e.answer) for e in mismatched] == [
        ((f"In the Caves of Frost {stairs} west branch.",), "east"),
        ((f"In the Caves of Frost {stairs} west branch.",), "west"),
        ((sanctum,), "east"),
        ((sanctum,), "west"),
    ]
    # Formats follow one another in the order given.
    both = memory_examples("train", ["none", "oracle"], "true", ENV_KWARGS)
    assert [e.format for e in both] == ["none"] * 384 + ["oracle"] * 192


def test_memory_case_records_are_the_exemplar_memorys_text():
    # envs/ sits below experience/: lessons.py writes the record itself; it must stay equal.
    from comprl_gym.envs.memory.dungeons import task_text
    from comprl_gym.lessons.exemplar import exemplar_lesson

    task = task_text("fork", dungeon(7))
    assert lesson_text("exemplar", 7, 3, "east") == exemplar_lesson(task, ["east"] * 3, True)
    assert lesson_text("lost_case", 7, 3, "east") == exemplar_lesson(
        task, ["west"], False, keep_losses=True
    )


def test_memory_reading_examples_refuse_unknown_formats_and_sides():
    with pytest.raises(ConfigurationError, match="unknown \\['oracel'\\]"):
        memory_examples("train", ["oracel"], "both", {})
    with pytest.raises(ConfigurationError, match="sides"):
        memory_examples("train", ["oracle"], "left", {})


# ---------------------------------------------------------------- configuration
@pytest.mark.parametrize(
    ("warmup", "message"),
    [
        ({"steps": -1}, "warmup.steps must be >= 0"),
        ({"lr": 0.0}, "warmup.lr must be > 0"),
        ({"batch_size": 0}, "warmup.batch_size must be >= 1"),
        ({"formats": []}, "warmup.formats must name one"),
        ({"formats": ["oracle", "oracle"]}, "each once"),
        ({"sides": "left"}, "warmup.sides must be one of"),
        ({"split": ""}, "warmup.split must name"),
        ({"stpes": 3}, "unknown key 'stpes' in TrainConfig.warmup"),
        ({"formats": "oracle"}, "warmup.formats must be a list"),
    ],
)
def test_config_refuses_bad_warmup_values(warmup, message):
    with pytest.raises(ConfigurationError, match=message):
        TrainConfig.from_dict({"warmup": warmup})
    assert WarmupConfig().steps == 0  # off by default


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"env_ids": ["comprl/WebShop-v0"], "env_kwargs": {}}, "the 'webshop' family"),
        ({"warmup": {"formats": ["oracel"]}}, "unknown \\['oracel'\\]"),
        ({"warmup": {"split": "nowhere"}}, "split must be one of"),
        ({"warmup": {"batch_size": 1000}}, "exceeds the 192 reading examples"),
        ({"algorithm": "experience_only", "group_size": 2}, "keeps the actor frozen"),
    ],
)
def test_trainer_refuses_a_warmup_it_cannot_run_before_loading_models(
    tmp_path, monkeypatch, overrides, message
):
    def no_model(*args, **kwargs):
        raise AssertionError("a model was loaded before the warm-up was checked")

    monkeypatch.setattr(PolicyOptimizer, "from_settings", no_model)
    with pytest.raises(ConfigurationError, match=message):
        make_trainer(_config(tmp_path, **overrides))


# ---------------------------------------------------------------- drawing a step's batch
def _meta_samples(examples):
    """Token-free samples carrying the meta the warm-up gives its samples."""
    return [
        TrainSample([1, 2], [0, 1], 1.0, meta={"env_id": "e", "task_id": e.task_id,
                                               "format": e.format, "answer": e.answer})
        for e in examples
    ]  # fmt: skip


def test_twins_draw_each_task_lesson_with_its_inversion_and_off_is_the_old_draw():
    """Landmark rule examples, both sides: with twins a batch of 8 is 4 dungeons, each with the
    rule (the landmark's side) and its inversion (the other side); without, it is
    ``random.Random.sample`` as before (an old run's batches are unchanged)."""
    examples = memory_examples("train", ["rule", "none"], "both", {"variant": "landmark"})
    samples = _meta_samples(examples)
    rng = random.Random(0)
    for _ in range(20):
        batch = draw_batch(samples, 8, rng, twins=True)
        assert len(batch) == 8
        groups = {}
        for s in batch:
            groups.setdefault((s.meta["task_id"], s.meta["format"]), []).append(s)
        assert len(groups) == 4
        for (task_id, _), pair in groups.items():
            assert sorted(s.meta["answer"] for s in pair) == ["east", "west"], task_id
    assert draw_batch(samples, 8, random.Random(3)) == random.Random(3).sample(samples, 8)
    # One example per group (sides: true): the batch fills with eight tasks.
    single = _meta_samples(memory_examples("train", ["rule"], "true", {"variant": "landmark"}))
    assert len({s.meta["task_id"] for s in draw_batch(single, 8, rng, twins=True)}) == 8


# ---------------------------------------------------------------- the batched step
@pytest.mark.slow
def test_batched_loss_equals_the_per_example_loop(tmp_path):
    trainer = make_trainer(_config(tmp_path, warmup={"formats": ["oracle", "none"]}))
    try:
        samples = _samples(trainer, 40)
        batch = random.Random(0).sample(samples, 8)
        assert len({len(s.input_ids) for s in batch}) > 1  # the batch really pads
        expected = _per_example_losses(trainer.actor.model, batch)
        optimizer = warmup_optimizer(trainer.actor, lr=1e-3)
        assert optimizer.settings.micro_batch_size == 4  # two padded forward passes
        stats = optimizer.update(batch)  # the loss is taken before the step
        assert stats["sequence_losses"] == pytest.approx(expected, abs=1e-5)
        assert stats["loss"] == pytest.approx(sum(expected) / 8, abs=1e-5)
        assert stats["tokens"] == 16  # the number and the end token of each example
        # It stepped the actor's weights with its own optimiser; the actor's is untouched.
        assert optimizer.steps == 1 and trainer.actor.steps == 0
        assert not trainer.actor.optimizer.state
        assert _per_example_losses(trainer.actor.model, batch) != expected
    finally:
        trainer.close()


@pytest.mark.slow
def test_batched_gradient_equals_the_per_example_loop(tmp_path):
    # What training follows is the gradient: the padded batch's must be the loop's.
    trainer = make_trainer(_config(tmp_path, warmup={"formats": ["oracle", "none"]}))
    try:
        batch = random.Random(1).sample(_samples(trainer, 40), 8)
        model = trainer.actor.model
        params = {n: p for n, p in model.named_parameters() if p.requires_grad}
        model.zero_grad()
        loss = torch.zeros(())
        for sample in batch:  # the old warm-up's step, without its optimiser
            *prompt, answer, end = sample.input_ids
            logp = model(torch.tensor([[*prompt, answer]])).logits[0, -2:].log_softmax(-1)
            loss = loss + (-(logp[0, answer] + logp[1, end]) / 2) / len(batch)
        loss.backward()
        expected = {n: p.grad.clone() for n, p in params.items()}
        model.zero_grad()
        unclipped = replace(trainer.actor.settings, max_grad_norm=0.0)
        optimizer = PolicyOptimizer(model, trainer.actor.tokenizer, unclipped, CrossEntropy())
        got = {}
        # Read the gradient where the optimiser would step (and leave the weights alone).
        optimizer.optimizer.step = lambda: got.update(
            {n: p.grad.clone() for n, p in params.items()}
        )
        optimizer.update(batch)
    finally:
        trainer.close()
    scale = max(float(g.abs().max()) for g in expected.values())
    for name, grad in expected.items():
        assert torch.allclose(got[name], grad, rtol=1e-4, atol=1e-6 * scale), name


@pytest.mark.slow
def test_a_few_warmup_steps_lower_the_loss_and_write_the_reader(tmp_path):
    cfg = _config(tmp_path, warmup={"steps": 8, "lr": 3e-3})
    trainer = make_trainer(cfg)
    try:
        probe = _samples(trainer, 16)  # fixed examples, drawn or not by the warm-up
        before = sum(_per_example_losses(trainer.actor.model, probe)) / len(probe)
        record = run_warmup(trainer)
        after = sum(_per_example_losses(trainer.actor.model, probe)) / len(probe)
    finally:
        trainer.close()
    assert after < before - 0.5, (before, after)
    assert len(record["losses"]) == 8 and record["losses"][-1] < record["losses"][0]
    assert record["losses_by_format"]["oracle"] == pytest.approx(record["losses"])
    reader = tmp_path / "run" / "warmup" / "reader.pt"
    assert record["reader"] == str(reader)
    assert record["reader_sha256"] == hashlib.sha256(reader.read_bytes()).hexdigest()
    rows = trainer.metrics.read()
    assert [r["warmup/step"] for r in rows if "warmup/step" in r] == list(range(1, 9))
    assert all(r["step"] == 0 for r in rows)  # before iteration 1
    assert [r["warmup/loss"] for r in rows if "warmup/loss" in r] == record["losses"]


# ---------------------------------------------------------------- init_weights
def _lora(r):
    return LoraSettings(enabled=True, r=r, alpha=2 * r)


@pytest.mark.slow
def test_init_weights_round_trip_and_a_mismatched_file_is_refused(tmp_path):
    saved = PolicyOptimizer.from_settings(ModelSettings(model="tiny", lora=_lora(4)))
    with torch.no_grad():  # trained-looking adapters: LoRA's B starts at zero
        for param in saved.model.parameters():
            if param.requires_grad:
                param.add_(torch.randn_like(param))
    path = tmp_path / "weights" / "adapters.pt"
    digest = saved.save_weights(path)
    assert digest == hashlib.sha256(path.read_bytes()).hexdigest()
    loaded = PolicyOptimizer.from_settings(
        ModelSettings(model="tiny", lora=_lora(4), init_weights=str(path))
    )
    want, got = _trained(saved), _trained(loaded)
    assert set(got) == set(want) and all(torch.equal(got[n], want[n]) for n in want)

    other = PolicyOptimizer.from_settings(ModelSettings(model="tiny", lora=_lora(8)))
    untouched = _trained(other)
    with pytest.raises(ConfigurationError, match=r"shape mismatches \(first: .*lora_A.*\(4, "):
        other.load_weights(path)
    assert all(torch.equal(v, untouched[n]) for n, v in _trained(other).items())
    with pytest.raises(ConfigurationError, match="actor.init_weights: .*weights missing"):
        PolicyOptimizer.from_settings(
            ModelSettings(model="tiny", init_weights=str(path)), "actor"
        )  # full fine-tuning trains every weight, the file holds adapters only
    with pytest.raises(ConfigurationError, match="no file"):
        other.load_weights(tmp_path / "nothing.pt")
    (tmp_path / "junk.pt").write_text("not weights")
    with pytest.raises(ConfigurationError, match="is not a weights file"):
        other.load_weights(tmp_path / "junk.pt")


@pytest.mark.slow
def test_train_warms_up_once_and_a_later_run_starts_from_the_reader(tmp_path):
    cfg = _config(tmp_path, warmup={"steps": 3})
    trainer = make_trainer(cfg)
    try:
        summary = trainer.train()
    finally:
        trainer.close()
    reader = tmp_path / "run" / "warmup" / "reader.pt"
    record = summary["warmup"]
    assert record["reader_sha256"] == hashlib.sha256(reader.read_bytes()).hexdigest()
    assert len(record["losses"]) == 3 and summary["times"]["warmup_s"] > 0
    assert json.loads((tmp_path / "run" / "warmup" / "warmup.json").read_text()) == record

    # Resumed past it: no second warm-up, the record kept from the checkpoint.
    resumed = make_trainer(_config(tmp_path, iterations=2, warmup={"steps": 3}))
    try:
        assert resumed.iteration == 1
        again = resumed.train()
    finally:
        resumed.close()
    assert again["warmup"] == record and "warmup_s" not in again["times"]
    rows = resumed.metrics.read()
    assert sum("warmup/loss" in r for r in rows) == 3

    # A later run starts from the reader (its trainable weights are the file's) and records it.
    later = make_trainer(
        _config(
            tmp_path,
            output_dir=str(tmp_path / "later"),
            actor={"init_weights": str(reader)},
            warmup={"steps": 0},
        )
    )
    try:
        saved = torch.load(reader, weights_only=True)
        got = _trained(later.actor)
        assert set(got) == set(saved) and all(torch.equal(got[n], saved[n]) for n in saved)
        summary = later.train()
    finally:
        later.close()
    init = summary["provenance"]["models"]["actor"]["init_weights"]
    assert init["path"] == str(reader)
    assert list(init["weight_files"].values()) == [record["reader_sha256"]]
    assert summary["warmup"] == {}


def test_next_token_logits_are_each_prompts_own_forward_pass():
    """Batched and right-padded, each row equals an unpadded forward pass of its prompt alone."""
    import torch

    from comprl_gym.trainers.config import ModelSettings
    from comprl_gym.trainers.policy import PolicyOptimizer
    from comprl_gym.trainers.warmup import next_token_logits

    model = PolicyOptimizer.from_settings(ModelSettings(model="tiny"), "actor").model
    prompts = [[5, 6, 7, 8, 9], [11, 12], [13, 14, 15]]
    rows = next_token_logits(model, prompts, batch_size=2)
    assert rows.shape[0] == 3
    with torch.no_grad():
        for row, ids in zip(rows, prompts):
            alone = model(torch.tensor([ids])).logits[0, -1]
            assert torch.allclose(row, alone, atol=1e-5)
