"""Curve forms, held-out checks, extrapolations and power statements on points drawn from known curves plus
noise: the parameters come back within stated tolerances, the true form wins the held-out comparison, and
the closed forms of the log-linear extrapolation and of the paired t-test power hold."""
from __future__ import annotations

import numpy as np
import pytest

from analysis.fits.axes import Convention
from analysis.fits.extrapolation import TARGET_STEP, compute_for_gain
from analysis.fits.form_check import check_forms
from analysis.fits.forms import LOG_LINEAR, SATURATING, Ladder, fit_saturating
from analysis.stats.paired import minimum_detectable_effect, seeds_for_power

X = np.geomspace(1e-4, 1e-1, 6)  # [P] training GFLOPs


def _ladder(values: np.ndarray, metric: str = "auc", ref: float = 0.70) -> Ladder:
    S = values.shape[1]
    return Ladder(metric, [f"p{i}" for i in range(len(X))], X, values, np.full(S, ref), np.arange(S),
                  metric != "logloss", Convention("training", "gflops", "absolute"))


def _draw(curve, n_seeds: int, noise: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return curve(X)[:, None] + rng.normal(0, noise, (len(X), n_seeds))  # [P, S]


@pytest.mark.parametrize("higher, y_inf, amp, alpha", [(True, 0.76, 0.004, 0.3), (False, 0.45, 0.01, 0.25)])
def test_saturating_parameters_are_recovered(higher, y_inf, amp, alpha):
    sign = -1.0 if higher else 1.0
    values = _draw(lambda c: y_inf + sign * amp * c ** -alpha, 5, 3e-4, 1)
    lx = np.repeat(np.log(X), 5)
    curve = fit_saturating(lx, values.ravel(), higher_is_better=higher, scale=3e-4)
    assert curve.params["alpha"] == pytest.approx(alpha, abs=0.05)
    assert curve.params["y_inf"] == pytest.approx(y_inf, abs=0.002)
    assert curve.params["A"] == pytest.approx(amp, rel=0.3)


def test_the_robust_loss_keeps_the_exponent_despite_one_wild_point():
    values = _draw(lambda c: 0.76 - 0.004 * c ** -0.3, 5, 3e-4, 2)
    values[2, 0] -= 0.05  # one collapsed-looking run, 150 noise sds low
    curve = fit_saturating(np.repeat(np.log(X), 5), values.ravel(), higher_is_better=True, scale=3e-4)
    assert curve.params["alpha"] == pytest.approx(0.3, abs=0.06)


def test_the_true_form_predicts_held_out_sizes_best_and_the_others_lack_fit():
    values = _draw(lambda c: 0.76 - 0.004 * c ** -0.3, 5, 3e-4, 3)
    check = check_forms(_ladder(values))
    assert check.best == SATURATING
    sat, lin = check.form(SATURATING), check.form(LOG_LINEAR)
    assert sat.rmse < 2 * check.seed_se < lin.rmse  # the log-linear form misses held-out sizes by > 2 SE
    assert lin.lof_p < 0.01 and sat.lof_p > 0.01
    lo, hi = sat.intervals["alpha"].lo, sat.intervals["alpha"].hi  # one draw: bracket the estimate, near 0.3
    assert 0.2 < lo <= sat.params["alpha"] <= hi < 0.4


def test_log_linear_slope_is_recovered_and_its_extrapolation_has_the_closed_form():
    b = 0.006
    values = _draw(lambda c: 0.74 + b * np.log(c), 4, 2e-4, 4)
    ladder = _ladder(values)
    check = check_forms(ladder)
    lin = check.form(LOG_LINEAR)
    assert lin.params["b"] == pytest.approx(b, abs=5e-4)
    assert lin.intervals["b"].lo <= b <= lin.intervals["b"].hi
    (ext,) = [e for e in [compute_for_gain(ladder, LOG_LINEAR)] if e is not None]
    step = TARGET_STEP * values[-1].mean()
    assert ext.x == pytest.approx(X[-1] * np.exp(step / lin.params["b"]), rel=1e-6)  # C_top e^(step / b)
    assert ext.determined and ext.interval.lo <= ext.x <= ext.interval.hi


def test_a_flat_ladder_gives_no_determined_extrapolation():
    values = _draw(lambda c: 0.74 + 0.0 * c, 3, 1e-3, 5)
    ext = compute_for_gain(_ladder(values), LOG_LINEAR)
    assert not ext.determined and ext.words.startswith("not determined")


@pytest.mark.parametrize("sd, effect", [(0.002, 0.001), (0.2, 0.085), (0.01, 0.02)])
def test_seeds_for_power_is_the_smallest_count_whose_detectable_effect_is_small_enough(sd, effect):
    n = int(seeds_for_power(sd, effect))
    assert minimum_detectable_effect(sd, n) <= effect
    if n > 2:
        assert minimum_detectable_effect(sd, n - 1) > effect


def test_a_saturating_fit_with_its_exponent_at_a_bound_predicts_but_identifies_no_parameters():
    """Points on a straight line in ln C (AUC = 0.70 + 0.01 ln C, no curvature): the saturating form runs its
    exponent to the lower bound, where y_inf and A trade off along a flat valley. It still predicts the line,
    but reports no parameters."""
    lx = np.repeat(np.log([1.0, 4.0, 16.0, 64.0]), 3)
    y = 0.70 + 0.01 * lx + np.tile([-1e-4, 0.0, 1e-4], 4)
    curve = fit_saturating(lx, y, higher_is_better=True, scale=1e-4)
    assert curve is not None and not curve.identified
    assert all(np.isnan(v) for v in curve.params.values())
    assert np.allclose(curve.predict(np.log([2.0, 32.0])), 0.70 + 0.01 * np.log([2.0, 32.0]), atol=5e-4)
