"""Policy-gradient losses for the actor (clipped PG) and the extractor (CISPO), and the
supervised cross-entropy of the reading warm-up.

Every loss takes per-token tensors of shape ``(batch, tokens)``: the current log-probabilities
``logp`` (with gradient), the log-probabilities under the policy that sampled the tokens
``old_logp`` (no gradient), the advantage of each sequence ``advantages`` (``(batch,)`` or
``(batch, 1)``) and a 0/1 ``mask`` that is 1 only on tokens the model itself generated. Env
text, prompts and padding carry mask 0 and contribute nothing, neither to the loss nor to its
normaliser.

Example:
    >>> import torch
    >>> logp = torch.log(torch.tensor([[0.5, 0.25]])).requires_grad_()
    >>> loss = cispo_loss(logp, logp.detach(), torch.tensor([1.0]), torch.tensor([[1.0, 1.0]]))
    >>> round(loss.item(), 4)  # -(log 0.5 + log 0.25) / 2
    1.0397
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

import torch

Normalization = Literal["sequence", "token"]


def _as_column(advantages: torch.Tensor) -> torch.Tensor:
    return advantages.reshape(-1, 1) if advantages.dim() == 1 else advantages


def aggregate(
    per_token_loss: torch.Tensor,
    mask: torch.Tensor,
    normalization: Normalization = "token",
    num_tokens: float | None = None,
    num_sequences: float | None = None,
) -> torch.Tensor:
    """Reduce a per-token loss over the masked tokens.

    ``token``: sum over all active tokens divided by their count (TRL's ``bnpo``/``cispo``/DAPO
    normalisation; long answers weigh more). ``sequence``: mean over each sequence's active
    tokens, then mean over sequences (TRL's ``grpo``). ``num_tokens`` / ``num_sequences``
    override the denominators so that micro-batches of one update add up to the full-batch loss.
    """
    mask = mask.to(per_token_loss.dtype)
    if normalization == "token":
        denominator = mask.sum() if num_tokens is None else torch.tensor(float(num_tokens))
        return (per_token_loss * mask).sum() / denominator.clamp(min=1.0)
    if normalization == "sequence":
        per_sequence = (per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
        count = per_sequence.numel() if num_sequences is None else num_sequences
        return per_sequence.sum() / max(float(count), 1.0)
    raise ValueError(f"normalization must be 'token' or 'sequence', got {normalization!r}")


def clipped_pg_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    normalization: Normalization = "sequence",
    num_tokens: float | None = None,
    num_sequences: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO/GRPO clipped surrogate: ``-min(r A, clip(r, 1-eps_low, 1+eps_high) A)``.

    Returns the loss and statistics (the fraction of clipped active tokens, the mean ratio).
    With one update per batch ``old_logp == logp.detach()`` and the loss is the plain policy
    gradient ``-A log p`` (in value, ``-A``; in gradient, ``-A grad log p``).
    """
    advantages = _as_column(advantages).to(logp.dtype)
    ratio = torch.exp(logp - old_logp)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high) * advantages
    per_token = -torch.min(unclipped, clipped)
    loss = aggregate(per_token, mask, normalization, num_tokens, num_sequences)
    with torch.no_grad():
        active = mask > 0
        was_clipped = (clipped < unclipped) & active
        n = active.sum().clamp(min=1)
        stats = {
            "clip_fraction": float(was_clipped.sum() / n),
            "ratio_mean": float((ratio * active).sum() / n),
        }
    return loss, stats


CispoVariant = Literal["clip", "trl"]


def cispo_weights(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    eps_low: float = 0.1,
    eps_high: float = 0.1,
    variant: CispoVariant = "clip",
) -> torch.Tensor:
    """The detached per-token CISPO weight: ``clip(r, 1 - eps_low, 1 + eps_high)`` (``clip``)
    or ``min(r, 1 + eps_high)`` (``trl``), with ``r = exp(logp - old_logp)``."""
    ratio = torch.exp(logp.detach() - old_logp)
    if variant == "clip":
        return torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high)
    if variant == "trl":
        return torch.clamp(ratio, max=1.0 + eps_high)
    raise ValueError(f"CISPO variant must be 'clip' or 'trl', got {variant!r}")


def cispo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    eps_low: float = 0.1,
    eps_high: float = 0.1,
    variant: CispoVariant = "clip",
    normalization: Normalization = "sequence",
    num_tokens: float | None = None,
    num_sequences: float | None = None,
) -> torch.Tensor:
    """CISPO (MiniMax-M1): ``-sg(w) * A * log p`` per token, ``w`` the clipped IS ratio.

    ``variant="clip"`` is the paper's and the Complementary RL reference's
    (``roll/utils/actor_pg_losses.py::compute_cispo_pg_loss_mat_and_metrics``, l.164-218, and
    ``memory_model_worker.py::MemoryActorWorker.loss_func``)::

        w = clamp(ratio, 1 - eps_low, 1 + eps_high).detach(); loss = -w * A * log p

    with ``eps_low = eps_high = 0.1`` (reference ``memory_cispo_epsilon_low/high``) and the
    aggregation ``seq-mean-token-mean`` (``normalization="sequence"``: mean over each
    sequence's active tokens, then over sequences). ``variant="trl"`` is TRL's
    ``loss_type="cispo"``: the ratio capped from above only, at ``1 + eps_high`` (TRL's
    ``epsilon_high`` is that cap). Either way the gradient of every active token is
    ``-w A grad log p / normaliser``: no token is dropped from the gradient, unlike PPO.
    """
    advantages = _as_column(advantages).to(logp.dtype)
    weight = cispo_weights(logp, old_logp, eps_low, eps_high, variant)
    per_token = -weight * advantages * logp
    return aggregate(per_token, mask, normalization, num_tokens, num_sequences)


