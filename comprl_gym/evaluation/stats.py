"""Confidence intervals that stay honest on few episodes, one rule per kind of quantity.

* Success rates (0/1 outcomes): :func:`proportion_ci`, the **Wilson score interval**
  (:func:`wilson_interval`). It is chosen over Clopper-Pearson because its coverage is close to
  the nominal level on average where Clopper-Pearson is conservative (Brown, Cai & DasGupta
  2001), and because the paired interval below is built from Wilson limits, so a rate and a
  difference of rates are judged alike. Both are exact at the edges: 0 of n has lower bound 0,
  n of n upper bound 1, and neither collapses there (0 of 4 is compatible with rates up to 0.49).
  :func:`clopper_pearson_interval` (exact binomial tails) is there for who wants the guarantee.
* Continuous scores in known bounds: :func:`mean_ci`. The percentile bootstrap from
  ``BOOTSTRAP_MIN_N`` values with spread; below that a **Student-t** interval (the percentile
  bootstrap is too narrow on small samples); and where the values show no spread at all (both
  collapse to a point) the Wilson interval of the mean rescaled to ``[0, 1]``: a bounded score
  with mean m has variance at most m(1 - m), the Bernoulli case, so the interval is as wide as
  the worst case consistent with the bounds.
* Paired with/without outcomes: :func:`paired_difference_interval`, **Newcombe (1998) method 10**
  (score-based, from the two marginal Wilson intervals and a corrected phi coefficient). It does
  not collapse when every pair agrees.
  :func:`paired_comparison` is the one report of a paired difference (interval, McNemar's
  exact p, resolvable difference) over two outcome tables keyed by episode.
* Several agent seeds: :func:`seed_summary`, per-seed rates, their spread and the pooled interval.
* How many episodes would resolve a difference of ``RESOLVABLE_DIFFERENCE`` (0.1):
  :func:`episodes_needed` and :func:`pairs_needed`.

:func:`bootstrap_ci` is the plain percentile bootstrap.

Example:
    >>> print(wilson_interval(0, 4))
    0.000 [0.000, 0.490]
    >>> print(paired_difference_interval([0, 0, 0, 0], [0, 0, 0, 0]))
    0.000 [-0.490, 0.490]
    >>> episodes_needed(0.0), pairs_needed([0, 0, 0, 0], [0, 0, 0, 0])
    (35, 35)
    >>> ci = bootstrap_ci([1, 0, 1, 1, 0, 1, 1, 1], seed=0)
    >>> round(ci.mean, 3), ci.low <= ci.mean <= ci.high
    (0.75, True)
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

#: Bootstrap resamples; 10,000 puts the Monte-Carlo error of a 95% bound near 0.005.
DEFAULT_RESAMPLES = 10_000
#: Below this many values a continuous mean gets a Student-t interval, not the bootstrap.
BOOTSTRAP_MIN_N = 20
#: The smallest difference in success rate a report should be able to tell apart from none.
RESOLVABLE_DIFFERENCE = 0.1

WILSON = "wilson"
CLOPPER_PEARSON = "clopper-pearson"
BOOTSTRAP = "bootstrap-percentile"
STUDENT_T = "student-t"
WILSON_BOUNDED = "wilson-bounded-mean"  # no spread in a bounded score: the worst-case variance
NEWCOMBE_PAIRED = "newcombe-paired-method-10"


@dataclass(frozen=True)
class Interval:
    """A mean and its two-sided ``level`` interval over ``n`` values, and how it was made."""

    mean: float
    low: float
    high: float
    n: int
    level: float = 0.95
    method: str = BOOTSTRAP

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def half_width(self) -> float:
        """The larger distance from the estimate to a bound."""
        return max(self.mean - self.low, self.high - self.mean)

    def __str__(self) -> str:
        return f"{self.mean:.3f} [{self.low:.3f}, {self.high:.3f}]"


def _nan_interval(level: float, method: str) -> Interval:
    nan = float("nan")
    return Interval(nan, nan, nan, 0, level, method)


def _z(level: float) -> float:
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    return statistics.NormalDist().inv_cdf(0.5 + level / 2.0)


# --------------------------------------------------------------------------------------------
# Success rates
# --------------------------------------------------------------------------------------------
def _check_count(successes: int, n: int) -> None:
    if int(successes) != successes or int(n) != n or not 0 <= successes <= n:
        raise ValueError(f"need whole counts with 0 <= successes <= n, got {successes} of {n}")


def _wilson_bounds(successes: float, n: float, z: float) -> tuple[float, float]:
    """Wilson score limits; counts may be fractional (used to scale a sample up)."""
    z2 = z * z
    centre = (successes + z2 / 2.0) / (n + z2)
    half = z * math.sqrt(max(0.0, successes * (n - successes) / n) + z2 / 4.0) / (n + z2)
    low = 0.0 if successes <= 0 else max(0.0, centre - half)
    high = 1.0 if successes >= n else min(1.0, centre + half)
    return low, high


def wilson_interval(successes: int, n: int, level: float = 0.95) -> Interval:
    """The Wilson score interval of ``successes`` in ``n`` trials (NaN when ``n`` is 0).

    Example:
        >>> print(wilson_interval(4, 4))
        1.000 [0.510, 1.000]
    """
    _check_count(successes, n)
    if n == 0:
        return _nan_interval(level, WILSON)
    low, high = _wilson_bounds(successes, n, _z(level))
    return Interval(successes / n, low, high, int(n), level, WILSON)


def _binomial_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p), summed in log space so large n stays finite."""
    if k < 0:
        return 0.0
    if k >= n or p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 0.0
    log_factorial = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, n + 1)))])
    ks = np.arange(k + 1)
    log_pmf = (
        log_factorial[n]
        - log_factorial[ks]
        - log_factorial[n - ks]
        + ks * math.log(p)
        + (n - ks) * math.log1p(-p)
    )
    return float(np.exp(log_pmf).sum())


