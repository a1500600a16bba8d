"""The reading warm-up: supervised steps that teach the actor to act on a lesson, before RL.

A small actor trained by GRPO alone tends to settle on one blind answer and ignore its
lessons; then what the lessons do cannot be measured. ``TrainConfig.warmup`` first takes
``warmup.steps`` optimiser steps of cross-entropy on the actor's first reply to training tasks
whose system prompt holds a lesson, labelled with the action a reader of the lesson takes.
The examples are the family's (:attr:`~comprl_gym.lessons.core.FamilyLessons.reading_examples`, e.g.
:func:`comprl_gym.envs.memory.lessons.reading_examples`); each becomes the prompt the actor
really sees at step 0 (the env reset with the example's options, the trainer's prompt
settings, the lessons in the system message, the reply's prefill), followed by the answer's
number and the end-of-reply token, the two labelled tokens.

Each step draws ``warmup.batch_size`` examples (``random.Random(seed).sample``, or whole groups
of one task's examples with ``warmup.twins``: :func:`draw_batch`) and takes one
:class:`~comprl_gym.trainers.policy.PolicyOptimizer` step of
:class:`~comprl_gym.trainers.losses.CrossEntropy` on them: padded micro-batches, one forward
pass each, the LM head run on the labelled positions only. The warm-up's optimiser is a fresh
AdamW at ``warmup.lr`` over the actor's trained weights (the actor's own optimiser state is
left as it was); weight decay, gradient clipping and micro-batch size are the actor's.

:func:`run_warmup` is what :meth:`~comprl_gym.trainers.base.Trainer.train` calls once, before
iteration 1: it logs every step's loss and per-format mean loss to the run's metrics
(``warmup/loss``, ``warmup/loss/<format>``, at step 0), pushes the weights to the rollout
engine and writes ``<output_dir>/warmup/reader.pt`` (its sha256 in the record), a file a
later run starts from with ``actor.init_weights``.

Example:
    >>> from comprl_gym.trainers.config import TrainConfig
    >>> cfg = TrainConfig.from_dict({"env_ids": ["comprl/Memory-Fork-v0"],
    ...     "warmup": {"steps": 4, "formats": ["oracle"], "sides": "true"}})
    >>> [(env_id, e.format, e.answer) for env_id, e in reading_examples(cfg)][:1]
    [('comprl/Memory-Fork-v0', 'oracle', 'west')]
    >>> check_warmup(TrainConfig.from_dict({"env_ids": ["comprl/WebShop-v0"],
    ...     "warmup": {"steps": 4}}))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    comprl_gym.core.ConfigurationError: warmup.steps: the 'webshop' family ...
"""

from __future__ import annotations

import random
import time
from dataclasses import replace
from typing import Any

from comprl_gym.agents.prompts import PromptConfig, answer_prefill, build_messages
from comprl_gym.core import ConfigurationError
from comprl_gym.env_factory import EnvSpec, make_env, require_registered
from comprl_gym.families import family_spec
from comprl_gym.lessons.core import ReadingExample
from comprl_gym.registration import ENV_TABLE
from comprl_gym.trainers.config import TrainConfig
from comprl_gym.trainers.losses import CrossEntropy
from comprl_gym.trainers.policy import PolicyOptimizer, TrainSample
from comprl_gym.utils import atomic_write_json

#: Where the warm-up writes, under the run's output folder: the reader's weights and the record.
WARMUP_DIR = "warmup"
READER_FILE = "reader.pt"