class Loss(Protocol):
    """What :class:`~comprl_gym.trainers.policy.PolicyOptimizer` minimises: a picklable callable
    (data-parallel ranks rebuild the optimiser from it) from per-token tensors to the loss and
    its statistics (``clip_fraction`` is reported when present, and ``sequence_losses``, one
    value per sequence, is passed on per sample).

    A new loss is one class with this ``__call__``; a trainer returns it from its ``actor_loss``
    hook (see :mod:`comprl_gym.trainers.complementary`).
    """

    def __call__(
        self,
        logp: torch.Tensor,
        old_logp: torch.Tensor,
        advantages: torch.Tensor,
        mask: torch.Tensor,
        *,
        num_tokens: float | None = None,
        num_sequences: float | None = None,
    ) -> tuple[torch.Tensor, dict[str, float]]: ...


@dataclass(frozen=True)
class ClippedPG:
    """:func:`clipped_pg_loss` with its knobs bound: the actor's PPO/GRPO surrogate.

    Example:
        >>> logp = torch.log(torch.tensor([[0.5, 0.25]]))
        >>> loss, stats = ClippedPG()(logp, logp, torch.tensor([1.0]), torch.ones(1, 2))
        >>> loss.item(), stats["clip_fraction"]
        (-1.0, 0.0)
    """

    eps_low: float = 0.2
    eps_high: float = 0.2
    normalization: Normalization = "sequence"

    def __call__(self, logp, old_logp, advantages, mask, *, num_tokens=None, num_sequences=None):
        return clipped_pg_loss(
            logp,
            old_logp,
            advantages,
            mask,
            eps_low=self.eps_low,
            eps_high=self.eps_high,
            normalization=self.normalization,
            num_tokens=num_tokens,
            num_sequences=num_sequences,
        )


@dataclass(frozen=True)
class CISPO:
    """:func:`cispo_loss` with its knobs bound: the extractor's loss (and an actor option).

    Example:
        >>> logp = torch.log(torch.tensor([[0.5, 0.25]]))
        >>> loss, _ = CISPO()(logp, logp, torch.tensor([1.0]), torch.ones(1, 2))
        >>> round(loss.item(), 4)  # -(log 0.5 + log 0.25) / 2
        1.0397
    """

    eps_low: float = 0.1
    eps_high: float = 0.1
    variant: CispoVariant = "clip"
    normalization: Normalization = "sequence"

    def __call__(self, logp, old_logp, advantages, mask, *, num_tokens=None, num_sequences=None):
        loss = cispo_loss(
            logp,
            old_logp,
            advantages,
            mask,
            eps_low=self.eps_low,
            eps_high=self.eps_high,
            variant=self.variant,
            normalization=self.normalization,
            num_tokens=num_tokens,
            num_sequences=num_sequences,
        )
        return loss, {}

    @classmethod
    def of_extractor(cls, settings: Any) -> CISPO:
        """The extractor's CISPO as ``experience`` settings configure it (``cispo_eps_low``,
        ``cispo_eps_high``, ``cispo_variant``, ``cispo_normalization``)."""
        return cls(
            settings.cispo_eps_low,
            settings.cispo_eps_high,
            settings.cispo_variant,
            settings.cispo_normalization,
        )


@dataclass(frozen=True)
class CrossEntropy:
    """Supervised cross-entropy on the labelled tokens (mask 1): ``-log p`` of each, averaged
    per sequence then over sequences (``sequence``) or over all labelled tokens (``token``).
    Advantages and old log-probs are ignored (a sample's advantage only has to be nonzero to
    count). Its statistics hold ``sequence_losses``: each sequence's own mean, in batch order
    (the reading warm-up logs them per lesson format).

    Example:
        >>> logp = torch.log(torch.tensor([[0.5, 0.25], [1.0, 0.5]]))
        >>> mask = torch.tensor([[1.0, 1.0], [0.0, 1.0]])
        >>> loss, stats = CrossEntropy()(logp, logp, torch.ones(2), mask)
        >>> [round(x, 4) for x in stats["sequence_losses"]]  # (log 2 + log 4) / 2, log 2
        [1.0397, 0.6931]
        >>> round(loss.item(), 4)  # their mean
        0.8664
    """

    normalization: Normalization = "sequence"

    def __call__(self, logp, old_logp, advantages, mask, *, num_tokens=None, num_sequences=None):
        per_token = -logp
        loss = aggregate(per_token, mask, self.normalization, num_tokens, num_sequences)
        with torch.no_grad():
            weights = mask.to(per_token.dtype)
            per_sequence = (per_token * weights).sum(-1) / weights.sum(-1).clamp(min=1.0)
        return loss, {"sequence_losses": per_sequence.tolist()}


