"""Seed-level statistics against hand computations and brute-force enumerations."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from analysis.stats.paired import (
    DECIDED,
    NOT_DECIDED,
    UNTESTABLE,
    bca_interval,
    holm,
    holm_levels,
    minimum_detectable_effect,
    paired_stats,
    sign_flip_pvalue,
    t_interval,
    verdict,
)

A = np.array([0.7571, 0.7562, 0.7580, 0.7566, 0.7574])
B = np.array([0.7545, 0.7549, 0.7551, 0.7541, 0.7560])


def test_holm_matches_hand_computed_case():
    # sorted p: 0.005*4 = 0.02, 0.01*3 = 0.03, 0.03*2 = 0.06, 0.04*1 = 0.04 -> running max 0.06
    np.testing.assert_allclose(holm([0.01, 0.04, 0.03, 0.005]), [0.03, 0.06, 0.06, 0.02])
    # NaN (untestable) entries are not counted in the family and stay NaN
    np.testing.assert_allclose(holm([0.01, np.nan, 0.04]), [0.02, np.nan, 0.04])
    # 0.5*2 = 1.0; 0.9*1 = 0.9 is raised to the running max 1.0 (adjusted p-values keep the order)
    np.testing.assert_allclose(holm([0.5, 0.9]), [1.0, 1.0])


def test_paired_t_equals_hand_computation():
    d = A - B
    t = d.mean() / (d.std(ddof=1) / np.sqrt(len(d)))
    p = 2 * stats.t.sf(abs(t), len(d) - 1)
    res = paired_stats(A, B, n_resamples=999)
    assert res.p_t == pytest.approx(p, rel=1e-12)
    assert res.mean == pytest.approx(d.mean()) and res.std == pytest.approx(d.std(ddof=1))


def test_sign_flip_is_exact_enumeration_for_few_seeds():
    d = A - B + np.array([0.0, -0.0025, 0.0, 0.0, -0.0031])  # mixed signs
    flips = np.array(list(itertools.product([1, -1], repeat=len(d))))  # [32, 5]
    null = (flips * d).mean(axis=1)
    exact = np.mean(np.abs(null) >= abs(d.mean()) - 1e-15)
    assert sign_flip_pvalue(d, n_resamples=999, seed=0) == pytest.approx(exact)


def test_bootstrap_and_permutation_reproducible_with_a_seed():
    rng = np.random.default_rng(1)
    d = rng.normal(0.001, 0.002, 15)  # 2**15 > n_resamples: the permutation test samples
    assert bca_interval(d, n_resamples=999, seed=3) == bca_interval(d, n_resamples=999, seed=3)
    assert bca_interval(d, n_resamples=999, seed=3) != bca_interval(d, n_resamples=999, seed=4)
    p3 = sign_flip_pvalue(d, n_resamples=999, seed=3)
    assert p3 == sign_flip_pvalue(d, n_resamples=999, seed=3)
    flips = np.array(list(itertools.product([1, -1], repeat=len(d))))
    exact = np.mean(np.abs((flips * d).mean(axis=1)) >= abs(d.mean()) - 1e-15)
    assert p3 == pytest.approx(exact, abs=0.03)  # Monte Carlo error of 999 draws
    lo, hi = bca_interval(d, n_resamples=4999, seed=0)
    half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
    assert lo < d.mean() < hi
    assert (hi - lo) == pytest.approx(2 * half, rel=0.3)  # close to the t interval at n = 15


def test_minimum_detectable_effect_has_the_stated_power():
    sd, n = 1.0, 6
    mde = minimum_detectable_effect(sd, n, alpha=0.05, power=0.8)
    rng = np.random.default_rng(0)
    samples = rng.normal(mde, sd, size=(40000, n))
    p = stats.ttest_1samp(samples, 0.0, axis=1).pvalue
    assert np.mean(p < 0.05) == pytest.approx(0.8, abs=0.01)
    # large-n limit: (z_0.975 + z_0.8) * sd / sqrt(n)
    big = minimum_detectable_effect(sd, 4000)
    assert big == pytest.approx((stats.norm.ppf(0.975) + stats.norm.ppf(0.8)) / np.sqrt(4000), rel=2e-3)


def test_verdicts_and_small_seed_counts():
    res = paired_stats(A, B, n_resamples=999)
    assert verdict(res.p_t, 0.05) == DECIDED
    assert verdict(0.2, 0.05) == NOT_DECIDED and verdict(float("nan"), 0.05) == UNTESTABLE
    assert any("cannot go below 0.0625" in n for n in res.notes)
    one = paired_stats(A[:1], B[:1])
    assert one.n == 1 and np.isnan(one.p_t) and one.deltas == (A[0] - B[0],)
    assert "without p-values" in one.notes[0]
    flat = paired_stats(A, A - 0.001, n_resamples=999)  # identical deltas: no spread, t undefined
    assert np.isnan(flat.p_t) and flat.ci_low == pytest.approx(0.001)


def test_holm_levels_decide_exactly_as_the_adjusted_p_values():
    """Hand case: sorted p 0.005, 0.01, 0.03, 0.04 meet Holm's steps alpha/4, alpha/3, alpha/2 and, raised by the
    running max (0.06 > 0.04 * 1), alpha * 0.04 / 0.06 for the last; random families: p < level exactly when the
    Holm-adjusted p < alpha, and the t interval at that level excludes zero exactly then."""
    np.testing.assert_allclose(holm_levels([0.01, 0.04, 0.03, 0.005, np.nan], 0.05),
                               [0.05 / 3, 0.05 * 0.04 / 0.06, 0.05 / 2, 0.05 / 4, np.nan])
    rng = np.random.default_rng(1)
    for _ in range(200):
        deltas = rng.normal(rng.uniform(0, 2, size=(6, 1)), 1.0, size=(6, 4))
        p = stats.ttest_1samp(deltas, 0.0, axis=1).pvalue
        levels = holm_levels(p, 0.05)
        np.testing.assert_array_equal(p < levels, holm(p) < 0.05)
        for d, level, decided in zip(deltas, levels, holm(p) < 0.05):
            lo, hi = t_interval(d.mean(), d.std(ddof=1), len(d), level)
            assert (lo > 0 or hi < 0) == decided


def test_the_mde_beside_a_verdict_has_the_planned_power_under_the_verdict_procedure():
    """The MDE printed beside a verdict (a paired t at alpha / m, Holm's first step), recomputed by simulation:
    paired normal deltas with the observed sd and a true mean equal to that MDE, in a family of six whose other five
    comparisons are null (their p-values drawn uniform), are decided by Holm with the planned power (seeded; Monte
    Carlo sd 0.004 at 10,000 draws)."""
    n, sd, alpha, power, m = 5, 2e-3, 0.05, 0.8, 6
    mde = minimum_detectable_effect(sd, n, alpha=alpha / m, power=power)
    rng = np.random.default_rng(7)
    p = stats.ttest_1samp(rng.normal(mde, sd, size=(10_000, n)), 0.0, axis=1).pvalue
    families = np.column_stack([p, rng.uniform(size=(len(p), m - 1))])
    decided = np.array([holm(f)[0] < alpha for f in families])
    assert decided.mean() == pytest.approx(power, abs=0.015)