def reading_examples(config: TrainConfig) -> list[tuple[str, ReadingExample]]:
    """Every env id's reading examples (``warmup.split``, ``formats``, ``sides``), with the env
    id they are played in, in ``env_ids`` order.

    Raises:
        ConfigurationError: a family of ``env_ids`` has no ``reading_examples`` (naming it),
            or the family refuses the formats or sides.
    """
    warmup = config.warmup
    out: list[tuple[str, ReadingExample]] = []
    for env_id in config.env_ids:
        require_registered(env_id)
        entry = ENV_TABLE[env_id]
        spec = family_spec(entry.family)
        if spec is None or spec.lessons.reading_examples is None:
            raise ConfigurationError(
                f"warmup.steps: the {entry.family!r} family ({env_id}) has no reading_examples "
                "to warm the actor up on (set warmup.steps: 0, or leave it out of env_ids)"
            )
        # The arguments the env is made with: its registered ones, then the run's.
        kwargs = {**entry.kwargs, **config.env_kwargs.get(env_id, {})}
        examples = spec.lessons.reading_examples(
            warmup.split, tuple(warmup.formats), warmup.sides, kwargs
        )
        out += [(env_id, example) for example in examples]
    return out


def check_warmup(config: TrainConfig, trains_actor: bool = True) -> None:
    """Refuse a warm-up that cannot run, before any model loads: a family without reading
    examples, formats or sides its family refuses, fewer examples than ``batch_size``, a
    frozen actor (``trains_actor`` false) or data-parallel actor updates."""
    warmup = config.warmup
    if not trains_actor:
        raise ConfigurationError(
            f"warmup.steps: the {config.algorithm} trainer keeps the actor frozen; warm it up "
            "in a run of its own and start from its reader with actor.init_weights"
        )
    if config.distributed.enabled and config.distributed.trainer_ranks > 1:
        raise ConfigurationError(
            "warmup.steps runs in one process: warm the actor up in a run without "
            "distributed.trainer_ranks and start from its reader with actor.init_weights"
        )
    count = len(reading_examples(config))
    if count < warmup.batch_size:
        raise ConfigurationError(
            f"warmup.batch_size {warmup.batch_size} exceeds the {count} reading examples"
        )


def reading_samples(
    config: TrainConfig,
    examples: list[tuple[str, ReadingExample]],
    tokenizer: Any,
    prompt: PromptConfig,
) -> list[TrainSample]:
    """Each example as a supervised sample: the actor's first prompt (its env reset with the
    example's options; the run's ``env_kwargs`` and step limit, the example's split; the
    lessons in the system message; ``prompt``'s settings and prefill) followed by the
    answer's number and the end-of-reply token, the only tokens with mask 1 (without the end
    token an actor learnt to start the right number and went on repeating its digit). Its
    ``meta`` holds the env id, task id and lesson format."""
    end = tokenizer.eos_token_id
    envs: dict[str, Any] = {}
    # (env id, reset options) -> the first observation, info and task: a task is reset once
    # however many lessons it is shown with.
    starts: dict[tuple[str, str], tuple[str, dict[str, Any], str]] = {}
    samples = []
    try:
        for env_id, example in examples:
            if env_id not in envs:
                kwargs = {
                    "max_steps": config.max_episode_steps,
                    **config.env_kwargs.get(env_id, {}),
                }
                envs[env_id] = make_env(EnvSpec.of(env_id, kwargs | {"split": config.warmup.split}))
            key = (env_id, repr(sorted(example.reset_options.items())))
            if key not in starts:
                obs, info = envs[env_id].reset(options=example.reset_options)
                starts[key] = (obs, info, envs[env_id].unwrapped.task)
            obs, info, task = starts[key]
            admissible = info.get("admissible_actions") or []
            prefill, _ = answer_prefill(admissible, prompt)
            # The label is the action's number: the prompt must list numbered actions and
            # start the reply with "Action number: " (answer_style number, prefill on).
            if example.answer not in admissible or "number" not in prefill.lower():
                raise ConfigurationError(
                    f"warmup: {env_id} task {example.task_id}: the answer {example.answer!r} is "
                    f"not one of the numbered actions the prompt lists ({admissible})"
                )
            messages = build_messages(
                info["env_family"],
                task,
                [],
                obs,
                admissible,
                prompt,
                experiences=list(example.lessons),
            )
            text = tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=True
            )
            ids = tokenizer(text + prefill, add_special_tokens=False)["input_ids"]
            number = str(admissible.index(example.answer) + 1)
            reply = [*tokenizer(number, add_special_tokens=False)["input_ids"], end]
            samples.append(
                TrainSample(
                    [*ids, *reply],
                    [0] * len(ids) + [1] * len(reply),
                    advantage=1.0,  # CrossEntropy ignores it; nonzero marks a useful sample
                    meta={
                        "env_id": env_id,
                        "task_id": example.task_id,
                        "format": example.format,
                    },
                )
            )
    finally:
        for env in envs.values():
            env.close()
    return samples


