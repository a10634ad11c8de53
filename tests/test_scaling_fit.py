"""Scaling fits: a known power law recovered from noisy seeds with a t interval computed by hand, its coverage,
the held-out check, non-positive gains, and gains paired by seed against an external reference."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from analysis.collect import SweepResults, config_columns
from analysis.config import analysis_config
from analysis.powerlaw import fit_power_law
from analysis.gain_reference import resolve_reference
from analysis.scaling import scaling_analysis

SLOPE, INTERCEPT = 0.085, -4.733  # HELIX's CTR fit, used as the truth


def _noisy_points(seed: int, *, n_seeds: int = 8, noise: float = 4e-4):
    rng = np.random.default_rng(seed)
    flops = np.geomspace(0.1, 100.0, 6)  # [P]
    true = np.exp(INTERCEPT + SLOPE * np.log(flops))  # [P], ~0.0048 .. 0.0087
    gains = true[:, None] + rng.normal(0, noise, (len(flops), n_seeds))  # [P, S]
    return flops, true, gains


def _per_seed(flops: np.ndarray, gains: np.ndarray):
    x = np.repeat(np.log(flops), gains.shape[1])  # [P * S]
    return x, np.log(gains.ravel())


def test_recovers_known_slope_with_a_hand_computed_t_interval():
    flops, _, gains = _noisy_points(0)
    fit, excluded, _ = fit_power_law(flops, gains, labels=[str(f) for f in flops])
    assert excluded == [] and fit.n_obs == gains.size and fit.df == gains.size - 2
    # the same regression by an independent route: numpy least squares on every per-seed point
    x, y = _per_seed(flops, gains)
    (slope_np, intercept_np), ss_res, *_ = np.polyfit(x, y, 1, full=True)
    assert fit.slope == pytest.approx(slope_np, rel=1e-10)
    assert fit.intercept == pytest.approx(intercept_np, rel=1e-10)
    se = np.sqrt(ss_res[0] / (len(x) - 2) / ((x - x.mean()) ** 2).sum())
    half = stats.t.ppf(0.975, len(x) - 2) * se
    assert fit.slope_se == pytest.approx(se, rel=1e-9)
    assert fit.slope_ci == pytest.approx((slope_np - half, slope_np + half), rel=1e-9)
    assert fit.slope_ci[0] < SLOPE < fit.slope_ci[1]
    assert fit.slope == pytest.approx(SLOPE, abs=0.02) and fit.intercept == pytest.approx(INTERCEPT, abs=0.05)
    assert "per-seed points" in fit.ci_method
    # the band is the t band of the mean line: at the mean ln x its half width is t * s / sqrt(n)
    s = np.sqrt(ss_res[0] / (len(x) - 2))
    centre = np.argmin(np.abs(np.log(fit.band_x) - x.mean()))
    g = np.log(fit.band_x[centre])
    expected = stats.t.ppf(0.975, len(x) - 2) * s * np.sqrt(1 / len(x) + (g - x.mean()) ** 2 / ((x - x.mean()) ** 2).sum())
    assert np.log(fit.band_hi[centre]) - (intercept_np + slope_np * g) == pytest.approx(expected, rel=1e-9)


def test_t_interval_covers_the_truth_at_about_the_nominal_rate():
    covered = 0
    for rep in range(40):
        flops, _, gains = _noisy_points(100 + rep)
        fit, _, _ = fit_power_law(flops, gains, labels=[""] * 6)
        covered += fit.slope_ci[0] < SLOPE < fit.slope_ci[1]
    assert covered >= 34  # nominal 95% of 40 = 38; binomial 1st percentile ~34


def test_held_out_predicts_the_largest_compute_point():
    flops, _, gains = _noisy_points(1)
    fit, _, _ = fit_power_law(flops, gains, labels=[f"p{i}" for i in range(6)])
    b, a = np.polyfit(*_per_seed(flops[:-1], gains[:-1]), 1)
    ho = fit.held_out
    assert ho.label == "p5" and ho.observed == pytest.approx(gains[-1].mean())
    assert ho.predicted == pytest.approx(np.exp(a + b * np.log(flops[-1])), rel=1e-10)
    assert ho.log_error == pytest.approx(np.log(ho.predicted / gains[-1].mean()))
    assert abs(ho.log_error) < 0.15


def test_non_positive_gains_are_listed_and_left_out():
    flops, true, gains = _noisy_points(2)
    gains[0] = -0.001  # the smallest model is worse than the reference
    gains[3, :4] = np.nan  # a size with only half its seeds still counts
    gains[4, 0] = -0.0002  # one unlucky seed at a size with a positive mean
    fit, excluded, _ = fit_power_law(flops, gains, labels=[f"p{i}" for i in range(6)], seeds=np.arange(10, 18))
    assert excluded == [0]
    assert fit.n_points == 5 and fit.dropped == [("p4", 10, pytest.approx(-0.0002))]
    keep = np.isfinite(gains[1:]) & (gains[1:] > 0)
    x = np.repeat(np.log(flops[1:]), gains.shape[1]).reshape(5, -1)[keep]
    slope_np, _ = np.polyfit(x, np.log(gains[1:][keep]), 1)
    assert fit.slope == pytest.approx(slope_np, rel=1e-10)
    assert 10 not in fit.seed_slopes or np.isfinite(fit.seed_slopes[10])
    none, excluded_all, note = fit_power_law(flops[:2], -np.abs(gains[:2]), labels=["", ""])
    assert none is None and excluded_all == [0, 1] and "nothing to fit" in note


def test_seed_slopes_are_each_seeds_own_fit():
    flops, _, gains = _noisy_points(3, n_seeds=3)
    fit, _, _ = fit_power_law(flops, gains, labels=[""] * 6, seeds=np.array([7, 8, 9]))
    for j, s in enumerate((7, 8, 9)):
        assert fit.seed_slopes[s] == pytest.approx(np.polyfit(np.log(flops), np.log(gains[:, j]), 1)[0], rel=1e-10)


def _results(runs: pd.DataFrame, analysis: dict | None = None) -> SweepResults:
    cfg = analysis_config(analysis)
    cfg.baseline = cfg.baseline or "wukong"
    return SweepResults(Path("."), "t", runs, cfg, config_columns(runs), cfg.baseline)


def _analyse(runs: pd.DataFrame, analysis: dict | None = None):
    results = _results(runs, analysis)
    ref = resolve_reference(results.runs, results.config, results.baseline, results.config_columns)
    return scaling_analysis(results, ref)


def test_families_points_and_seed_paired_reference():
    rows = []
    ref = {0: 0.700, 1: 0.702, 2: 0.698}
    for s, r in ref.items():
        rows.append({"arch": "wukong", "seed": s, "delay_s": 60, "model.dim": 64, "test_auc": r,
                     "test_logloss": 0.5, "flops_per_target": 4e5})
        for dim, flops, gain in ((32, 1e6, -0.0005), (64, 4e6, 0.004), (128, 16e6, 0.008), (256, 64e6, 0.016)):
            rows.append({"arch": "whale", "seed": s, "delay_s": 60, "model.dim": dim, "test_auc": r + gain,
                         "test_logloss": 0.5 * (1 - gain), "flops_per_target": flops})
    fams = _analyse(pd.DataFrame(rows))
    assert [(f.family, f.metric) for f in fams] == [("whale", "auc"), ("whale", "logloss")]  # reference not fitted
    auc = fams[0]
    assert [p.setting for p in auc.points] == [{"model.dim": d} for d in (32, 64, 128, 256)]
    np.testing.assert_allclose(auc.points[1].gain_per_seed, [0.004] * 3, atol=1e-12)  # paired by seed: no noise
    assert [p.label for p in auc.excluded] == ["whale (dim=32)"]
    assert auc.fit.slope == pytest.approx(np.log(2) / np.log(4), rel=1e-6)  # gain doubles per 4x FLOPs
    assert auc.convention.x_axis == "forward" and auc.convention.x_unit == "flops"
    assert auc.ref_value == pytest.approx(0.7)
    np.testing.assert_allclose(fams[1].points[2].gain_per_seed, [0.008] * 3, rtol=1e-9)  # relative loss gain


def test_size_attributes_do_not_split_a_family_and_unpaired_seeds_are_named():
    rows = []
    for s in (0, 1, 2):
        rows.append({"arch": "wukong", "seed": s, "model.dim": 64, "model.head_dim": np.nan, "test_auc": 0.7,
                     "flops_per_target": 4e5})
        for dim in (16, 32, 64):  # head_dim follows dim: an attribute of the size
            rows.append({"arch": "whale", "seed": s, "model.dim": dim, "model.head_dim": dim // 4,
                         "test_auc": 0.7 + 1e-4 * dim, "flops_per_target": dim * 1e5})
    rows.append({"arch": "whale", "seed": 3, "model.dim": 16, "model.head_dim": 4, "test_auc": 0.71,
                 "flops_per_target": 16e5})
    fams = _analyse(pd.DataFrame(rows), {"scaling": {"size_by": ["model.dim"]}})
    assert [f.family for f in fams] == ["whale"]
    assert len(fams[0].points) == 3 and fams[0].n_seeds == 3
    assert any("seed(s) 3 have no reference run" in n for n in fams[0].notes)