def token_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    temperature: float = 1.0,
    logits_to_keep: int | None = None,
    positions: torch.Tensor | None = None,
) -> torch.Tensor:
    """Log-probability of each token given the ones before it.

    Without ``logits_to_keep`` the shape is ``(batch, tokens - 1)`` and entry ``[b, t]`` is
    ``log p(input_ids[b, t + 1] | input_ids[b, : t + 1])``. With ``logits_to_keep=k`` only the
    last ``k`` tokens are scored (shape ``(batch, k)``) and the LM head runs on ``k + 1``
    positions only, as TRL does for completions: prompts are long, completions short. With
    ``positions`` (a 1-D index tensor) entry ``[b, j]`` is the log-prob of token
    ``positions[j] + 1`` and the head runs on those positions only. Only
    the gathered entries are kept, never a full ``(batch, tokens, vocab)`` log-softmax.
    """
    if positions is not None:
        return score_positions(model, input_ids, attention_mask, positions, temperature).logp
    length = input_ids.shape[1]
    if logits_to_keep is None or logits_to_keep >= length:
        logits_to_keep = length - 1
    logits = model(
        input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=logits_to_keep + 1
    ).logits[:, :-1, :]
    if temperature != 1.0:
        logits = logits / temperature
    targets = input_ids[:, -logits_to_keep:].unsqueeze(-1)
    picked = torch.gather(logits, -1, targets).squeeze(-1)
    return picked - torch.logsumexp(logits.float(), dim=-1).to(picked.dtype)


@dataclass
class ScoredTokens:
    """What :func:`score_positions` returns: each scored token's log-prob and the entropy of
    the distribution it was scored under, both ``(batch, positions)``, with gradient."""

    logp: torch.Tensor
    entropy: torch.Tensor


def score_positions(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    positions: torch.Tensor,
    temperature: float | torch.Tensor = 1.0,
    allowed: torch.Tensor | None = None,
    restrict: torch.Tensor | None = None,
) -> ScoredTokens:
    """Log-prob of token ``positions[j] + 1`` of each row, and the entropy at that position,
    under the model's distribution divided by ``temperature`` (a number, or one per row) and
    restricted to ``allowed`` (a ``(batch, vocab)`` boolean mask, ``None``: every token) at the
    entries where ``restrict`` (``(batch, positions)``, default all) is true: the positions a
    row sampled under the restriction. Elsewhere (another row's trained position, a prompt
    token) its token need not be allowed, and a restricted score there would be -inf.

    Only the scored positions run through the LM head: a multi-turn sequence trains a few
    dozen of its thousands of tokens, and the head's (tokens, vocab) logits dominate memory.

    Example (one position, two allowed tokens of four, at temperature 2):
        >>> class Fixed(torch.nn.Module):
        ...     def forward(self, input_ids, attention_mask, logits_to_keep):
        ...         logits = torch.tensor([[[0.0, 2.0, 4.0, 9.0]]])
        ...         return type("Out", (), {"logits": logits})()
        >>> ids = torch.tensor([[0, 2]])
        >>> allowed = torch.tensor([[False, True, True, False]])
        >>> out = score_positions(Fixed(), ids, torch.ones_like(ids), torch.tensor([0]), 2.0, allowed)
        >>> round(out.logp.item(), 4)  # log(e^2 / (e^1 + e^2)), logits halved
        -0.3133
        >>> round(out.entropy.item(), 4)  # of (0.2689, 0.7311)
        0.5822
    """
    logits = model(
        input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=positions
    ).logits
    if isinstance(temperature, torch.Tensor):
        if not bool((temperature == 1.0).all()):
            logits = logits / temperature.to(logits.dtype).reshape(-1, 1, 1)
    elif temperature != 1.0:
        logits = logits / temperature
    if allowed is not None:
        blocked = ~allowed[:, None, : logits.shape[-1]]
        if restrict is not None:
            blocked = blocked & restrict[:, :, None]
        logits = logits.masked_fill(blocked, float("-inf"))
    targets = input_ids[:, positions + 1].unsqueeze(-1)
    picked = torch.gather(logits, -1, targets).squeeze(-1)
    log_z = torch.logsumexp(logits.float(), dim=-1)
    logp = picked - log_z.to(picked.dtype)
    every = logits.float() - log_z.unsqueeze(-1)
    # Excluded tokens have probability 0 and log-prob -inf: they add 0 to the entropy.
    entropy = -(every.exp() * every.masked_fill(torch.isinf(every), 0.0)).sum(-1)
    return ScoredTokens(logp, entropy)
