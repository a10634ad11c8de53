"""Scaling fits: recovering a known power law from noisy seeds, the held-out check, non-positive gains."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.collect import SweepResults, config_columns
from analysis.config import analysis_config
from analysis.scaling import fit_power_law, scaling_analysis

SLOPE, INTERCEPT = 0.085, -4.733  # HELIX's CTR fit, used as the truth


def _noisy_points(seed: int, *, n_seeds: int = 8, noise: float = 4e-4):
    rng = np.random.default_rng(seed)
    flops = np.geomspace(0.1, 100.0, 6)  # [P]
    true = np.exp(INTERCEPT + SLOPE * np.log(flops))  # [P], ~0.0048 .. 0.0087
    gains = true[:, None] + rng.normal(0, noise, (len(flops), n_seeds))  # [P, S]
    return flops, true, gains


def test_recovers_known_slope_and_intercept():
    flops, _, gains = _noisy_points(0)
    fit, excluded, _ = fit_power_law(flops, gains, labels=[str(f) for f in flops], n_resamples=1000, seed=0)
    assert excluded == []
    # the same regression by an independent route: numpy least squares on the seed means
    slope_np, intercept_np = np.polyfit(np.log(flops), np.log(gains.mean(axis=1)), 1)
    assert fit.slope == pytest.approx(slope_np, rel=1e-10)
    assert fit.intercept == pytest.approx(intercept_np, rel=1e-10)
    assert abs(fit.slope - SLOPE) < 3 * fit.slope_se
    assert abs(fit.intercept - INTERCEPT) < 3 * fit.intercept_se
    assert fit.slope_ci[0] < fit.slope < fit.slope_ci[1]  # coverage of the truth: the next test
    assert fit.slope == pytest.approx(SLOPE, abs=0.02) and fit.intercept == pytest.approx(INTERCEPT, abs=0.05)


def test_bootstrap_interval_covers_the_truth_most_of_the_time():
    covered = 0
    for rep in range(20):
        flops, _, gains = _noisy_points(100 + rep)
        fit, _, _ = fit_power_law(flops, gains, labels=[""] * 6, n_resamples=300, seed=rep)
        covered += fit.slope_ci[0] < SLOPE < fit.slope_ci[1]
    assert covered >= 15  # nominal 95%; percentile intervals from 8 seeds run a little narrow


def test_held_out_predicts_the_largest_compute_point():
    flops, _, gains = _noisy_points(1)
    fit, _, _ = fit_power_law(flops, gains, labels=[f"p{i}" for i in range(6)], n_resamples=200)
    means = gains.mean(axis=1)
    b, a = np.polyfit(np.log(flops[:-1]), np.log(means[:-1]), 1)
    ho = fit.held_out
    assert ho.label == "p5" and ho.observed == pytest.approx(means[-1])
    assert ho.predicted == pytest.approx(np.exp(a + b * np.log(flops[-1])), rel=1e-10)
    assert ho.log_error == pytest.approx(np.log(ho.predicted / means[-1]))
    assert abs(ho.log_error) < 0.15


def test_non_positive_gains_are_listed_and_left_out():
    flops, true, gains = _noisy_points(2)
    gains[0] = -0.001 + gains[0] * 0  # the smallest model is worse than the reference
    gains[3, :4] = np.nan  # a point with only half its seeds still counts
    fit, excluded, _ = fit_power_law(flops, gains, labels=[""] * 6, n_resamples=200)
    assert excluded == [0]
    assert fit.n_points == 5
    slope_np, _ = np.polyfit(np.log(flops[1:]), np.log(np.nanmean(gains[1:], axis=1)), 1)
    assert fit.slope == pytest.approx(slope_np, rel=1e-10)
    none, excluded_all, note = fit_power_law(flops[:2], -np.abs(gains[:2]), labels=["", ""], n_resamples=50)
    assert none is None and excluded_all == [0, 1] and "nothing to fit" in note


def _results(runs: pd.DataFrame, analysis: dict | None = None) -> SweepResults:
    cfg = analysis_config(analysis)
    cfg.baseline = cfg.baseline or "wukong"
    return SweepResults(Path("."), "t", runs, cfg, config_columns(runs), cfg.baseline)


def test_families_points_and_seed_paired_reference():
    rows = []
    ref = {0: 0.700, 1: 0.702, 2: 0.698}
    for s, r in ref.items():
        rows.append({"arch": "wukong", "seed": s, "delay_s": 60, "model.dim": 64, "test_auc": r,
                     "test_logloss": 0.5, "flops_per_target": 4e5})
        for dim, flops, gain in ((32, 1e6, -0.0005), (64, 4e6, 0.004), (128, 16e6, 0.008)):
            rows.append({"arch": "whale", "seed": s, "delay_s": 60, "model.dim": dim, "test_auc": r + gain,
                         "test_logloss": 0.5 * (1 - gain), "flops_per_target": flops})
    fams = scaling_analysis(_results(pd.DataFrame(rows)))
    assert [(f.family, f.metric) for f in fams] == [("whale", "auc"), ("whale", "logloss")]  # reference skipped
    auc = fams[0]
    assert [p.setting for p in auc.points] == [{"model.dim": 32}, {"model.dim": 64}, {"model.dim": 128}]
    np.testing.assert_allclose(auc.points[1].gain_per_seed, [0.004] * 3, atol=1e-12)  # paired by seed: no noise
    assert [p.label for p in auc.excluded] == ["whale (dim=32)"]
    assert auc.fit.slope == pytest.approx(np.log(2) / np.log(4), rel=1e-6)  # gain doubles per 4x FLOPs
    np.testing.assert_allclose(fams[1].points[2].gain_per_seed, [0.008] * 3, rtol=1e-9)  # relative loss gain