def _bisect(f: Callable[[float], float], low: float, high: float, iterations: int = 80) -> float:
    """The root of an increasing ``f`` on ``[low, high]``."""
    for _ in range(iterations):
        mid = (low + high) / 2.0
        if f(mid) < 0.0:
            low = mid
        else:
            high = mid
    return (low + high) / 2.0


def clopper_pearson_interval(successes: int, n: int, level: float = 0.95) -> Interval:
    """The exact (Clopper-Pearson) interval: each bound leaves ``(1 - level) / 2`` in its tail.

    Computed by bisection on the binomial tail probabilities themselves.

    Example:
        >>> print(clopper_pearson_interval(0, 4))
        0.000 [0.000, 0.602]
    """
    _check_count(successes, n)
    if n == 0:
        return _nan_interval(level, CLOPPER_PEARSON)
    successes, n = int(successes), int(n)
    _z(level)  # validates level
    tail = (1.0 - level) / 2.0
    low = (
        0.0
        if successes == 0
        else _bisect(lambda p: (1.0 - _binomial_cdf(successes - 1, n, p)) - tail, 0.0, 1.0)
    )
    high = (
        1.0
        if successes == n
        else _bisect(lambda p: tail - _binomial_cdf(successes, n, p), 0.0, 1.0)
    )
    return Interval(successes / n, low, high, n, level, CLOPPER_PEARSON)


def _binary(values: Sequence[float], what: str) -> np.ndarray:
    data = np.asarray(values, dtype=float)
    if data.ndim != 1 or not np.isin(data, (0.0, 1.0)).all():
        raise ValueError(f"{what} must be a flat sequence of 0/1 outcomes")
    return data


def proportion_ci(outcomes: Sequence[float], level: float = 0.95) -> Interval:
    """Success rate of 0/1 ``outcomes`` with its Wilson score interval.

    Example:
        >>> print(proportion_ci([1, 0, 0, 0]))
        0.250 [0.046, 0.699]
    """
    data = _binary(outcomes, "outcomes")
    return wilson_interval(int(data.sum()), int(data.size), level)


