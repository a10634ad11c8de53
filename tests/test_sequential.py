"""Group-sequential paired t-tests (analysis/stats/sequential.py): boundaries against published tables, Holm-type
recycling by hand, and error control and power by simulation with a planted truth (a fast version here; the
larger one is tests/bench/test_sequential_bench.py, written to docs/benchmarks/sequential.md by `make bench`)."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from analysis.stats.paired import minimum_detectable_effect, seeds_for_power
from analysis.stats.sequential import (
    SequentialDesign,
    holm_sequential,
    paired_t_pvalues,
    spent,
)
from tests.sequential_reference import crossing_probabilities, z_bounds

EQUAL_THIRDS = np.array([1, 2, 3]) / 3
EQUAL_FIFTHS = np.arange(1, 6) / 5


@pytest.mark.parametrize("fractions, constant, shape", [
    # Jennison & Turnbull (2000), Group Sequential Methods with Applications to Clinical Trials, Table 2.1
    # (Pocock's C_P(K, 0.05)) and Table 2.3 (O'Brien & Fleming's C_B(K, 0.05)), two-sided alpha 0.05:
    (EQUAL_THIRDS, 2.289, "pocock"), (EQUAL_FIFTHS, 2.413, "pocock"),
    (EQUAL_THIRDS, 2.004, "obrien_fleming"), (EQUAL_FIFTHS, 2.040, "obrien_fleming"),
])
def test_classical_boundaries_spend_their_published_alpha(fractions, constant, shape):
    k = np.arange(1, len(fractions) + 1)
    bounds = np.full(len(k), constant) if shape == "pocock" else constant * np.sqrt(len(k) / k)
    # the tables give 3 decimals: a change of 5e-4 in the constant moves the level by about 1e-4
    assert crossing_probabilities(bounds, fractions).sum() == pytest.approx(0.05, abs=2.5e-4)


def test_obrien_fleming_spending_boundaries_match_rpact():
    # rpact getDesignGroupSequential(typeOfDesign = "asOF", kMax = 3), one-sided alpha 0.025 (the upper half of
    # our two-sided 0.05): efficacy boundaries 3.710, 2.511, 1.993 and stage levels 0.0001, 0.0060, 0.0231
    # (rpact slides, 13th International Conference on Multiple Comparison Procedures 2025,
    # https://rpact-com.github.io/slides-mcp-2025).
    design = SequentialDesign((2, 4, 6), alpha=0.05)
    np.testing.assert_allclose(z_bounds(design), [3.710, 2.511, 1.993], atol=1e-3)
    np.testing.assert_allclose(stats.norm.sf(z_bounds(design)), [0.0001, 0.0060, 0.0231], atol=1e-4)


@pytest.mark.parametrize("spending", ["obrien_fleming", "pocock"])
def test_boundaries_spend_the_spending_function_look_by_look(spending):
    design = SequentialDesign((3, 5, 8), alpha=0.05, spending=spending)
    crossed = np.cumsum(crossing_probabilities(z_bounds(design), design.fractions))
    np.testing.assert_allclose(crossed, spent(design.fractions, 0.05, spending), atol=1e-6)
    assert spent(np.array([1.0]), 0.05, spending)[0] == pytest.approx(0.05)


def test_drift_raises_the_crossing_probability_to_the_fixed_designs_power_at_one_look():
    drift = stats.norm.isf(0.025) + stats.norm.isf(0.2)  # a one-look z-test at 0.05 has power 0.8 here
    assert crossing_probabilities(np.array([stats.norm.isf(0.025)]), np.array([1.0]), drift).sum() == \
        pytest.approx(0.8, abs=1e-6)


def test_t_levels_are_below_the_normal_ones_at_small_df_and_tend_to_them_with_many_seeds():
    few, many = SequentialDesign((3, 5, 8)), SequentialDesign((30, 50, 80))
    normal = 2 * stats.norm.sf(z_bounds(few))
    assert few.nominal_levels()[-1] < normal[-1]  # the normal levels at df 2, 4, 7 give a type-I error of 0.052
    np.testing.assert_allclose(many.nominal_levels(), 2 * stats.norm.sf(z_bounds(many)), rtol=0.15)


def test_paired_t_pvalues_equal_scipy_at_each_look():
    d = np.random.default_rng(3).normal(0.3, 1.0, size=(4, 8))
    p = paired_t_pvalues(d, (3, 5, 8))
    for k, n in enumerate((3, 5, 8)):
        np.testing.assert_allclose(p[:, k], stats.ttest_1samp(d[:, :n], 0.0, axis=1).pvalue, rtol=1e-10)
    assert np.isnan(paired_t_pvalues(np.ones((1, 3)), (3,))[0, 0])  # no spread: untestable


def test_holm_recycling_by_hand():
    design = SequentialDesign((3, 5, 8), alpha=0.05)
    half, full = design.nominal_levels(0.025), design.nominal_levels(0.05)
    # question 0 crosses its alpha/2 boundary at look 1; question 1 misses alpha/2 at look 0 but crosses the
    # full-alpha boundary there, so it is rejected at look 1 once question 0's alpha is recycled to it
    p = np.array([[1.0, half[1] * 0.9, 1.0],
                  [(half[0] + full[0]) / 2, 1.0, 1.0]])
    np.testing.assert_array_equal(holm_sequential(p, design)[0], [1, 1])
    # neither crosses at alpha/2: nothing is rejected, however close
    p = np.array([[1.0, half[1] * 1.01, half[2] * 1.01], [1.0, 1.0, half[2] * 1.01]])
    np.testing.assert_array_equal(holm_sequential(p, design)[0], [-1, -1])
    # a batch of studies [2, M, K] gives one answer per study; NaN (untestable) never rejects
    batch = np.stack([p, np.full_like(p, np.nan)])
    assert holm_sequential(batch, design)[0].shape == (2, 2)


def _simulate(design: SequentialDesign, effects: list[float], n: int, seed: int, draw: str = "normal"):
    """Reject look per study and question, for seed-level deltas of sd 1 with the planted mean `effects`."""
    rng = np.random.default_rng(seed)
    shape = (n, len(effects), design.seeds[-1])
    noise = rng.standard_normal(shape) if draw == "normal" else rng.standard_t(3, shape) / np.sqrt(3.0)
    return holm_sequential(paired_t_pvalues(noise + np.array(effects)[:, None], design.seeds), design)[0]


N_FAST = 20_000


def _mc_error(p: float, n: int) -> float:
    return 3.0 * np.sqrt(p * (1 - p) / n)


@pytest.mark.parametrize("draw", ["normal", "t3"])
def test_simulated_type_one_error_of_one_question_is_at_most_alpha(draw):
    design = SequentialDesign((3, 5, 8))
    rejected = (_simulate(design, [0.0], N_FAST, seed=11, draw=draw) >= 0).mean()
    assert rejected <= 0.05 + _mc_error(0.05, N_FAST)


def test_simulated_family_wise_error_of_four_null_questions_is_at_most_alpha():
    design = SequentialDesign((3, 5, 8))
    # two nulls beside two real effects: the family-wise error counts only the nulls' rejections
    rejected = _simulate(design, [0.0, 0.0, 2.0, 2.0], N_FAST, seed=12)
    fwer = (rejected[:, :2] >= 0).any(axis=1).mean()
    assert fwer <= 0.05 + _mc_error(0.05, N_FAST)


def test_simulated_power_as_planned_with_fewer_expected_seeds_than_the_fixed_design():
    design = SequentialDesign((3, 5, 8))
    effect = minimum_detectable_effect(1.0, 8, alpha=0.05, power=0.8)  # the fixed 8-seed design's 80% effect
    look = _simulate(design, [effect], N_FAST, seed=13)[:, 0]
    power = (look >= 0).mean()
    assert power == pytest.approx(0.8, abs=0.03)  # O'Brien-Fleming-type spending costs little power
    expected_seeds = np.where(look >= 0, np.array(design.seeds)[look], design.seeds[-1]).mean()
    assert expected_seeds < seeds_for_power(1.0, effect, alpha=0.05, power=power) - 0.3
