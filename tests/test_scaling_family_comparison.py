"""Family comparisons on constructed cases with known answers: two exact power laws (slope difference,
iso-FLOP gains and the crossover computed by hand), and noisy seeds checked against per-seed fits (scipy's
curve_fit) and one-sample t statistics computed independently (the seed is the unit, paired across the two
families)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats
from test_scaling_fit import curve_fit_power_law

from analysis.pipeline import analyze

AUC_REF = 0.70
SEEDS = (0, 1, 2)
X_A = (1.0, 4.0, 16.0, 64.0)  # forward GFLOPs per target of family A's sizes
X_B = (2.0, 8.0, 32.0, 128.0)
A_LAW = (-5.0, 0.20)  # (intercept, slope) of ln gain against ln GFLOPs


def make_pair(root: Path, b_law: tuple[float, float], *, noise: float = 0.0, compare=None, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    rows = [{"arch": "wukong", "seed": s, "model.dim": 64, "test_auc": AUC_REF, "test_logloss": 0.5,
             "flops_per_target": 1e5} for s in SEEDS]
    for arch, xs, (a, b) in (("whale", X_A, A_LAW), ("hstu", X_B, b_law)):
        for i, x in enumerate(xs):
            for s in SEEDS:
                gain = np.exp(a + b * np.log(x) + (rng.normal(0, noise) if noise else 0.0))
                rows.append({"arch": arch, "seed": s, "model.dim": 16 * 2**i, "test_auc": AUC_REF + gain,
                             "test_logloss": 0.5 * (1 - gain), "flops_per_target": x * 1e9})
    root.mkdir(parents=True)
    pd.DataFrame(rows).to_parquet(root / "runs.parquet")
    scaling = {"reference": {"arch": "wukong"}, "x_unit": "gflops", "size_by": ["model.dim"]}
    if compare is not None:
        scaling["compare"] = compare
    (root / "sweep.yaml").write_text(yaml.safe_dump({"name": "pair", "analysis": {"scaling": scaling}}))
    return root


def _auc_comparisons(root: Path) -> list[dict]:
    analyze(root, progress=False, plots=False)
    summary = json.loads((root / "analysis.json").read_text())
    return [c for c in summary["family_comparisons"] if c["metric"] == "auc"]


def test_exact_power_laws_give_the_known_slope_difference_iso_flop_gains_and_crossover(tmp_path):
    b_law = (-4.6, 0.10)  # meets A where -5 + 0.2 l = -4.6 + 0.1 l: l = 4, x = e^4 = 54.6 GFLOPs
    (c,) = _auc_comparisons(make_pair(tmp_path / "x", b_law))
    assert (c["a"], c["b"]) == ("hstu", "whale")  # default pairs are in name order
    assert c["slope_diff"]["value"] == pytest.approx(0.10 - 0.20, abs=1e-9)
    # iso-FLOP point: geometric middle of the overlap [2, 64] = sqrt(128)
    x_star = np.sqrt(2.0 * 64.0)
    assert c["iso_x"] == pytest.approx(x_star, rel=1e-9)
    g_hstu, g_whale = np.exp(-4.6 + 0.1 * np.log(x_star)), np.exp(-5.0 + 0.2 * np.log(x_star))
    assert c["gain_a"]["value"] == pytest.approx(g_hstu, rel=1e-8)
    assert c["gain_b"]["value"] == pytest.approx(g_whale, rel=1e-8)
    assert c["diff"]["value"] == pytest.approx(g_hstu - g_whale, rel=1e-7)
    assert c["ratio"]["value"] == pytest.approx(g_hstu / g_whale, rel=1e-8)
    assert c["value_a"] == pytest.approx(AUC_REF + g_hstu, rel=1e-10)  # AUC at matched FLOPs
    assert c["crossover_x"] == pytest.approx(np.exp(4.0), rel=1e-7)
    assert "whale overtakes hstu above 54.6 GFLOPs [54.6, 54.6], inside the measured range" in c["crossover"]
    assert c["crossover_interval"]["lo"] == pytest.approx(np.exp(4.0), rel=1e-6)
    assert "paired by seed" in c["method"]


@pytest.mark.parametrize("b_intercept, words, x_cross", [
    (-4.45, "outside the measured range, within a factor 10 of it", np.exp(5.5)),  # 245 GFLOPs, range [1, 128]
    (-4.0, "no crossover in range (hstu ahead over the whole measured range)", None),  # e^10 = 22026 GFLOPs
])
def test_crossover_near_or_far_from_the_measured_range(tmp_path, b_intercept, words, x_cross):
    (c,) = _auc_comparisons(make_pair(tmp_path / "y", (b_intercept, 0.10)))
    assert words in c["crossover"]
    if x_cross is None:
        assert c["crossover_x"] is None
    else:
        assert c["crossover_x"] == pytest.approx(x_cross, rel=1e-7)


def test_noisy_seeds_match_per_seed_fits_paired_by_seed(tmp_path):
    root = make_pair(tmp_path / "n", (-4.6, 0.10), noise=0.05, seed=3, compare=[["whale", "hstu"]])
    (c,) = _auc_comparisons(root)
    assert (c["a"], c["b"]) == ("whale", "hstu")  # the configured order: A - B = whale - hstu
    runs = pd.read_parquet(root / "runs.parquet")
    lines = {}
    for arch in ("whale", "hstu"):
        for s in SEEDS:
            r = runs[(runs["arch"] == arch) & (runs["seed"] == s)]
            lines[arch, s] = curve_fit_power_law(r["flops_per_target"].to_numpy() / 1e9,
                                                 r["test_auc"].to_numpy() - AUC_REF)  # (slope, intercept)
    d = np.array([lines["whale", s][0] - lines["hstu", s][0] for s in SEEDS])
    t = stats.t.ppf(0.975, len(SEEDS) - 1)
    se = d.std(ddof=1) / np.sqrt(len(d))
    assert c["seeds"] == list(SEEDS)
    assert c["slope_diff"]["value"] == pytest.approx(d.mean(), rel=1e-6)
    assert [c["slope_diff"]["lo"], c["slope_diff"]["hi"]] == pytest.approx([d.mean() - t * se, d.mean() + t * se],
                                                                           rel=1e-6)
    assert c["slope_diff"]["p_value"] == pytest.approx(stats.ttest_1samp(d, 0.0).pvalue, rel=1e-6)
    # one comparison per metric: Holm over one test leaves p as it is
    assert c["slope_diff"]["p_holm"] == pytest.approx(c["slope_diff"]["p_value"], rel=1e-12)
    l_star = np.log(np.sqrt(2.0 * 64.0))
    la = np.array([lines["whale", s][1] + lines["whale", s][0] * l_star for s in SEEDS])
    lb = np.array([lines["hstu", s][1] + lines["hstu", s][0] * l_star for s in SEEDS])
    half = t * la.std(ddof=1) / np.sqrt(3)
    assert [c["gain_a"]["value"], c["gain_a"]["lo"], c["gain_a"]["hi"]] == pytest.approx(
        np.exp([la.mean(), la.mean() - half, la.mean() + half]), rel=1e-6)
    diff = np.exp(la) - np.exp(lb)
    half = t * diff.std(ddof=1) / np.sqrt(3)
    assert [c["diff"]["lo"], c["diff"]["hi"]] == pytest.approx([diff.mean() - half, diff.mean() + half], rel=1e-6)
    assert c["diff"]["seeds_for_80_power"] >= 2


def test_configured_pair_without_fits_is_a_named_warning(tmp_path):
    root = make_pair(tmp_path / "w", (-4.6, 0.10), compare=[["whale", "helix"]])
    res = analyze(root, progress=False, plots=False)
    assert res.comparisons == []
    assert any("analysis.scaling.compare [whale, helix]" in w for w in res.warnings)
    assert "analysis.scaling.compare [whale, helix]" in (root / "report.md").read_text()
