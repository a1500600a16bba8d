"""Intervals of ``comprl_gym.evaluation.stats`` against values computed independently of the code.

Binomial bounds: scipy 1.17.1 ``scipy.stats.binomtest(k, n).proportion_ci(0.95, method)`` with
``method="wilson"`` and ``"exact"`` (Clopper-Pearson), run once and written here as literals.
Paired bounds: worked by hand from the formula of Newcombe (1998), "Improved confidence
intervals for the difference between binomial proportions based on paired data", Stat Med 17,
method 10 (the paper itself was not reachable here, so its Table II is not used), and the
published output for Cavo et al. (2012) in Fagerland, Lydersen & Laake, *Statistical Analysis of
Contingency Tables* (2017), chapter 8 (as tested by the R package contingencytables).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from comprl_gym.evaluation.stats import (
    BOOTSTRAP,
    CLOPPER_PEARSON,
    NEWCOMBE_PAIRED,
    STUDENT_T,
    WILSON,
    WILSON_BOUNDED,
    bootstrap_ci,
    clopper_pearson_interval,
    episodes_needed,
    mean_ci,
    paired_comparison,
    paired_difference_interval,
    pairs_needed,
    proportion_ci,
    resolution_warning,
    seed_summary,
    student_t_quantile,
    wilson_interval,
)

#: (successes, n): (Wilson low, high), (Clopper-Pearson low, high), from scipy's binomtest.
SCIPY_BINOMTEST = {
    (0, 4): ((0.0, 0.489890836455), (0.0, 0.602364635616)),
    (4, 4): ((0.510109163545, 1.0), (0.397635364384, 1.0)),
    (7, 20): ((0.181191824101, 0.567145723315), (0.153909204785, 0.592188534533)),
    (50, 100): ((0.403831530366, 0.596168469634), (0.398321129503, 0.601678870497)),
}


@pytest.mark.parametrize("counts", sorted(SCIPY_BINOMTEST))
def test_wilson_and_clopper_pearson_match_scipy_binomtest(counts):
    (w_low, w_high), (cp_low, cp_high) = SCIPY_BINOMTEST[counts]
    wilson = wilson_interval(*counts)
    exact = clopper_pearson_interval(*counts)
    assert (wilson.low, wilson.high) == pytest.approx((w_low, w_high), abs=1e-10)
    assert (exact.low, exact.high) == pytest.approx((cp_low, cp_high), abs=1e-10)
    assert wilson.method == WILSON and exact.method == CLOPPER_PEARSON
    assert wilson.mean == exact.mean == counts[0] / counts[1] and wilson.n == counts[1]


def test_edges_are_exact_and_never_collapse():
    # 0 of n: the lower bound is exactly 0, the upper bound z^2 / (n + z^2) by hand.
    z2 = 1.959963984540054**2
    assert wilson_interval(0, 4).low == 0.0
    assert wilson_interval(0, 4).high == pytest.approx(z2 / (4 + z2), abs=1e-15)
    assert wilson_interval(4, 4).high == 1.0 and clopper_pearson_interval(4, 4).high == 1.0
    # Clopper-Pearson at 0 of n solves (1 - p)^n = 0.025: p = 1 - 0.025^(1/n).
    assert clopper_pearson_interval(0, 4).high == pytest.approx(1 - 0.025 ** (1 / 4), abs=1e-12)
    assert clopper_pearson_interval(0, 4).low == 0.0
    # 0/1 outcomes go through Wilson; the percentile bootstrap collapses (the bug of issue 20).
    assert proportion_ci([0, 0, 0, 0]).high == pytest.approx(0.4899, abs=1e-4)
    assert bootstrap_ci([0, 0, 0, 0]).high == 0.0
    assert math.isnan(wilson_interval(0, 0).mean) and proportion_ci([]).n == 0


def test_bad_counts_and_outcomes_are_rejected():
    for successes, n in [(5, 4), (-1, 4), (1.5, 4)]:
        with pytest.raises(ValueError, match="whole counts"):
            wilson_interval(successes, n)
    with pytest.raises(ValueError, match="0/1 outcomes"):
        proportion_ci([1, 0.5])
    with pytest.raises(ValueError, match="level"):
        wilson_interval(1, 2, level=1.0)


def test_student_t_quantiles_match_printed_tables():
    # Two-sided 95% and 99% points of Student's t from any printed table.
    for df, q95, q99 in [
        (1, 12.706, 63.657),
        (2, 4.303, 9.925),
        (3, 3.182, 5.841),
        (19, 2.093, 2.861),
    ]:
        assert student_t_quantile(0.95, df) == pytest.approx(q95, abs=5e-4)
        assert student_t_quantile(0.99, df) == pytest.approx(q99, abs=5e-4)


def test_continuous_means_pick_the_interval_that_does_not_degenerate():
    # Small sample with spread: mean +- t(0.975, 3) * sd / sqrt(4), worked by hand.
    values = [0.2, 0.4, 0.6, 0.8]  # mean 0.5, sd = sqrt(0.2 / 3) = 0.258199
    ci = mean_ci(values)
    assert ci.method == STUDENT_T
    assert (ci.low, ci.high) == pytest.approx((0.5 - 0.410844, 0.5 + 0.410844), abs=1e-5)
    # No spread: bootstrap and t collapse; a [0, 1] score falls back to Wilson on its mean.
    flat = mean_ci([0.0] * 4)
    assert flat.method == WILSON_BOUNDED and flat.high == pytest.approx(0.4899, abs=1e-4)
    # Other bounds are rescaled: scores in [0, 10] all 10 -> [10 - 10 * 0.4899, 10].
    assert mean_ci([10.0] * 4, bounds=(0.0, 10.0)).low == pytest.approx(5.101, abs=1e-3)
    assert mean_ci([3.0] * 4, bounds=None).high == 3.0
    # Enough values with spread: the percentile bootstrap, near mean +- 1.96 sd / sqrt(n).
    data = np.random.default_rng(1).uniform(0, 1, size=400)
    ci = mean_ci(data)
    half = 1.96 * data.std(ddof=1) / np.sqrt(data.size)
    assert ci.method == BOOTSTRAP and ci.high - ci.mean == pytest.approx(half, rel=0.1)
    with pytest.raises(ValueError, match="outside the bounds"):
        mean_ci([0.5, 1.5])


def _pairs(a, b, c, d):
    """Outcome lists for a paired table: a both succeed, b only with, c only without, d neither."""
    return [1] * a + [1] * b + [0] * c + [0] * d, [1] * a + [0] * b + [1] * c + [0] * d


# Newcombe (1998) method 10 by hand, z = 1.959964, z^2 = 3.841459:
#   L = D - sqrt((p1 - l1)^2 - 2 phi (p1 - l1)(u2 - p2) + (u2 - p2)^2)
#   U = D + sqrt((u1 - p1)^2 - 2 phi (u1 - p1)(p2 - l2) + (p2 - l2)^2)
# with (l, u) the Wilson limits of p1 = (a+b)/n and p2 = (a+c)/n, and phi = (ad - bc) / sqrt of
# the product of the margins, ad - bc lowered by n/2 when above n/2 and set to 0 in [0, n/2].
PAIRED_BY_HAND = [
    # all 4 pairs fail: phi = 0 (empty margin), both sides are the Wilson upper z^2/(4+z^2)
    ((0, 0, 0, 4), 0.0, -0.489891, 0.489891),
    # all 4 pairs succeed: the mirror image
    ((4, 0, 0, 0), 0.0, -0.489891, 0.489891),
    # (2,1,0,1): p1 = .75 -> (.300639, .954413); p2 = .5 -> (.150045, .849955); ad - bc = 2 <= n/2
    # so phi = 0: L = .25 - sqrt(.449361^2 + .349955^2), U = .25 + sqrt(.204413^2 + .349955^2)
    ((2, 1, 0, 1), 0.25, -0.319557, 0.655287),
    # (0,2,2,0): p1 = p2 = .5, Wilson half-width w = .349961; phi = -4 / sqrt(16) = -1 -> +-2w
    ((0, 2, 2, 0), 0.0, -0.699922, 0.699922),
    # (3,0,0,3): Wilson(3, 6) half-width w = .312384; phi = (9 - 3) / 9 = 2/3 -> +-w sqrt(2/3)
    ((3, 0, 0, 3), 0.0, -0.255060, 0.255060),
    # Cavo et al. (2012), published -0.0621 (95% CI -0.1186 to -0.0046)
    ((59, 6, 16, 80), -0.0621, -0.1186, -0.0046),
]


@pytest.mark.parametrize(("table", "diff", "low", "high"), PAIRED_BY_HAND)
def test_newcombe_paired_interval_against_hand_and_published_values(table, diff, low, high):
    ci = paired_difference_interval(*_pairs(*table))
    tol = 1e-4 if table[0] == 59 else 2e-6
    assert (ci.mean, ci.low, ci.high) == pytest.approx((diff, low, high), abs=tol)
    assert ci.method == NEWCOMBE_PAIRED and ci.n == sum(table)


def test_paired_interval_does_not_collapse_where_the_bootstrap_did():
    with_exp, without = _pairs(1, 0, 0, 3)  # every pair agrees
    # The old interval, a percentile bootstrap of the pair differences, collapsed to a point.
    assert bootstrap_ci(np.subtract(with_exp, without)).high == 0.0
    ci = paired_difference_interval(with_exp, without)
    assert ci.low < -0.3 and ci.high > 0.3
    with pytest.raises(ValueError, match="differ in length"):
        paired_difference_interval([1], [1, 0])
    assert math.isnan(paired_difference_interval([], []).mean)


def test_episodes_needed_to_exclude_a_difference_of_a_tenth():
    # 0 of n: z^2 / (n + z^2) < 0.1  <=>  n > 9 z^2 = 34.57  -> 35.
    assert episodes_needed(0.0) == episodes_needed(1.0) == 35
    # 1/2: half-width (z/2) / sqrt(n + z^2) < 0.1  <=>  n > 96.04 - 3.84 = 92.2  -> 93.
    assert episodes_needed(0.5) == 93
    # pairs that all agree: the paired bound is the Wilson one of the shared margin -> 35 too.
    assert pairs_needed(*_pairs(0, 0, 0, 4)) == 35
    assert wilson_interval(0, 35).high < 0.1 <= wilson_interval(0, 34).high
    message = resolution_warning("success", wilson_interval(0, 4), 35)
    assert "cannot exclude a difference of 0.1" in message and "35 episodes" in message
    assert resolution_warning("success", wilson_interval(0, 40), 35) is None


def test_seed_summary_shows_per_seed_rates_spread_and_pooled_interval():
    summary = seed_summary({0: [1, 1, 1, 1, 0], 1: [0, 0, 0, 0, 1], 2: [1, 0, 1, 0, 1]})
    assert [summary["per_seed"][s]["mean"] for s in "012"] == [0.8, 0.2, 0.6]
    assert summary["spread"]["sd"] == pytest.approx(0.305505, abs=1e-6)  # sd of .8, .2, .6
    assert (summary["spread"]["min"], summary["spread"]["max"]) == (0.2, 0.8)
    pooled = summary["pooled"]  # 8 of 15 episodes pooled
    assert pooled["mean"] == pytest.approx(8 / 15) and pooled["n"] == 15
    assert (
        pooled["high"] - pooled["low"]
        < summary["between_seeds"]["high"] - summary["between_seeds"]["low"]
    ), "three disagreeing seeds leave less certainty than 15 pooled episodes suggest"


def _binomial_pmf(n, p):
    return [math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(n + 1)]


def test_exact_coverage_clopper_pearson_never_below_and_wilson_near_nominal():
    # Coverage summed over every outcome k of Binomial(n, p): Clopper-Pearson's guarantee is
    # >= 95% at every p; Wilson is near 95% on average (Brown, Cai & DasGupta 2001, fig. 5).
    n = 20
    cp = [clopper_pearson_interval(k, n) for k in range(n + 1)]
    wilson = [wilson_interval(k, n) for k in range(n + 1)]
    wilson_coverage = []
    for p in np.linspace(0.01, 0.99, 99):
        pmf = _binomial_pmf(n, p)
        assert sum(q for q, ci in zip(pmf, cp) if ci.low <= p <= ci.high) >= 0.95 - 1e-12
        wilson_coverage.append(sum(q for q, ci in zip(pmf, wilson) if ci.low <= p <= ci.high))
    assert 0.94 < np.mean(wilson_coverage) < 0.96


def test_newcombe_paired_coverage_is_near_nominal_on_random_tables():
    # Exact coverage over all tables of 12 pairs, for random cell probabilities: Newcombe reports
    # mean coverage close to 95% for method 10; a wrong phi or a swapped bound breaks this.
    n, rng, coverage = 12, np.random.default_rng(0), []
    tables = [
        (a, b, c, n - a - b - c)
        for a in range(n + 1)
        for b in range(n + 1 - a)
        for c in range(n + 1 - a - b)
    ]
    intervals = [paired_difference_interval(*_pairs(*t)) for t in tables]
    for probs in rng.dirichlet([1, 1, 1, 1], size=20):
        theta = probs[1] - probs[2]
        covered = 0.0
        for table, ci in zip(tables, intervals):
            if ci.low <= theta <= ci.high:
                covered += math.factorial(n) * math.prod(
                    p**k / math.factorial(k) for p, k in zip(probs, table)
                )
        coverage.append(covered)
    assert 0.93 < np.mean(coverage) < 0.97 and min(coverage) > 0.9


def _keyed(table, run="run-a"):
    """The 2x2 table (both, only first, only second, neither) as two outcome tables keyed by
    (run, task, visit), as a stream or a pooled comparison keys its episodes."""
    first, second = _pairs(*table)
    keys = [(run, task // 2, 1 + task % 2) for task in range(len(first))]
    return dict(zip(keys, first)), dict(zip(keys, second))


def test_paired_comparison_is_newcombe_and_mcnemar_over_the_shared_episodes():
    # Cavo et al. (2012): -0.0621 (-0.1186, -0.0046) published; McNemar by hand: b = 6, c = 16,
    # p = 2 * sum_{k<=6} C(22, k) / 2^22 = 2 * 110056 / 4194304.
    first, second = _keyed((59, 6, 16, 80))
    # Episodes only one side played (another run's, an unfinished visit) are not pairs.
    first[("run-b", 0, 1)], second[("run-c", 0, 1)] = 1.0, 0.0
    out = paired_comparison(first, second)
    assert out["pairs"] == 161
    d = out["difference"]
    assert (d["mean"], d["low"], d["high"]) == pytest.approx((-0.0621, -0.1186, -0.0046), abs=1e-4)
    assert out["mcnemar_p"] == pytest.approx(220112 / 4194304, rel=1e-9)
    assert out["resolvable"] == pytest.approx(max(d["mean"] - d["low"], d["high"] - d["mean"]))
    # (2,1,0,1) by hand (above): +0.25 [-0.319557, +0.655287], the wider side below; one
    # discordant pair: p = 1.
    out = paired_comparison(*_keyed((2, 1, 0, 1)))
    assert out["difference"]["low"] == pytest.approx(-0.319557, abs=2e-6)
    assert out["mcnemar_p"] == 1.0 and out["resolvable"] == pytest.approx(0.25 + 0.319557, abs=2e-6)
    # Nothing in common: no pairs, no p, no resolution (not a made-up zero).
    empty = paired_comparison({("a", 0, 1): 1.0}, {("b", 0, 1): 1.0})
    assert empty["pairs"] == 0 and empty["mcnemar_p"] is None and empty["resolvable"] is None
    assert math.isnan(empty["difference"]["mean"])
