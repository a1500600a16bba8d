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

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from comprl_gym.core import ConfigurationError, require
from comprl_gym.llm.models import resolve_model
from comprl_gym.trainers.config import ModelSettings
from comprl_gym.trainers.losses import ClippedPG, Loss, token_logprobs

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
    """

    input_ids: list[int]
    action_mask: list[int]
    advantage: float
    old_logprobs: list[float] | None = None
    weight: float = 1.0
    meta: dict[str, Any] = field(default_factory=dict)

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


def load_causal_lm(settings: ModelSettings) -> tuple[Any, Any]:
    """Load ``settings.model`` (``smollm2``, ``tiny`` or a folder) for training, with LoRA if set."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model(settings.model)
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
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
        model = peft.get_peft_model(model, lora)
    return model, tokenizer


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
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            params, lr=settings.lr, weight_decay=settings.weight_decay
        )

    @classmethod
    def from_settings(cls, settings: ModelSettings, **kwargs: Any) -> PolicyOptimizer:
        model, tokenizer = load_causal_lm(settings)
        return cls(model, tokenizer, settings, **kwargs)

    @property
    def device(self) -> torch.device:
        """Where the model's weights live (batches are moved there): CPU unless a
        data-parallel rank moved its replica to its GPU."""
        return next(self.model.parameters()).device

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
                logp = token_logprobs(self.model, batch["input_ids"], batch["attention_mask"])
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
        self.model.train()
        num_tokens = float(stats["tokens"] if num_tokens is None else num_tokens)
        num_sequences = float(len(useful) if num_sequences is None else num_sequences)
        micro = max(1, self.settings.micro_batch_size)
        self.optimizer.zero_grad(set_to_none=True)
        clip_sum = 0.0
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
            # Temperature 1: the backends report log-probs of the unprocessed distribution.
            logp = token_logprobs(
                self.model, batch["input_ids"], batch["attention_mask"], positions=positions
            )
            old = torch.where(batch["has_old"], batch["old"], logp.detach())
            loss, extra = self.loss(
                logp,
                old,
                batch["advantages"],
                batch["mask"],
                num_tokens=num_tokens,
                num_sequences=num_sequences,
            )
            clip_sum += extra.get("clip_fraction", 0.0) * float(batch["mask"].sum())
            loss.backward()
            stats["loss"] += float(loss.detach())
        for _ in range((len(ordered) + micro - 1) // micro, micro_batches):
            idle = torch.full((1, 2), self.pad_id, dtype=torch.long, device=self.device)
            logits = self.model(input_ids=idle, attention_mask=torch.ones_like(idle)).logits
            (logits.sum() * 0.0).backward()
        params = [p for p in self.model.parameters() if p.requires_grad]
        if reduce_gradients is not None:
            reduce_gradients(params)  # from here every rank holds the full batch's gradient
        if self.settings.max_grad_norm > 0:
            norm = torch.nn.utils.clip_grad_norm_(params, self.settings.max_grad_norm)
        else:
            norm = torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.steps += 1
        elapsed = time.perf_counter() - start
        # A sharded model's norm is a replicated DTensor: the global norm, read as a tensor.
        stats["grad_norm"] = float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
        stats["clip_fraction"] = clip_sum / max(num_tokens, 1.0)
        stats["update_time_s"] = elapsed
        stats["tokens_per_s"] = total_tokens / max(elapsed, 1e-9)
        return stats

    # ------------------------------------------------------------------ state
    def trainable_state_dict(self) -> dict[str, torch.Tensor]:
        """Full-model weights in Hugging Face names (LoRA merged in), for a rollout engine."""
        model = self.model
        if hasattr(model, "merge_and_unload"):  # PEFT: push merged weights, keep the adapter
            import copy

            merged = copy.deepcopy(model).merge_and_unload()
            return {k: v.detach() for k, v in merged.state_dict().items()}
        return {k: v.detach() for k, v in model.state_dict().items()}

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