def draw_batch(
    samples: list[TrainSample], batch_size: int, rng: random.Random, twins: bool = False
) -> list[TrainSample]:
    """One warm-up step's samples: ``batch_size`` drawn without replacement
    (``rng.sample``), or with ``twins`` whole groups of one task's examples in one format
    (their ``meta``'s env id, task id and format), taken in ``rng``'s shuffled order while they
    fit, until the batch is full (``warmup.twins``).

    Example:
        >>> samples = [TrainSample([1, 2], [0, 1], 1.0, meta={"env_id": "e", "task_id": t,
        ...     "format": "rule"}) for t in "aabbcc"]
        >>> batch = draw_batch(samples, 4, random.Random(0), twins=True)
        >>> sorted(s.meta["task_id"] for s in batch) in (list("aabb"), list("aacc"), list("bbcc"))
        True
    """
    if not twins:
        return rng.sample(samples, batch_size)
    groups: dict[tuple[str, str, str], list[TrainSample]] = {}
    for sample in samples:
        key = (sample.meta["env_id"], sample.meta["task_id"], sample.meta["format"])
        groups.setdefault(key, []).append(sample)
    batch: list[TrainSample] = []
    for group in rng.sample(list(groups.values()), len(groups)):
        if len(batch) + len(group) <= batch_size:
            batch += group
        if len(batch) == batch_size:
            break
    return batch


def next_token_logits(model: Any, prompts: list[list[int]], batch_size: int = 8) -> Any:
    """The model's next-token logits after each prompt (token ids; e.g. a reading sample's
    ids up to its first labelled token, where the actor answers), ``[len(prompts), vocab]``,
    in right-padded batches with no gradient: how the actor's first choice is read without a
    draw."""
    import torch

    rows = []
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for start in range(0, len(prompts), batch_size):
            chunk = prompts[start : start + batch_size]
            width = max(len(ids) for ids in chunk)
            ids = torch.tensor([i + [0] * (width - len(i)) for i in chunk])
            mask = torch.tensor([[1] * len(i) + [0] * (width - len(i)) for i in chunk])
            logits = model(input_ids=ids, attention_mask=mask).logits
            # Right-padded: each prompt's last real position, before any padding.
            rows += [logits[row, len(i) - 1] for row, i in enumerate(chunk)]
    model.train(was_training)
    return torch.stack(rows)


def warmup_optimizer(actor: PolicyOptimizer, lr: float) -> PolicyOptimizer:
    """A :class:`PolicyOptimizer` of cross-entropy over ``actor``'s own model (the same weights)
    with a fresh AdamW at ``lr``; the actor's optimiser and its state are not touched."""
    optimizer = PolicyOptimizer(
        actor.model, actor.tokenizer, replace(actor.settings, lr=lr), loss=CrossEntropy()
    )
    optimizer.before_step = actor.before_step  # a colocated vLLM engine sleeps here too
    return optimizer


