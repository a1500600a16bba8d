"""``comprl-gym doctor``: will this config's training move anything, and is its engine in step?

RL frameworks fail silently: a frozen adapter, a weight push that never reaches the rollout
engine, a loss whose gradient is zero, a policy already deterministic. Each makes a run that
finishes, logs numbers and learns nothing. The doctor builds each model a config trains (the
actor, the extractor) exactly as the trainer does (model, LoRA, optimiser, loss, rollout
engine) and gives it a known answer: a group of two completions of one prompt, the first token
of ``target`` rewarded (+1) and another token punished (-1), trained for a few updates. Then:

* ``trainable weights``: the model has parameters the optimiser moves;
* ``gradient``: the first update's gradient norm is not zero;
* ``weights move``: an update changes the trainable weights;
* ``entropy``: the policy is not already deterministic where it is trained
  (:data:`~comprl_gym.trainers.metrics.ENTROPY_FLOOR`);
* ``learns the known answer``: the rewarded token's log-prob rises;
* ``engine serves pushed weights``: after the push, the rollout engine reports the rewarded
  token's log-prob as the trained model computes it, not as before.

A failed check names its cause. The known-answer ladder (:mod:`comprl_gym.trainers.ladder`)
is the longer test of whether a learner learns what a study asks.

Example (the tiny model: every check passes):
    >>> from comprl_gym.trainers.config import ModelSettings, TrainConfig
    >>> config = TrainConfig(algorithm="grpo", actor=ModelSettings(model="tiny", lr=1e-2),
    ...                      rollout_backend="transformers")
    >>> findings = diagnose(config, updates=2)
    >>> [(f.model, f.check, f.passed) for f in findings][:3]
    [('actor', 'trainable weights', True), ('actor', 'gradient', True), ('actor', 'weights move', True)]
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from comprl_gym.trainers.config import TrainConfig
from comprl_gym.trainers.metrics import ENTROPY_FLOOR
from comprl_gym.trainers.policy import PolicyOptimizer, TrainSample

#: The known answer's prompt and the word whose first token is rewarded.
PROMPT = "Answer with one word. Is the staircase down east or west?"
TARGET = " west"
#: The known answer counts as learnt when its log-prob rose by at least this (nats).
LEARNT = 0.05
#: The engine's log-prob of the known answer must match the trained model's within this.
ENGINE_TOLERANCE = 0.05


@dataclass(frozen=True)
class Finding:
    """One check on one model: passed or not, and what was measured."""

    model: str
    check: str
    passed: bool
    detail: str


def diagnose(config: TrainConfig, updates: int = 3) -> list[Finding]:
    """The doctor's findings on each model ``config``'s algorithm trains (see the module
    docstring), ``updates`` known-answer updates each."""
    from comprl_gym.trainers import trainer_class
    from comprl_gym.trainers.engines import make_actor_backend, policy_backend

    cls = trainer_class(config.algorithm)
    # The loss hooks read only the config: call them on a trainer that was never started (no
    # envs, no store, no models loaded twice).
    hooks = cls.__new__(cls)
    hooks.config = config
    findings: list[Finding] = []
    if cls.trains_actor:
        actor = PolicyOptimizer.from_settings(config.actor, "actor", loss=hooks.actor_loss())
        backend = make_actor_backend(config, actor)
        try:
            findings += examine("actor", actor, backend, updates)
        finally:
            backend.close()
    if cls.trains_extractor and config.experience.memory == "extractor":
        extractor = PolicyOptimizer.from_settings(
            config.extractor, "extractor", loss=hooks.extractor_loss()
        )
        findings += examine("extractor", extractor, policy_backend(extractor), updates)
    return findings


def examine(
    name: str,
    optimizer: PolicyOptimizer,
    backend: Any,
    updates: int,
    push: Callable[[], None] | None = None,
) -> list[Finding]:
    """The checks of the module docstring on one model and its rollout engine. ``push``
    refreshes the engine after an update (default: ``backend.update_weights`` of the
    model's rollout weights where the engine holds its own copy, as the trainer pushes)."""
    tokenizer = optimizer.tokenizer
    prompt = backend.apply_chat_template([{"role": "user", "content": PROMPT}])
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    target = int(tokenizer(TARGET, add_special_tokens=False)["input_ids"][0])
    other = int(tokenizer(" east", add_special_tokens=False)["input_ids"][0])
    if other == target:
        other = (target + 1) % len(tokenizer)
    temperature = optimizer.settings.temperature
    group = [
        TrainSample.from_generation(prompt_ids, [token], advantage, temperature=temperature)
        for token, advantage in ((target, 1.0), (other, -1.0))
    ]
    if push is None and getattr(backend, "supports_weight_sync", False):
        push = lambda: backend.update_weights(optimizer.rollout_weights())  # noqa: E731
    out: list[Finding] = []

    def add(check: str, passed: bool, detail: str) -> None:
        out.append(Finding(name, check, bool(passed), detail))

    trainable = sum(p.numel() for p in optimizer.model.parameters() if p.requires_grad)
    add(
        "trainable weights",
        trainable > 0,
        f"{trainable:,} trainable parameters"
        + ("" if trainable else ": nothing to train (LoRA targets, frozen layers?)"),
    )
    engine_before = engine_logprob(backend, prompt, target)
    model_before = model_logprob(optimizer, prompt_ids, target)
    weights = optimizer.trainable_weights()
    first: dict[str, Any] = {}
    error = ""
    try:
        for _ in range(updates):
            stats = optimizer.update(group)
            first = first or stats
    except RuntimeError as exc:  # e.g. autograd: nothing in the loss requires a gradient
        error = f": the update failed ({exc})"
    moved = max(
        (
            (now - weights[key]).abs().max().item()
            for key, now in optimizer.trainable_weights().items()
        ),
        default=0.0,
    )
    norm = float(first.get("grad_norm", 0.0))
    add(
        "gradient",
        norm > 0 and math.isfinite(norm),
        f"first update's gradient norm {norm:.3g}"
        + (error or ("" if norm > 0 else ": the loss does not reach the trainable weights")),
    )
    add(
        "weights move",
        moved > 0,
        f"largest change of a trainable weight after {updates} updates: {moved:.3g}"
        + ("" if moved > 0 else f" (lr {optimizer.settings.lr}: a no-op update)"),
    )
    entropy = first.get("entropy")
    add(
        "entropy",
        entropy is not None and entropy >= ENTROPY_FLOOR,
        f"policy entropy at the trained token {entropy if entropy is None else f'{entropy:.3g}'}"
        f" nats (floor {ENTROPY_FLOOR})",
    )
    model_after = model_logprob(optimizer, prompt_ids, target)
    rise = model_after - model_before
    add(
        "learns the known answer",
        rise >= LEARNT,
        f"log p(rewarded token) {model_before:.3f} -> {model_after:.3f} after {updates} updates"
        + ("" if rise >= LEARNT else f": rose less than {LEARNT}"),
    )
    if push is not None:
        push()
    engine_after = engine_logprob(backend, prompt, target)
    in_step = abs(engine_after - model_after) <= ENGINE_TOLERANCE
    add(
        "engine serves pushed weights",
        in_step and (abs(engine_after - engine_before) > 1e-6 or rise < LEARNT),
        f"engine log p {engine_before:.3f} -> {engine_after:.3f}, trained model {model_after:.3f}"
        + ("" if in_step else ": the rollout engine samples from stale weights"),
    )
    return out


def model_logprob(optimizer: PolicyOptimizer, prompt_ids: list[int], token: int) -> float:
    """The trained model's log-prob of ``token`` after ``prompt_ids`` (temperature 1)."""
    model = optimizer.model
    was_training = model.training
    model.eval()
    with torch.no_grad():
        ids = torch.tensor([prompt_ids], device=optimizer.device)
        logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits[0, -1].float()
    model.train(was_training)
    return float(torch.log_softmax(logits, -1)[token])


def engine_logprob(backend: Any, prompt: str, token: int) -> float:
    """The rollout engine's log-prob of ``token`` after ``prompt`` (a one-token greedy
    generation allowed only that token: the engine's own report, temperature 1)."""
    from comprl_gym.llm import SamplingParams

    params = SamplingParams(
        max_tokens=1, temperature=0.0, logprobs=True, allowed_token_ids=(token,)
    )
    [generation] = backend.generate([prompt], params)
    return float(generation.completion_logprobs[0])


def findings_table(findings: list[Finding]) -> str:
    """The findings as a markdown table.

    Example:
        >>> print(findings_table([Finding("actor", "gradient", True, "norm 0.5")]))
        | model | check | verdict | measured |
        | --- | --- | --- | --- |
        | actor | gradient | ok | norm 0.5 |
    """
    lines = ["| model | check | verdict | measured |", "| --- | --- | --- | --- |"]
    for f in findings:
        lines.append(f"| {f.model} | {f.check} | {'ok' if f.passed else 'FAILED'} | {f.detail} |")
    return "\n".join(lines)


__all__ = ["Finding", "diagnose", "engine_logprob", "examine", "findings_table", "model_logprob"]
