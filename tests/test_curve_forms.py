"""Curve forms, held-out checks, extrapolations and power statements on points drawn from known curves plus
noise: the parameters come back within stated tolerances, the true form wins the held-out comparison, the
closed forms of the log-linear extrapolation and of the paired t-test power hold, an interval the seed draws
do not bound reads "unbounded" (never the search bound), and no form is fitted on as many sizes as it has
parameters."""
from __future__ import annotations

import json

import numpy as np
import pytest

from analysis.fits.axes import Convention
from analysis.fits.forms import (
    LOG_LINEAR,
    POWER_LAW,
    SATURATING,
    TARGET_STEP,
    Ladder,
    check_forms,
    compute_for_gain,
    fit_saturating,
    interval_text,
    open_seed_interval,
)
from analysis.pipeline import json_safe
from analysis.report.section import as_json
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


def test_a_flat_ladder_gives_no_determined_extrapolation_and_an_interval_unbounded_above():
    """A flat ladder: most seed draws never reach the target, so the interval has no upper end. The search
    bound is no value: +inf in the fit, "unbounded above" in the words and report, null + a flag in JSON."""
    values = _draw(lambda c: 0.74 + 0.0 * c, 3, 1e-3, 5)
    ext = compute_for_gain(_ladder(values), LOG_LINEAR)
    assert not ext.determined and ext.words == "not determined: the fitted curve does not reach it (unbounded above)"
    assert np.isfinite(ext.interval.lo) and ext.interval.hi == np.inf
    written = json.loads(json.dumps(json_safe(as_json(ext))))["interval"]
    assert written["hi"] is None and written["unbounded_above"] and not written["unbounded_below"]
    assert written["lo"] == pytest.approx(ext.interval.lo)
    assert interval_text(ext.interval.lo, ext.interval.hi) == f"[{ext.interval.lo:.3g}, unbounded above]"
    below = open_seed_interval(3, lambda idx: -np.inf if 0 in idx else float(idx.sum()))
    assert below.lo == -np.inf and interval_text(below.lo, below.hi) == f"[unbounded below, {below.hi:.3g}]"


def test_no_form_is_fitted_on_as_many_sizes_as_it_has_parameters():
    """3 sizes: the saturating form (3 parameters) is not fitted, nor drawn, nor extrapolated; the two
    2-parameter forms are. 2 sizes: none is."""
    values = _draw(lambda c: 0.76 - 0.004 * c**-0.3, 3, 1e-4, 8)[:3]
    three = Ladder("auc", ["a", "b", "c"], X[:3], values, np.full(3, 0.7), np.arange(3), True,
                   Convention("training", "gflops", "absolute"))
    check = check_forms(three)
    sat = check.form(SATURATING)
    assert three.fit(SATURATING) is None and sat.params == {} and sat.intervals == {} and not sat.held_out
    assert sat.notes == ["not fitted: 3 parameters on 3 sizes"] and compute_for_gain(three, SATURATING) is None
    assert check.form(LOG_LINEAR).params and check.form(POWER_LAW).params
    two = Ladder("auc", ["a", "b"], X[:2], values[:2], np.full(3, 0.7), np.arange(3), True,
                 Convention("training", "gflops", "absolute"))
    assert [r.notes for r in check_forms(two).forms] == [["not fitted: 2 parameters on 2 sizes"]] * 2 + [
        ["not fitted: 3 parameters on 2 sizes"]]


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
