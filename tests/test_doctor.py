"""``comprl-gym doctor``: passes on a config that trains, fails naming the cause on a no-op
update, a frozen model and a rollout engine that never receives the pushed weights."""

from __future__ import annotations

import pytest

from comprl_gym.cli import main
from comprl_gym.llm.transformers_backend import TransformersBackend
from comprl_gym.trainers.config import ModelSettings, TrainConfig
from comprl_gym.trainers.doctor import diagnose, examine
from comprl_gym.trainers.policy import PolicyOptimizer


def failed(findings) -> dict[str, str]:
    return {f"{f.model}: {f.check}": f.detail for f in findings if not f.passed}


def tiny_config(**actor) -> TrainConfig:
    return TrainConfig(
        algorithm="grpo",
        actor=ModelSettings(model="tiny", **{"lr": 1e-2, **actor}),
        rollout_backend="transformers",
    )


def test_a_config_that_trains_passes_every_check():
    findings = diagnose(tiny_config(), updates=2)
    assert failed(findings) == {}
    assert {f.check for f in findings} == {
        "trainable weights",
        "gradient",
        "weights move",
        "entropy",
        "learns the known answer",
        "engine serves pushed weights",
    }


def test_a_zero_learning_rate_is_a_no_op_update():
    problems = failed(diagnose(tiny_config(lr=0.0), updates=2))
    assert set(problems) == {"actor: weights move", "actor: learns the known answer"}
    assert "no-op" in problems["actor: weights move"]


def test_frozen_trainable_weights_fail_by_name():
    optimizer = PolicyOptimizer.from_settings(ModelSettings(model="tiny", lr=1e-2), "actor")
    for param in optimizer.model.parameters():
        param.requires_grad_(False)
    from comprl_gym.trainers.engines import policy_backend

    problems = failed(examine("actor", optimizer, policy_backend(optimizer), updates=2))
    assert "actor: trainable weights" in problems and "actor: weights move" in problems


def test_a_weight_push_that_never_arrives_is_caught():
    """An engine holding its own copy of the weights (as vLLM does): with the push broken it
    keeps sampling from the old weights, and the doctor says so; with the push it is in step."""
    settings = ModelSettings(model="tiny", lr=1e-2)
    optimizer = PolicyOptimizer.from_settings(settings, "actor")
    engine = TransformersBackend("tiny", device="cpu", dtype="float32")
    broken = failed(examine("actor", optimizer, engine, updates=2, push=lambda: None))
    assert set(broken) == {"actor: engine serves pushed weights"}
    assert "stale" in broken["actor: engine serves pushed weights"]

    optimizer = PolicyOptimizer.from_settings(settings, "actor")
    engine = TransformersBackend("tiny", device="cpu", dtype="float32")
    push = lambda: engine.update_weights(optimizer.rollout_weights())  # noqa: E731
    assert failed(examine("actor", optimizer, engine, updates=2, push=push)) == {}


@pytest.mark.slow
def test_doctor_command_passes_on_a_committed_config_and_exits_1_on_a_no_op(capsys):
    config = "configs/extractor-credit.yaml"
    tiny = ["extractor.model=tiny", "extractor.lora.top_layers=1"]
    args = ["doctor", "--config", config, "--updates", "2"]
    sets = [x for item in tiny for x in ("--set", item)]
    assert main([*args, *sets]) == 0
    assert "all 6 checks passed" in capsys.readouterr().out
    assert main([*args, *sets, "--set", "extractor.lr=0"]) == 1
    out = capsys.readouterr().out
    assert "extractor: weights move" in out and "FAILED" in out
