"""Scaling fits with the seed as the unit: a known power law recovered from noisy seeds with a per-seed t
interval computed by hand (each seed's level fit against scipy's curve_fit), its coverage under seed effects
shared across sizes (where the old per-point interval under-covers) and with gains <= 0 at the small sizes
(every point kept), runs that are not data points listed, and gains paired by seed against an external
reference."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import optimize, stats

from analysis.collect import SweepResults, config_columns
from analysis.config import analysis_config
from analysis.fits.powerlaw import fit_power_law
from analysis.fits.reference import resolve_reference
from analysis.fits.scaling import scaling_analysis

SLOPE, INTERCEPT = 0.085, -4.733  # HELIX's CTR fit, used as the truth


def _noisy_points(seed: int, *, n_seeds: int = 8, noise: float = 4e-4):
    rng = np.random.default_rng(seed)
    flops = np.geomspace(0.1, 100.0, 6)  # [P]
    true = np.exp(INTERCEPT + SLOPE * np.log(flops))  # [P], ~0.0048 .. 0.0087
    gains = true[:, None] + rng.normal(0, noise, (len(flops), n_seeds))  # [P, S]
    return flops, true, gains


def curve_fit_power_law(flops: np.ndarray, gains: np.ndarray) -> tuple[float, float]:
    """(slope, intercept) of gain = e^intercept x^slope by scipy's least squares: the independent route."""
    lx = np.log(flops)
    start = np.polyfit(lx, np.log(np.abs(gains) + 1e-3), 1)
    (intercept, slope), _ = optimize.curve_fit(lambda q, a, b: np.exp(a + b * q), lx, gains, p0=start[::-1],
                                               xtol=1e-15, ftol=1e-15, maxfev=100000)
    return float(slope), float(intercept)


def test_slope_is_the_mean_of_per_seed_fits_with_a_seed_t_interval():
    flops, _, gains = _noisy_points(0)
    fit, excluded, _ = fit_power_law(flops, gains, labels=[str(f) for f in flops])
    S = gains.shape[1]
    assert excluded == [] and fit.n_obs == gains.size and fit.df == S - 1 and fit.n_seeds == S
    # independent route: scipy's curve_fit per seed, then a one-sample t interval over the seeds
    per_seed = np.array([curve_fit_power_law(flops, gains[:, j]) for j in range(S)])  # [S, 2]
    slopes = per_seed[:, 0]
    half = stats.t.ppf(0.975, S - 1) * slopes.std(ddof=1) / np.sqrt(S)
    assert fit.slope == pytest.approx(slopes.mean(), rel=1e-6)
    assert fit.intercept == pytest.approx(per_seed[:, 1].mean(), rel=1e-6)
    assert fit.slope_ci == pytest.approx((slopes.mean() - half, slopes.mean() + half), rel=1e-6)
    # the pseudo-replicated interval is centred on the level fit of every point pooled
    pooled = curve_fit_power_law(np.repeat(flops, S), gains.ravel())[0]
    assert np.mean(fit.slope_ci_per_point) == pytest.approx(pooled, rel=1e-6)
    assert fit.slope_ci[0] < SLOPE < fit.slope_ci[1]
    assert "seed" in fit.ci_method and fit.r2_means > 0.9
    # the band at each x is the t interval of the per-seed lines there
    g = np.log(fit.band_x[17])
    lines = per_seed[:, 1] + slopes * g
    band_half = stats.t.ppf(0.975, S - 1) * lines.std(ddof=1) / np.sqrt(S)
    assert np.log(fit.band_hi[17]) == pytest.approx(lines.mean() + band_half, rel=1e-9)


def _seed_effect_draw(rng, lx, n_seeds, slope):
    """ln gain with a per-seed shift shared by every size (batch order, and the seed's reference run moving
    all its gains together) and a per-seed slope deviation (a shared reference moves a seed's small gains
    proportionally more than its large ones), plus independent noise per point."""
    shift = rng.normal(0, 0.15, n_seeds)
    tilt = rng.normal(0, 0.08, n_seeds)
    noise = rng.normal(0, 0.05, (len(lx), n_seeds))
    return np.exp(-2.0 + slope * lx[:, None] + shift[None, :] + tilt[None, :] * (lx - lx.mean())[:, None] + noise)


def test_seed_intervals_cover_at_the_nominal_rate_where_per_point_intervals_under_cover():
    """Coverage simulation: 4 sizes x 3 seeds with seed effects shared across sizes. The seed-unit interval
    covers the true slope at ~95%; the old per-point interval (12 points as independent, df 10) measurably
    less. 2000 draws: the binomial sd of a 95% coverage is 0.5%."""
    rng = np.random.default_rng(7)
    flops = np.geomspace(2.5e-4, 1e-2, 4)
    slope, n_draws, new, old = 0.2, 2000, 0, 0
    for _ in range(n_draws):
        fit, _, _ = fit_power_law(flops, _seed_effect_draw(rng, np.log(flops), 3, slope), labels=[""] * 4)
        new += fit.slope_ci[0] <= slope <= fit.slope_ci[1]
        old += fit.slope_ci_per_point[0] <= slope <= fit.slope_ci_per_point[1]
    assert 0.93 <= new / n_draws <= 0.97
    assert old / n_draws < 0.90