# --------------------------------------------------------------------------------------------
# Continuous scores
# --------------------------------------------------------------------------------------------
def bootstrap_ci(
    values: Sequence[float],
    level: float = 0.95,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> Interval:
    """Mean of ``values`` with a percentile-bootstrap interval.

    With no values the interval is NaN; with one value, or values that never differ, it
    collapses onto the mean: use :func:`mean_ci` or :func:`proportion_ci` for reports.
    """
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        return _nan_interval(level, BOOTSTRAP)
    mean = float(data.mean())
    if data.size == 1:
        return Interval(mean, mean, mean, 1, level, BOOTSTRAP)
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)
    chunk = max(1, 2_000_000 // data.size)  # bound memory for large samples
    for start in range(0, resamples, chunk):
        stop = min(resamples, start + chunk)
        idx = rng.integers(0, data.size, size=(stop - start, data.size))
        means[start:stop] = data[idx].mean(axis=1)
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(means, [alpha, 1.0 - alpha])
    return Interval(mean, float(low), float(high), int(data.size), level, BOOTSTRAP)


def _t_central_mass(t: float, df: int) -> float:
    """P(|T| <= t) for Student's t with integer ``df`` (Abramowitz & Stegun 26.7.3-4)."""
    theta = math.atan(t / math.sqrt(df))
    sin, cos2 = math.sin(theta), math.cos(theta) ** 2
    if df % 2 == 1:
        term = total = math.cos(theta) if df > 1 else 0.0
        for k in range(1, (df - 1) // 2):
            term *= 2 * k / (2 * k + 1) * cos2
            total += term
        return 2.0 / math.pi * (theta + sin * total)
    term = total = 1.0
    for k in range(1, df // 2):
        term *= (2 * k - 1) / (2 * k) * cos2
        total += term
    return sin * total


def student_t_quantile(level: float, df: int) -> float:
    """The ``t`` with ``P(|T| <= t) = level`` for ``df`` degrees of freedom (two-sided).

    Example:
        >>> round(student_t_quantile(0.95, 3), 4)
        3.1824
    """
    _z(level)
    if int(df) != df or df < 1:
        raise ValueError(f"degrees of freedom must be a positive whole number, got {df}")
    high = 1.0
    while _t_central_mass(high, int(df)) < level:
        high *= 2.0
    return _bisect(lambda t: _t_central_mass(t, int(df)) - level, 0.0, high)


def mean_ci(
    values: Sequence[float],
    level: float = 0.95,
    bounds: tuple[float, float] | None = (0.0, 1.0),
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> Interval:
    """Mean of a continuous score with the interval the module docstring describes.

    ``bounds`` are the score's known limits (comprl scores lie in ``[0, 1]``); values outside
    them are an error. Without bounds, values that never differ give a collapsed interval.

    Example:
        >>> print(mean_ci([0.0, 0.0, 0.0, 0.0]))
        0.000 [0.000, 0.490]
        >>> mean_ci([0.2, 0.4, 0.9]).method
        'student-t'
    """
    data = np.asarray(values, dtype=float)
    if data.ndim != 1 or not np.isfinite(data).all():
        raise ValueError("values must be a flat sequence of finite numbers")
    if bounds is not None:
        lo, hi = bounds
        if not lo < hi:
            raise ValueError(f"bounds must be increasing, got {bounds}")
        if data.size and (data.min() < lo or data.max() > hi):
            raise ValueError(f"values outside the bounds {bounds}: {data.min()}..{data.max()}")
    if data.size == 0:
        return _nan_interval(level, BOOTSTRAP)
    mean, n = float(data.mean()), int(data.size)
    if np.ptp(data) == 0.0:
        if bounds is None:
            return Interval(mean, mean, mean, n, level, BOOTSTRAP)
        low, high = _wilson_bounds((mean - lo) / (hi - lo) * n, n, _z(level))
        return Interval(mean, lo + low * (hi - lo), lo + high * (hi - lo), n, level, WILSON_BOUNDED)
    if n < BOOTSTRAP_MIN_N:
        half = student_t_quantile(level, n - 1) * float(data.std(ddof=1)) / math.sqrt(n)
        low, high = mean - half, mean + half
        if bounds is not None:
            low, high = max(lo, low), min(hi, high)
        return Interval(mean, low, high, n, level, STUDENT_T)
    return bootstrap_ci(data, level=level, resamples=resamples, seed=seed)


# --------------------------------------------------------------------------------------------
# Paired differences
# --------------------------------------------------------------------------------------------
def _paired_table(
    with_outcomes: Sequence[float], without_outcomes: Sequence[float]
) -> tuple[int, int, int, int]:
    """(both succeed, only with, only without, both fail) of paired 0/1 outcomes."""
    a = _binary(with_outcomes, "with-experience outcomes")
    b = _binary(without_outcomes, "without-experience outcomes")
    if a.shape != b.shape:
        raise ValueError(f"paired samples differ in length: {a.size} vs {b.size}")
    return (
        int(((a == 1) & (b == 1)).sum()),
        int(((a == 1) & (b == 0)).sum()),
        int(((a == 0) & (b == 1)).sum()),
        int(((a == 0) & (b == 0)).sum()),
    )


def _newcombe_paired(
    a: float, b: float, c: float, d: float, z: float
) -> tuple[float, float, float]:
    """Newcombe (1998) method 10 for p1 - p2 = (b - c) / n; cells may be fractional.

    ``a``: both succeed, ``b``: only the first, ``c``: only the second, ``d``: neither.
    """
    n = a + b + c + d
    p1, p2 = (a + b) / n, (a + c) / n
    l1, u1 = _wilson_bounds(a + b, n, z)
    l2, u2 = _wilson_bounds(a + c, n, z)
    marginals = (a + b) * (c + d) * (a + c) * (b + d)
    phi = 0.0
    if marginals > 0:
        # Newcombe's correction of the phi coefficient: ad - bc above n/2 loses n/2, a positive
        # value below it counts as no correlation, a negative one is kept.
        excess = a * d - b * c
        excess = excess - n / 2.0 if excess > n / 2.0 else min(excess, 0.0)
        phi = excess / math.sqrt(marginals)
    below = math.sqrt(max(0.0, (p1 - l1) ** 2 - 2.0 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    above = math.sqrt(max(0.0, (u1 - p1) ** 2 - 2.0 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2))
    diff = p1 - p2
    return diff, max(-1.0, diff - below), min(1.0, diff + above)


def paired_difference_interval(
    with_outcomes: Sequence[float], without_outcomes: Sequence[float], level: float = 0.95
) -> Interval:
    """Difference of success rates of paired 0/1 outcomes, Newcombe's (1998) method 10.

    Example:
        >>> print(paired_difference_interval([1, 1, 1, 0], [0, 1, 1, 0]))
        0.250 [-0.320, 0.655]
    """
    table = _paired_table(with_outcomes, without_outcomes)
    if sum(table) == 0:
        return _nan_interval(level, NEWCOMBE_PAIRED)
    diff, low, high = _newcombe_paired(*table, _z(level))
    return Interval(diff, low, high, sum(table), level, NEWCOMBE_PAIRED)


def mcnemar_exact_p(first: Sequence[float], second: Sequence[float]) -> float:
    """McNemar's exact two-sided p-value for paired 0/1 outcomes: of the ``m`` discordant
    pairs, ``b`` favour the first; under no difference ``b ~ Binomial(m, 1/2)``, and the
    p-value is ``min(1, 2 P(X <= min(b, m - b)))``. 1.0 when no pair disagrees.

    Example (the 2x2 table 41, 14, 5, 4: b = 14, c = 5, m = 19):
        >>> a = [1] * 41 + [1] * 14 + [0] * 5 + [0] * 4
        >>> b = [1] * 41 + [0] * 14 + [1] * 5 + [0] * 4
        >>> round(mcnemar_exact_p(a, b), 3)
        0.064
    """
    _, only_first, only_second, _ = _paired_table(first, second)
    discordant = only_first + only_second
    if discordant == 0:
        return 1.0
    return min(1.0, 2.0 * _binomial_cdf(min(only_first, only_second), discordant, 0.5))


def paired_outcomes(
    first: Mapping[Any, float], second: Mapping[Any, float]
) -> tuple[list[float], list[float]]:
    """The 0/1 outcomes of the keys both tables hold, as two aligned lists (in ``first``'s
    key order). A key names one episode and its partner: ``(task, visit)`` of two arms of a
    stream, ``(env_id, task, seed)`` of a paired eval, ``((run, task), visit)`` when runs of
    several seeds are pooled.

    Example:
        >>> paired_outcomes({"a": 1, "b": 0, "c": 1}, {"c": 0, "a": 1})
        ([1.0, 1.0], [1.0, 0.0])
    """
    shared = [key for key in first if key in second]
    return [float(first[k]) for k in shared], [float(second[k]) for k in shared]


def paired_comparison(
    first: Mapping[Any, float], second: Mapping[Any, float], level: float = 0.95
) -> dict[str, Any]:
    """THE paired difference of this package: ``first`` minus ``second`` over the episodes both
    hold (:func:`paired_outcomes`), with Newcombe's interval, McNemar's exact p and the
    difference these many pairs can resolve (the interval's half-width). Streaming arms, a
    paired eval and runs pooled over seeds all report it.

    Example (4 pairs: both won, only the first twice, neither; b = 2, c = 0):
        >>> out = paired_comparison({0: 1, 1: 1, 2: 1, 3: 0}, {0: 1, 1: 0, 2: 0, 3: 0})
        >>> out["pairs"], out["difference"]["mean"], out["mcnemar_p"]
        (4, 0.5, 0.5)
        >>> paired_comparison({0: 1}, {1: 0})["mcnemar_p"] is None  # nothing to pair
        True
    """
    a, b = paired_outcomes(first, second)
    interval = paired_difference_interval(a, b, level)
    return {
        "pairs": len(a),
        "difference": interval.to_dict(),
        "mcnemar_p": mcnemar_exact_p(a, b) if a else None,
        "resolvable": interval.half_width if a else None,
    }


# --------------------------------------------------------------------------------------------
# How many episodes would resolve a difference of 0.1
# --------------------------------------------------------------------------------------------
def _smallest_n(half_width_at: Callable[[float], float], delta: float) -> int:
    """The smallest whole n with ``half_width_at(n) < delta`` (half-width falls with n)."""
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must lie in (0, 1), got {delta}")
    high = 1
    while half_width_at(high) >= delta:
        high *= 2
    low = high // 2  # half_width_at(low) >= delta, or low == 0
    while high - low > 1:
        mid = (low + high) // 2
        if half_width_at(mid) < delta:
            high = mid
        else:
            low = mid
    return high


def episodes_needed(rate: float, delta: float = RESOLVABLE_DIFFERENCE, level: float = 0.95) -> int:
    """Episodes at which the Wilson interval around ``rate`` lies within ``delta`` of it.

    Example:
        >>> episodes_needed(0.5)
        93
    """
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"rate must lie in [0, 1], got {rate}")
    z = _z(level)

    def half_width(n: float) -> float:
        low, high = _wilson_bounds(rate * n, n, z)
        return max(rate - low, high - rate)

    return _smallest_n(half_width, delta)


def pairs_needed(
    with_outcomes: Sequence[float],
    without_outcomes: Sequence[float],
    delta: float = RESOLVABLE_DIFFERENCE,
    level: float = 0.95,
) -> int:
    """Pairs at which Newcombe's interval, for the same proportions of agreeing and
    disagreeing pairs, lies within ``delta`` of the observed difference."""
    table = _paired_table(with_outcomes, without_outcomes)
    n = sum(table)
    if n == 0:
        raise ValueError("no pairs: the proportions to scale up are unknown")
    z = _z(level)

    def half_width(m: float) -> float:
        diff, low, high = _newcombe_paired(*(cell / n * m for cell in table), z)
        return max(diff - low, high - diff)

    return _smallest_n(half_width, delta)


def resolution_warning(what: str, ci: Interval, needed: int, unit: str = "episodes") -> str | None:
    """A sentence when ``ci`` is too wide to exclude ``RESOLVABLE_DIFFERENCE``, else None.

    Example:
        >>> resolution_warning("success", wilson_interval(0, 4), episodes_needed(0.0))
        'success 0.00 [0.00, 0.49] from 4 episodes cannot exclude a difference of 0.1; about 35 episodes would'
    """
    if ci.n == 0 or math.isnan(ci.mean) or ci.half_width < RESOLVABLE_DIFFERENCE:
        return None
    return (
        f"{what} {ci.mean:.2f} [{ci.low:.2f}, {ci.high:.2f}] from {ci.n} {unit} cannot exclude "
        f"a difference of {RESOLVABLE_DIFFERENCE:g}; about {needed} {unit} would"
    )


# --------------------------------------------------------------------------------------------
# Several seeds
# --------------------------------------------------------------------------------------------
def seed_summary(
    outcomes_by_seed: Mapping[Any, Sequence[float]], level: float = 0.95
) -> dict[str, Any]:
    """Per-seed success rates, their spread across seeds, and the pooled interval.

    ``between_seeds`` treats each seed's rate as one observation (:func:`mean_ci`), so it
    shows whether a result survives seed variation; ``pooled`` counts every episode alike.

    Example:
        >>> s = seed_summary({0: [1, 1, 0, 1], 1: [0, 0, 1, 0]})
        >>> s["per_seed"]["0"]["mean"], s["per_seed"]["1"]["mean"], round(s["spread"]["sd"], 3)
        (0.75, 0.25, 0.354)
        >>> print(Interval(**s["pooled"]))
        0.500 [0.215, 0.785]
    """
    if not outcomes_by_seed:
        raise ValueError("no seeds")
    per_seed = {str(s): proportion_ci(v, level) for s, v in sorted(outcomes_by_seed.items())}
    rates = [ci.mean for ci in per_seed.values() if ci.n > 0]
    pooled = proportion_ci([x for v in outcomes_by_seed.values() for x in v], level)
    return {
        "seeds": len(per_seed),
        "per_seed": {s: ci.to_dict() for s, ci in per_seed.items()},
        "spread": {
            "sd": statistics.stdev(rates) if len(rates) > 1 else float("nan"),
            "min": min(rates, default=float("nan")),
            "max": max(rates, default=float("nan")),
        },
        "between_seeds": mean_ci(rates, level).to_dict(),
        "pooled": pooled.to_dict(),
    }