def run_warmup(trainer: Any) -> dict[str, Any]:
    """``warmup.steps`` supervised steps on ``trainer``'s actor (see the module docstring);
    returns the record the run's summary keeps (losses per step and per format, the reader
    file and its sha256, the time taken)."""
    from tqdm import tqdm

    cfg: TrainConfig = trainer.config
    warmup = cfg.warmup
    start = time.perf_counter()
    examples = reading_examples(cfg)
    samples = reading_samples(
        cfg, examples, trainer.actor.tokenizer, trainer.agent(None).config.prompt
    )
    optimizer = warmup_optimizer(trainer.actor, warmup.lr)
    formats = list(dict.fromkeys(s.meta["format"] for s in samples))
    rng = random.Random(cfg.seed)
    losses: list[float] = []
    by_format: dict[str, list[float | None]] = {name: [] for name in formats}
    bar = tqdm(range(warmup.steps), desc="reading warm-up", disable=not cfg.progress)
    for step in bar:
        batch = draw_batch(samples, warmup.batch_size, rng, warmup.twins)
        stats = optimizer.update(batch)
        record: dict[str, Any] = {
            "warmup/step": step + 1,
            "warmup/loss": stats["loss"],
            "warmup/grad_norm": stats["grad_norm"],
        }
        for name in formats:
            terms = [v for s, v in zip(batch, stats["sequence_losses"]) if s.meta["format"] == name]
            mean = sum(terms) / len(terms) if terms else None  # None: no example of it drawn
            by_format[name].append(mean)
            if mean is not None:
                record[f"warmup/loss/{name}"] = mean
        losses.append(stats["loss"])
        trainer.metrics.log(0, record)
        bar.set_postfix(loss=f"{stats['loss']:.3f}")
    bar.close()
    trainer.push_weights()
    folder = trainer.output_dir / WARMUP_DIR
    reader = folder / READER_FILE
    digest = trainer.actor.save_weights(reader)
    result = {
        "steps": warmup.steps,
        "formats": list(warmup.formats),
        "sides": warmup.sides,
        "lr": warmup.lr,
        "batch_size": warmup.batch_size,
        "twins": warmup.twins,
        "split": warmup.split,
        "examples": len(samples),
        "losses": losses,
        "losses_by_format": by_format,
        "reader": str(reader),
        "reader_sha256": digest,
        "time_s": time.perf_counter() - start,
    }
    atomic_write_json(folder / "warmup.json", result)
    trainer.metrics.log(0, {"warmup/reader_sha256": digest, "warmup/time_s": result["time_s"]})
    return result


def warmup_loss_summary(record: dict[str, Any]) -> dict[str, Any]:
    """A warm-up's record (its ``warmup.json``) in brief: its settings, its reader's sha256,
    its time, and the mean loss per format over its first and last ten steps (steps where a
    format was not drawn are left out).

    Example:
        >>> record = {"steps": 12, "lr": 1e-3, "formats": ["oracle"], "sides": "both",
        ...           "batch_size": 8, "time_s": 60.0, "reader_sha256": "ab12",
        ...           "losses_by_format": {"oracle": [2.0] * 2 + [None] + [1.0] * 9}}
        >>> summary = warmup_loss_summary(record)
        >>> summary["first_ten"], summary["last_ten"]
        ({'oracle': 1.222}, {'oracle': 1.0})
    """

    def mean(values: list[float | None]) -> float:
        kept = [v for v in values if v is not None]
        return round(sum(kept) / len(kept), 3)

    losses = record["losses_by_format"]
    return {
        **{k: record[k] for k in ("steps", "lr", "formats", "sides", "batch_size", "time_s")},
        "reader_sha256": record["reader_sha256"],
        "first_ten": {f: mean(v[:10]) for f, v in losses.items()},
        "last_ten": {f: mean(v[-10:]) for f, v in losses.items()},
    }


__all__ = [
    "READER_FILE",
    "WARMUP_DIR",
    "check_warmup",
    "draw_batch",
    "reading_examples",
    "reading_samples",
    "run_warmup",
    "warmup_loss_summary",
    "warmup_optimizer",
]