def test_gains_at_or_below_zero_are_points_and_only_runs_that_did_not_learn_are_listed():
    flops, true, gains = _noisy_points(2)
    gains[0] = -0.001  # the smallest model is worse than the reference at every seed: still a point
    gains[3, :4] = np.nan  # a size with only half its seeds still counts
    gains[4, 0] = -0.0002  # one unlucky seed: a point like the others
    skip = {(2, 1): "did not learn (test AUC 0.5)"}
    fit, excluded, _ = fit_power_law(flops, gains, labels=[f"p{i}" for i in range(6)], seeds=np.arange(10, 18),
                                     skip=skip)
    assert excluded == []
    assert {(d.label, d.seed): d.reason for d in fit.dropped} == {("p2", 11): "did not learn (test AUC 0.5)"}
    keep = np.isfinite(gains)
    keep[2, 1] = False
    assert fit.n_obs == keep.sum() == gains.size - 4 - 1 and fit.n_points == 6
    for j, seed in enumerate(range(10, 18)):
        ok = keep[:, j]
        assert fit.seed_slopes[seed] == pytest.approx(curve_fit_power_law(flops[ok], gains[ok, j])[0], rel=1e-6)
    none, excluded_all, note = fit_power_law(flops[:3], -np.abs(gains[:3]), labels=[""] * 3)
    assert none is None and excluded_all == [] and "no seed's gains fit a positive power law" in note
    skipped = {(p, j): "did not learn" for p in range(2) for j in range(8)}
    none, excluded_all, _ = fit_power_law(flops[:3], gains[:3], labels=[""] * 3, skip=skipped)
    assert none is None and excluded_all == [0, 1]


def test_a_known_power_law_with_negative_small_gains_is_recovered_at_the_stated_rate():
    """gain = 0.002 (x / 1e4)^0.6 at 4 sizes x 5 seeds, seed noise (sd 0.0015 per run, 0.001 per seed) that
    makes about one small-size gain in six <= 0: every point is fitted (n_obs = points given) and the seed t
    interval covers the true slope at 95% (400 draws: binomial sd 1.1%)."""
    rng = np.random.default_rng(11)
    flops = np.geomspace(1e4, 1e6, 4)
    true = 0.002 * (flops / 1e4) ** 0.6  # [P] 0.002 .. 0.032
    covered, negative = 0, 0
    for _ in range(400):
        gains = true[:, None] + rng.normal(0, 0.0015, (4, 5)) + rng.normal(0, 0.001, 5)[None, :]  # [P, S]
        negative += int((gains <= 0).sum())
        fit, excluded, _ = fit_power_law(flops, gains, labels=[""] * 4)
        assert fit.n_obs == gains.size and excluded == [] and fit.dropped == []
        covered += fit.slope_ci[0] <= 0.6 <= fit.slope_ci[1]
    assert negative > 100
    assert 0.92 <= covered / 400 <= 0.98


def test_two_parameters_are_not_fitted_on_two_sizes():
    flops, _, gains = _noisy_points(3, n_seeds=3)
    fit, excluded, note = fit_power_law(flops[:2], gains[:2], labels=["a", "b"])
    assert fit is None and excluded == [] and note == "not fitted: 2 parameters on 2 sizes"
    fit, _, note = fit_power_law(flops[:3], gains[:3], labels=["a", "b", "c"])
    assert np.isfinite(fit.r2) and np.isfinite(fit.r2_means) and note == ""


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
    assert auc.excluded == [] and auc.fit.dropped == [] and auc.fit.n_obs == 12  # the gain <= 0 is a point
    exact = curve_fit_power_law(np.array([1e6, 4e6, 16e6, 64e6]), np.array([-0.0005, 0.004, 0.008, 0.016]))
    assert auc.fit.slope == pytest.approx(exact[0], rel=1e-6)
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


def test_slope_against_every_reference_setting_is_reported_with_its_range():
    rng = np.random.default_rng(5)
    refs = {16: 0.70 + rng.normal(0, 2e-3, 3), 32: 0.70 + rng.normal(0, 2e-3, 3)}  # same mean, other seeds' noise
    rows = [{"arch": "wukong", "seed": s, "model.dim": d, "test_auc": refs[d][s], "flops_per_target": 1e5 * d}
            for d in refs for s in range(3)]
    flops = np.array([1e6, 4e6, 16e6])
    auc = 0.70 + 0.02 * (flops / 1e6) ** 0.5
    auc = auc[:, None] + rng.normal(0, 5e-4, (3, 3))  # [P, S]
    rows += [{"arch": "whale", "seed": s, "model.dim": 8 * 2**i, "test_auc": auc[i, s], "flops_per_target": flops[i]}
             for i in range(3) for s in range(3)]
    fam = _analyse(pd.DataFrame(rows), {"scaling": {"reference": {"arch": "wukong", "model.dim": 16},
                                                    "size_by": ["model.dim"]}})[0]
    by_ref = {r.reference: r for r in fam.reference_slopes}
    assert set(by_ref) == {"wukong (dim=16)", "wukong (dim=32)"} and by_ref["wukong (dim=16)"].is_chosen
    for d in (16, 32):
        slopes = [curve_fit_power_law(flops, auc[:, s] - refs[d][s])[0] for s in range(3)]
        assert by_ref[f"wukong (dim={d})"].slope == pytest.approx(np.mean(slopes), rel=1e-9)
    assert fam.fit.slope == pytest.approx(by_ref["wukong (dim=16)"].slope, rel=1e-12)
