"""Outcome advantages: GRPO group normalisation and grouped estimation within each half.

GRPO compares the K rollouts of one task with each other: ``A_i = (r_i - mean) / (std + eps)``.
Complementary RL runs K/2 of them with experience and K/2 without; the two halves have
different reward levels, so one pool would credit every with-experience rollout for the
experience rather than for its actions. The advantages are therefore normalised **within
each half** (the paper's grouped advantage estimation).

Example:
    >>> group_advantages([1.0, 0.0, 0.0, 1.0]).round(3).tolist()
    [0.866, -0.866, -0.866, 0.866]
    >>> grouped_advantages([1, 1, 0, 1], groups=[0, 0, 0, 0], halves=[1, 1, 0, 0]).round(3).tolist()
    [0.0, 0.0, -0.707, 0.707]
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np


def group_advantages(
    rewards: Sequence[float] | np.ndarray, eps: float = 1e-4, scale: bool = True
) -> np.ndarray:
    """``(r - mean) / (std + eps)`` over one group (unbiased std, as TRL's GRPOTrainer).

    A group of one rollout, or one where every reward is equal, has advantage 0 everywhere:
    it carries no learning signal. ``scale=False`` gives Dr. GRPO's mean-centred advantage.
    """
    r = np.asarray(rewards, dtype=np.float64)
    if r.size < 2:
        return np.zeros_like(r)
    centred = r - r.mean()
    if not scale:
        return centred
    return centred / (r.std(ddof=1) + eps)


def grouped_advantages(
    rewards: Sequence[float] | np.ndarray,
    groups: Sequence[Hashable],
    halves: Sequence[Hashable] | None = None,
    eps: float = 1e-4,
    scale: bool = True,
) -> np.ndarray:
    """Normalise rewards within each ``(group, half)`` cell.

    ``groups[i]`` names the task group of rollout ``i``; ``halves[i]`` (optional) its half,
    e.g. ``True`` with experience, ``False`` without. Without ``halves`` this is plain GRPO.
    """
    r = np.asarray(rewards, dtype=np.float64)
    if len(groups) != r.size or (halves is not None and len(halves) != r.size):
        raise ValueError("rewards, groups and halves must have the same length")
    keys = list(zip(groups, halves)) if halves is not None else list(groups)
    out = np.zeros_like(r)
    cells: dict[Hashable, list[int]] = {}
    for i, key in enumerate(keys):
        cells.setdefault(key, []).append(i)
    for members in cells.values():
        out[members] = group_advantages(r[members], eps=eps, scale=scale)
    return out


def zero_variance_fraction(
    rewards: Sequence[float], groups: Sequence[Hashable], halves: Sequence[Hashable] | None = None
) -> float:
    """The fraction of ``(group, half)`` cells whose rewards are all equal: cells that carry
    no learning signal (every advantage 0). A policy that stops depending on its input drives
    it towards 1; ``nan`` without rewards.

    Example:
        >>> zero_variance_fraction([1, 1, 0, 1], groups=[0, 0, 1, 1])
        0.5
    """
    keys = list(zip(groups, halves)) if halves is not None else list(groups)
    cells: dict[Hashable, set[float]] = {}
    for key, reward in zip(keys, rewards):
        cells.setdefault(key, set()).add(float(reward))
    if not cells:
        return float("nan")
    return sum(len(values) == 1 for values in cells.values()) / len(cells)
