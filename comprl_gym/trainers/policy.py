"""One policy-gradient update of a causal LM on scored token sequences.

A :class:`TrainSample` is a token sequence (prompt + the model's own completion), a 0/1 mask
that is 1 only on the tokens the model generated (prompts, env observations, tool answers and
padding are 0), the sequence's advantage and, when the sampler gave them, the sampling
log-probabilities. :class:`PolicyOptimizer` owns a model and its AdamW optimiser and turns a
batch of samples into one optimiser step with either loss of :mod:`comprl_gym.trainers.losses`.

Example:
    >>> from comprl_gym.trainers.policy import PolicyOptimizer, TrainSample
    >>> from comprl_gym.trainers.config import ModelSettings
    >>> from comprl_gym.trainers.losses import CISPO
    >>> opt = PolicyOptimizer.from_settings(ModelSettings(model="tiny", lr=1e-3), loss=CISPO())
    >>> sample = TrainSample([5, 6, 7, 8], [0, 0, 1, 1], advantage=1.0)
    >>> stats = opt.update([sample])
    >>> stats["tokens"]
    2
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from comprl_gym.core import ConfigurationError, require
from comprl_gym.llm.devices import resolve_dtype, resolve_placement
from comprl_gym.llm.models import resolve_model
from comprl_gym.trainers.config import ModelSettings
from comprl_gym.trainers.losses import (
    ClippedPG,
    Loss,
    ScoredTokens,
    aggregate,
    score_positions,
    token_logprobs,
)
from comprl_gym.utils import atomic_write_bytes

logger = logging.getLogger(__name__)


@dataclass
class TrainSample:
    """One sequence to learn from.

    Attributes:
        input_ids: prompt and completion token ids.
        action_mask: 1 on tokens the trained model generated, 0 elsewhere (same length).
        advantage: the sequence's advantage.
        old_logprobs: sampling log-probability per token (aligned with ``input_ids``; entries
            under mask 0 are ignored), or ``None`` to treat the batch as on-policy.
        weight: multiplies the advantage (the extractor's training-count-aware reweighting).
        meta: free-form bookkeeping (env id, group, half...).
        temperature: the temperature the trained tokens were sampled at.
        allowed_token_ids: the only tokens the sampler could draw at the trained positions
            (the stem extractor's choices), ``None``: any. With ``score: sampled`` the loss
            scores the trained tokens under this temperature and restriction.
    """

    input_ids: list[int]
    action_mask: list[int]
    advantage: float
    old_logprobs: list[float] | None = None
    weight: float = 1.0
    meta: dict[str, Any] = field(default_factory=dict)
    temperature: float = 1.0
    allowed_token_ids: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if len(self.input_ids) != len(self.action_mask):
            raise ConfigurationError(
                f"input_ids ({len(self.input_ids)}) and action_mask ({len(self.action_mask)}) "
                "must have the same length"
            )
        if self.old_logprobs is not None and len(self.old_logprobs) != len(self.input_ids):
            raise ConfigurationError("old_logprobs must align with input_ids")

    @classmethod
    def from_generation(
        cls, prompt_ids: list[int], completion_ids: list[int], advantage: float, **kwargs: Any
    ) -> TrainSample:
        """Prompt tokens masked out, completion tokens trained on."""
        logprobs = kwargs.pop("completion_logprobs", None)
        old = None
        if logprobs is not None and len(logprobs) == len(completion_ids):
            old = [0.0] * len(prompt_ids) + list(logprobs)
        return cls(
            list(prompt_ids) + list(completion_ids),
            [0] * len(prompt_ids) + [1] * len(completion_ids),
            advantage,
            old_logprobs=old,
            **kwargs,
        )

    @property
    def num_action_tokens(self) -> int:
        return int(sum(self.action_mask))

    @property
    def has_signal(self) -> bool:
        """Whether the sample moves the weights: some trained token and a nonzero advantage."""
        return self.num_action_tokens > 0 and self.advantage * self.weight != 0


def load_causal_lm(settings: ModelSettings, setting: str = "model") -> tuple[Any, Any]:
    """Load ``settings.model`` (``smollm2``, ``tiny`` or a folder) for training, with LoRA if
    set, on the device of ``settings.device`` / ``settings.dtype`` (``setting`` names the
    config section in errors: ``actor``, ``extractor``).

    Trained weights are float32 (the optimiser's master weights): under LoRA the frozen base
    is stored in the resolved dtype and PEFT keeps the adapters in float32; full fine-tuning
    keeps every weight in float32 and computes in the resolved dtype under autocast
    (:mod:`comprl_gym.llm.devices` says why).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    placement = resolve_placement(settings.device, settings.dtype, setting)
    path = resolve_model(settings.model)
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    stored = placement.dtype if settings.lora.enabled else torch.float32
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=stored).to(placement.device)
    if settings.gradient_checkpointing:
        # Non-reentrant: works with frozen inputs (LoRA) without enable_input_require_grads.
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if settings.lora.enabled:
        peft = require("peft", "LoRA training", "train")
        blocks = int(model.config.num_hidden_layers)
        top = settings.lora.top_layers
        if not 0 <= top <= blocks:
            raise ConfigurationError(
                f"lora.top_layers must be between 0 and the model's {blocks} blocks, got {top}"
            )
        targets = settings.lora.target_modules
        if top and targets == "all-linear":  # PEFT wants module names with layers_to_transform
            targets = sorted(
                {
                    name.rsplit(".", 1)[-1]
                    for name, module in model.named_modules()
                    if isinstance(module, torch.nn.Linear) and "lm_head" not in name
                }
            )
        lora = peft.LoraConfig(
            r=settings.lora.r,
            lora_alpha=settings.lora.alpha,
            lora_dropout=settings.lora.dropout,
            target_modules=targets,
            layers_to_transform=list(range(blocks - top, blocks)) if top else None,
            task_type="CAUSAL_LM",
        )
        # PEFT builds the adapters on their layer's device, in float32 (autocast_adapter_dtype).
        model = peft.get_peft_model(model, lora)
    for param in model.parameters():
        if param.requires_grad and param.dtype != torch.float32:
            param.data = param.data.float()
    return model, tokenizer


class _FloatLogits:
    """``model`` with its logits cast to float32, so that :func:`token_logprobs` takes the
    log-softmax and the picked logit's difference in float32 under a bfloat16 autocast."""

    def __init__(self, model: Any):
        self.model = model

    def __call__(self, **kwargs: Any) -> Any:
        output = self.model(**kwargs)
        output.logits = output.logits.float()
        return output


class WeightStream:
    """A model's full weights in Hugging Face names, one tensor at a time, for a rollout
    engine: what ``merge_and_unload().state_dict()`` would hold, without a copy of the model.

    Iterating yields ``(name, tensor)`` pairs (``items()`` too, so a consumer of a state dict
    can read it). A plain model's tensors are yielded as they are (no copy). Under PEFT LoRA
    each adapted linear's weight is computed when its turn comes, ``W + scale * B @ A``
    (PEFT's own ``get_delta_weight``, cast to W's dtype as PEFT's merge does), and the adapter
    tensors are left out; only one merged weight exists at a time unless the consumer keeps
    them. An adapter kind this does not merge (DoRA, LoRA bias, non-linear layers) falls back
    to merging a deep copy. Each pass reads the model's current weights.
    """

    def __init__(self, model: Any):
        self.model = model

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        return self.items()

    def items(self) -> Iterator[tuple[str, torch.Tensor]]:
        model = self.model
        if not hasattr(model, "merge_and_unload"):
            for name, tensor in model.state_dict().items():
                yield name, tensor.detach()
            return
        from peft.tuners.lora import LoraLayer

        base = model.get_base_model()
        layers = {name: m for name, m in base.named_modules() if isinstance(m, LoraLayer)}
        if not all(_plainly_mergeable(layer) for layer in layers.values()):
            import copy

            logger.info("weight push: merging a deep copy (an adapter kind merged only by PEFT)")
            merged = copy.deepcopy(model).merge_and_unload()
            for name, tensor in merged.state_dict().items():
                yield name, tensor.detach()
            return
        with torch.no_grad():
            for name, tensor in base.state_dict(keep_vars=True).items():
                owner = _owner(name, layers)
                if owner is None:
                    yield name, tensor.detach()
                    continue
                prefix = f"{owner}.base_layer."
                if not name.startswith(prefix):
                    continue  # lora_A / lora_B / ...: merged into the base weight
                leaf = name[len(prefix) :]
                if leaf == "weight":
                    tensor = _merged_weight(layers[owner])
                yield f"{owner}.{leaf}", tensor.detach()


def _owner(name: str, layers: dict[str, Any]) -> str | None:
    """The LoRA layer (module name) that state-dict key ``name`` belongs to, if any."""
    parts = name.split(".")
    for end in range(len(parts) - 1, 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in layers:
            return candidate
    return None


def _plainly_mergeable(layer: Any) -> bool:
    """A PEFT LoRA ``Linear`` with plain adapters (no DoRA or other variant, no LoRA bias)."""
    from peft.tuners.lora import Linear

    adapters = [a for a in layer.active_adapters if a in layer.lora_A]
    return (
        type(layer) is Linear
        and not layer.merged
        and not any(a in getattr(layer, "lora_variant", {}) for a in adapters)
        and not any(getattr(layer, "lora_bias", {}).get(a, False) for a in adapters)
    )


def _merged_weight(layer: Any) -> torch.Tensor:
    """``W + sum of the active adapters' deltas``, as PEFT's ``merge`` computes it, in a new
    tensor (the layer is not touched)."""
    weight = layer.get_base_layer().weight
    merged = weight.detach().clone()
    for adapter in layer.active_adapters:
        if adapter in layer.lora_A:
            merged += layer.get_delta_weight(adapter)  # in place: PEFT's merge rounds once
    return merged


class PolicyOptimizer:
    """A causal LM, its AdamW optimiser and one loss: ``update(samples)`` is one step.

    ``loss`` is any :class:`~comprl_gym.trainers.losses.Loss`: the actor's clipped surrogate
    (:class:`~comprl_gym.trainers.losses.ClippedPG`, the default) or the extractor's
    :class:`~comprl_gym.trainers.losses.CISPO`. ``trainable=False`` freezes the model (the
    baselines' frozen actor or extractor): ``update`` reports the batch and steps nothing.
    Micro-batches accumulate gradients with the full batch's normaliser, so the step equals
    one full-batch step whatever ``micro_batch_size`` is.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        settings: ModelSettings,
        loss: Loss | None = None,
        trainable: bool = True,
    ):
        if loss is not None and not callable(loss):
            raise ConfigurationError(
                f"loss must be a Loss (ClippedPG(), CISPO(), ...), got {loss!r}"
            )
        self.model = model
        self.tokenizer = tokenizer
        self.settings = settings
        self.loss: Loss = loss if loss is not None else ClippedPG()
        self.trainable = trainable
        self.pad_id = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0)
        self.steps = 0
        #: Called before the forward passes of a step that will move the weights (a
        #: colocated vLLM engine's ``sleep``, which frees its GPU memory for the update).
        self.before_step: Callable[[], None] | None = None
        self._device = next(model.parameters()).device
        #: The dtype forward passes compute in (``settings.dtype`` on this model's device):
        #: below float32 they run under autocast, log-probs are still taken in float32.
        self.compute_dtype = resolve_dtype(settings.dtype, self._device)
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            params, lr=settings.lr, weight_decay=settings.weight_decay
        )

    @classmethod
    def from_settings(
        cls, settings: ModelSettings, setting: str = "model", **kwargs: Any
    ) -> PolicyOptimizer:
        """Load the model of ``settings`` (``setting`` names its config section in errors:
        ``actor``, ``extractor``) and build its optimiser."""
        model, tokenizer = load_causal_lm(settings, setting)
        optimizer = cls(model, tokenizer, settings, **kwargs)
        if settings.init_weights:
            optimizer.load_weights(settings.init_weights, f"{setting}.init_weights")
        return optimizer

    @property
    def device(self) -> torch.device:
        """Where the model's weights live (batches are moved there), as one object for the
        optimiser's lifetime: a generation backend built around the model holds this very
        object (``backend.device is optimizer.device``)."""
        current = next(self.model.parameters()).device
        if current != self._device:  # moved since (a data-parallel rank's replica)
            self._device = current
        return self._device

    def _autocast(self) -> Any:
        """Forward passes in :attr:`compute_dtype` (a no-op in float32)."""
        if self.compute_dtype == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.compute_dtype)

    def _scorer(self) -> Any:
        """The model as :func:`token_logprobs` should call it: float32 logits when the
        forward computes in a lower precision."""
        return self.model if self.compute_dtype == torch.float32 else _FloatLogits(self.model)

    def _score(
        self,
        chunk: list[TrainSample],
        batch: dict[str, torch.Tensor],
        positions: torch.Tensor,
        trained: torch.Tensor,
    ) -> ScoredTokens:
        """The chunk's tokens at ``positions`` scored as ``settings.score`` says: ``raw`` at
        temperature 1 over every token, ``sampled`` at each sample's temperature over its
        allowed tokens where it ``trained`` (``(batch, positions)``: the tokens it sampled),
        ``choices`` at temperature 1 over those allowed tokens."""
        temperature: float | torch.Tensor = 1.0
        allowed = None
        if self.settings.score in ("sampled", "choices"):
            if self.settings.score == "sampled":
                temperature = torch.tensor([s.temperature for s in chunk], device=self.device)
            if any(s.allowed_token_ids for s in chunk):
                vocab = max(
                    len(self.tokenizer),
                    1 + max(t for s in chunk for t in s.allowed_token_ids or (0,)),
                )
                vocab = max(vocab, int(self.model.config.vocab_size))
                allowed = torch.ones((len(chunk), vocab), dtype=torch.bool, device=self.device)
                for row, sample in enumerate(chunk):
                    if sample.allowed_token_ids:
                        allowed[row] = False
                        allowed[row, list(sample.allowed_token_ids)] = True
        with self._autocast():
            return score_positions(
                self._scorer(),
                batch["input_ids"],
                batch["attention_mask"],
                positions,
                temperature,
                allowed,
                # Only a row's own trained tokens were sampled under its restriction.
                None if allowed is None else trained > 0,
            )

    # ------------------------------------------------------------------ batching
    def _pad(self, samples: list[TrainSample]) -> dict[str, torch.Tensor]:
        length = max(len(s.input_ids) for s in samples)
        n = len(samples)
        ids = torch.full((n, length), self.pad_id, dtype=torch.long)
        attention = torch.zeros((n, length), dtype=torch.long)
        mask = torch.zeros((n, length), dtype=torch.float32)
        old = torch.zeros((n, length), dtype=torch.float32)
        has_old = torch.zeros((n, 1), dtype=torch.bool)
        for i, s in enumerate(samples):
            k = len(s.input_ids)
            ids[i, :k] = torch.tensor(s.input_ids)
            attention[i, :k] = 1
            mask[i, :k] = torch.tensor(s.action_mask, dtype=torch.float32)
            if s.old_logprobs is not None:
                old[i, :k] = torch.tensor(s.old_logprobs, dtype=torch.float32)
                has_old[i] = True
        advantages = torch.tensor([s.advantage * s.weight for s in samples], dtype=torch.float32)
        # Position t of the log-prob tensor scores token t + 1: shift masks and old logprobs.
        batch = {
            "input_ids": ids,
            "attention_mask": attention,
            "mask": mask[:, 1:],
            "old": old[:, 1:],
            "has_old": has_old,
            "advantages": advantages,
        }
        device = self.device
        return batch if device.type == "cpu" else {k: v.to(device) for k, v in batch.items()}

    def fill_old_logprobs(self, samples: list[TrainSample]) -> list[TrainSample]:
        """Copies of ``samples`` whose ``old_logprobs`` are this model's current log-probs
        (no gradient), for a batch reused over several epochs: the reference recomputes old
        log-probs with the trainer before the update
        (``roll/pipeline/agentic/multi_agentic_pipeline.py``, ``actor_train.compute_log_probs``).
        """
        out = []
        was_training = self.model.training
        self.model.eval()
        micro = max(1, self.settings.micro_batch_size)
        with torch.no_grad():
            for begin in range(0, len(samples), micro):
                chunk = samples[begin : begin + micro]
                batch = self._pad(chunk)
                if self.settings.score == "raw":
                    with self._autocast():
                        logp = token_logprobs(
                            self._scorer(), batch["input_ids"], batch["attention_mask"]
                        )
                else:
                    every = torch.arange(batch["input_ids"].shape[1] - 1, device=self.device)
                    logp = self._score(chunk, batch, every, batch["mask"]).logp
                for row, sample in enumerate(chunk):
                    n = len(sample.input_ids)
                    # Entry t scores token t + 1; token 0 has no log-prob (never trained).
                    old = [0.0] + logp[row, : n - 1].tolist()
                    out.append(dataclasses.replace(sample, old_logprobs=old))
        self.model.train(was_training)
        return out

    # ------------------------------------------------------------------ the step
    def update(
        self,
        samples: list[TrainSample],
        *,
        num_tokens: float | None = None,
        num_sequences: float | None = None,
        reduce_gradients: Callable[[list[torch.nn.Parameter]], None] | None = None,
        micro_batches: int = 0,
    ) -> dict[str, float]:
        """One optimiser step on ``samples``; returns loss and throughput statistics.

        Samples without a learning signal (advantage 0 or no action token) are skipped; a
        batch with none left makes no step (AdamW would still move the weights through its
        momentum and weight decay).

        A data-parallel rank (:mod:`comprl_gym.trainers.data_parallel`) passes its share of
        a batch with the whole batch's normalisers ``num_tokens`` / ``num_sequences`` (trained
        tokens and useful sequences over every rank), so its loss is its share of the
        full-batch loss, and ``reduce_gradients``, which sums the gradients over the ranks
        after the backward passes and before clipping and the step. It then steps even with
        no useful sample of its own: the other ranks' gradients are its gradients too. A
        sharded (FSDP) rank's forward is a collective, so every rank runs ``micro_batches``
        forward/backward passes at least: the ones beyond its share score nothing (loss 0).
        """
        start = time.perf_counter()
        useful = [s for s in samples if s.has_signal]
        total_tokens = sum(len(s.input_ids) for s in useful)
        stats: dict[str, float] = {
            "loss": 0.0,
            "samples": len(useful),
            "tokens": sum(s.num_action_tokens for s in useful),
            "seq_tokens": total_tokens,
            "grad_norm": 0.0,
            "clip_fraction": 0.0,
            "update_time_s": 0.0,
        }
        if not self.trainable or (not useful and reduce_gradients is None):
            return stats
        if self.before_step is not None:
            self.before_step()
        self.model.train()
        num_tokens = float(stats["tokens"] if num_tokens is None else num_tokens)
        num_sequences = float(len(useful) if num_sequences is None else num_sequences)
        micro = max(1, self.settings.micro_batch_size)
        self.optimizer.zero_grad(set_to_none=True)
        clip_sum = 0.0
        entropy_sum = 0.0
        sequence_losses: dict[int, float] = {}  # by id(sample), where the loss reports them
        # Sort by length so micro-batches pad little.
        ordered = sorted(useful, key=lambda s: len(s.input_ids))
        for begin in range(0, len(ordered), micro):
            chunk = ordered[begin : begin + micro]
            batch = self._pad(chunk)
            # Score only positions where some sequence of the chunk has a trained token: a
            # multi-turn episode trains a few dozen of its thousands of tokens.
            positions = torch.nonzero(batch["mask"].any(dim=0)).flatten()
            for key in ("mask", "old"):
                batch[key] = batch[key][:, positions]
            scored = self._score(chunk, batch, positions, batch["mask"])
            logp = scored.logp
            # ``raw``: the backends' log-probs are of this same unprocessed distribution. The
            # sampled distribution's are not: recompute them (the batch is on-policy).
            has_old = batch["has_old"] & (self.settings.score == "raw")
            old = torch.where(has_old, batch["old"], logp.detach())
            loss, extra = self.loss(
                logp,
                old,
                batch["advantages"],
                batch["mask"],
                num_tokens=num_tokens,
                num_sequences=num_sequences,
            )
            if self.settings.entropy_coef:
                bonus = aggregate(scored.entropy, batch["mask"], "token", num_tokens=num_tokens)
                loss = loss - self.settings.entropy_coef * bonus
            entropy_sum += float((scored.entropy.detach() * batch["mask"]).sum())
            clip_sum += extra.get("clip_fraction", 0.0) * float(batch["mask"].sum())
            sequence_losses.update(zip(map(id, chunk), extra.get("sequence_losses", ())))
            loss.backward()
            stats["loss"] += float(loss.detach())
        for _ in range((len(ordered) + micro - 1) // micro, micro_batches):
            idle = torch.full((1, 2), self.pad_id, dtype=torch.long, device=self.device)
            with self._autocast():
                logits = self.model(input_ids=idle, attention_mask=torch.ones_like(idle)).logits
            (logits.sum() * 0.0).backward()
        params = [p for p in self.model.parameters() if p.requires_grad]
        if reduce_gradients is not None:
            reduce_gradients(params)  # from here every rank holds the full batch's gradient
        if self.settings.max_grad_norm > 0:
            norm = torch.nn.utils.clip_grad_norm_(params, self.settings.max_grad_norm)
        else:
            norm = torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])
        if self.settings.lr_warmup_steps:
            scale = min(1.0, (self.steps + 1) / self.settings.lr_warmup_steps)
            for group in self.optimizer.param_groups:
                group["lr"] = self.settings.lr * scale
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.steps += 1
        elapsed = time.perf_counter() - start
        # A sharded model's norm is a replicated DTensor: the global norm, read as a tensor.
        stats["grad_norm"] = float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
        stats["clip_fraction"] = clip_sum / max(num_tokens, 1.0)
        # The mean entropy (nats) of the scored distribution at this rank's trained tokens.
        stats["entropy"] = entropy_sum / max(float(stats["tokens"]), 1.0)
        stats["update_time_s"] = elapsed
        stats["tokens_per_s"] = total_tokens / max(elapsed, 1e-9)
        if sequence_losses:  # in the order of the useful samples, not the sorted one
            stats["sequence_losses"] = [sequence_losses[id(s)] for s in useful]
        return stats

    # ------------------------------------------------------------------ state
    def rollout_weights(self) -> WeightStream:
        """Full-model weights in Hugging Face names (LoRA merged in), one tensor at a time,
        for a rollout engine's weight push (:class:`WeightStream`: no copy of the model)."""
        return WeightStream(self.model)

    def trainable_state_dict(self) -> dict[str, torch.Tensor]:
        """:meth:`rollout_weights` as a dict (every merged weight held at once)."""
        return dict(self.rollout_weights())

    def trainable_weights(self) -> dict[str, torch.Tensor]:
        """The trained parameters (the LoRA adapters, or every weight without LoRA) by
        parameter name, detached copies on the CPU: what :meth:`save_weights` writes."""
        return {
            name: param.detach().cpu().clone()
            for name, param in self.model.named_parameters()
            if param.requires_grad
        }

    def save_weights(self, path: str | Path) -> str:
        """Write :meth:`trainable_weights` to ``path`` (``torch.save``, atomically: a crash
        leaves the old file or none) and return the file's sha256. A config starts a model
        from it with ``init_weights`` (:meth:`load_weights`)."""
        buffer = io.BytesIO()
        torch.save(self.trainable_weights(), buffer)
        data = buffer.getvalue()
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, data)
        return hashlib.sha256(data).hexdigest()

    def load_weights(self, path: str | Path, setting: str = "init_weights") -> None:
        """Copy a :meth:`save_weights` file into the trained parameters (a run's
        ``provenance.json`` records its sha256). ``setting`` names the config key in errors.

        Raises:
            ConfigurationError: no such file, or it does not fit this model: its error names
                the missing and unknown weights and the shape mismatches (same model and LoRA
                settings as the run that saved it?). Nothing is copied then.
        """
        path = Path(path)
        if not path.is_file():
            raise ConfigurationError(f"{setting}: no file {path}")
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # pickle, zip or torch errors: not a weights file
            raise ConfigurationError(f"{setting}: {path} is not a weights file ({exc})") from exc
        if not isinstance(state, dict):
            raise ConfigurationError(f"{setting}: {path} holds no named weights")
        params = {n: p for n, p in self.model.named_parameters() if p.requires_grad}
        missing = sorted(set(params) - set(state))
        unknown = sorted(set(state) - set(params))
        shapes = [
            f"{name} {tuple(state[name].shape)} (this model: {tuple(params[name].shape)})"
            for name in sorted(set(params) & set(state))
            if tuple(state[name].shape) != tuple(params[name].shape)
        ]
        if missing or unknown or shapes:
            problems = [
                f"{len(items)} {what} (first: {items[0]})"
                for items, what in (
                    (missing, "weights missing from the file"),
                    (unknown, "weights this model does not train"),
                    (shapes, "shape mismatches"),
                )
                if items
            ]
            raise ConfigurationError(
                f"{setting}: {path} does not fit this model (the same model and LoRA settings "
                f"as the run that saved it?): {'; '.join(problems)}"
            )
        with torch.no_grad():
            for name, param in params.items():
                param.copy_(state[name].to(param.device, param.dtype))

    def state_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "steps": self.steps,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.steps = int(state["steps"])
