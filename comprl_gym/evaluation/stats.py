"""Confidence intervals by the percentile bootstrap, seeded so reports are reproducible.

Example:
    >>> ci = bootstrap_ci([1, 0, 1, 1, 0, 1, 1, 1], seed=0)
    >>> round(ci.mean, 3), ci.low <= ci.mean <= ci.high
    (0.75, True)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

#: Bootstrap resamples; 10,000 puts the Monte-Carlo error of a 95% bound near 0.005.
DEFAULT_RESAMPLES = 10_000


@dataclass(frozen=True)
class Interval:
    """A mean and its two-sided ``level`` percentile-bootstrap interval over ``n`` values."""

    mean: float
    low: float
    high: float
    n: int
    level: float = 0.95

    def to_dict(self) -> dict[str, float]:
        return asdict(self)

    def __str__(self) -> str:
        return f"{self.mean:.3f} [{self.low:.3f}, {self.high:.3f}]"


def bootstrap_ci(
    values: Sequence[float],
    level: float = 0.95,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> Interval:
    """Mean of ``values`` with a percentile-bootstrap interval.

    With no values the interval is NaN; with one value it collapses onto it.
    """
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        nan = float("nan")
        return Interval(nan, nan, nan, 0, level)
    mean = float(data.mean())
    if data.size == 1:
        return Interval(mean, mean, mean, 1, level)
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)
    chunk = max(1, 2_000_000 // data.size)  # bound memory for large samples
    for start in range(0, resamples, chunk):
        stop = min(resamples, start + chunk)
        idx = rng.integers(0, data.size, size=(stop - start, data.size))
        means[start:stop] = data[idx].mean(axis=1)
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(means, [alpha, 1.0 - alpha])
    return Interval(mean, float(low), float(high), int(data.size), level)


def paired_difference_ci(
    with_values: Sequence[float],
    without_values: Sequence[float],
    level: float = 0.95,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> Interval:
    """Interval of the mean paired difference ``with - without`` (pairs resampled together)."""
    a = np.asarray(with_values, dtype=float)
    b = np.asarray(without_values, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"paired samples differ in length: {a.size} vs {b.size}")
    return bootstrap_ci(a - b, level=level, resamples=resamples, seed=seed)
