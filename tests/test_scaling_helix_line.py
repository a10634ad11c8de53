"""HELIX's CTR line through the public entry point: a runs table whose points lie exactly on
ln(dAUC) = 0.085 ln C - 4.733 (C = training GFLOPs per sample) gives 0.085 / -4.733 back in HELIX's
convention, and the hand-computed intercepts in the others, with the report saying why it does not compare."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from analysis.pipeline import analyze
from cli.main import main

SLOPE, INTERCEPT = 0.085, -4.733
C_TRAIN_GFLOPS = {"S": 1.3, "M": 5.0, "L": 35.28, "XL": 120.0}  # training GFLOPs per sample
AUC_REF = 0.70
SEEDS = (0, 1, 2)


def make_helix_line(root: Path, scaling: dict) -> Path:
    """HELIX sizes on the line, against an external reference (Wukong) with a fixed AUC."""
    rows = []
    for seed in SEEDS:
        rows.append({"arch": "wukong", "seed": seed, "model.dim": 64, "test_auc": AUC_REF, "test_logloss": 0.5,
                     "flops_per_target": 4e5})
        for size, c in C_TRAIN_GFLOPS.items():
            gain = np.exp(INTERCEPT + SLOPE * np.log(c))
            rows.append({"arch": "helix", "seed": seed, "model.size": size, "test_auc": AUC_REF + gain,
                         "test_logloss": 0.5 - gain, "flops_per_target": c * 1e9 / 3.0})  # forward = training / 3
    root.mkdir(parents=True)
    pd.DataFrame(rows).to_parquet(root / "runs.parquet")
    (root / "sweep.yaml").write_text(yaml.safe_dump({"name": "helix_line", "analysis": {
        "baseline": "wukong", "scaling": {"reference": {"arch": "wukong", "model.dim": 64}, **scaling}}}))
    return root


def _auc_fit(res):
    (fam,) = [f for f in res.scaling if f.metric == "auc"]
    return fam


def test_points_on_the_helix_line_give_its_slope_and_intercept_back(tmp_path):
    root = make_helix_line(tmp_path / "s", {"x_axis": "training", "x_unit": "gflops", "gain": "absolute"})
    res = analyze(root, progress=False, plots=False)
    fam = _auc_fit(res)
    assert fam.family == "helix" and fam.fit.n_points == 4 and fam.fit.n_obs == 12
    assert fam.fit.slope == pytest.approx(SLOPE, abs=1e-6)
    assert fam.fit.intercept == pytest.approx(INTERCEPT, abs=1e-6)
    assert fam.helix.comparable and fam.helix.inside_ci
    summary = json.loads((root / "analysis.json").read_text())
    auc = next(f for f in summary["scaling"] if f["metric"] == "auc")
    assert (auc["x_axis"], auc["x_unit"], auc["fit"]["x_axis"], auc["fit"]["x_unit"]) == (
        "training", "gflops", "training", "gflops")
    report = (root / "report.md").read_text()
    assert "training FLOPs per sample (3 x forward), GFLOPs" in report
    assert "HELIX CTR slope 0.085 is inside" in report


def test_cli_json_round_trip(tmp_path, capsys):
    root = make_helix_line(tmp_path / "cli", {"x_axis": "training", "x_unit": "gflops"})
    assert main(["analyze", str(root), "--json", "--no-plots"]) == 0
    summary = json.loads(capsys.readouterr().out)
    fit = next(f for f in summary["scaling"] if f["metric"] == "auc")["fit"]
    assert fit["slope"] == pytest.approx(SLOPE, abs=1e-6) and fit["intercept"] == pytest.approx(INTERCEPT, abs=1e-6)


@pytest.mark.parametrize("x_axis, x_unit, gain", [("forward", "flops", "absolute"), ("forward", "gflops", "absolute"),
                                                  ("training", "flops", "absolute"),
                                                  ("training", "gflops", "relative")])
def test_other_conventions_move_the_intercept_by_hand_computed_amounts_and_are_not_compared(
        tmp_path, x_axis, x_unit, gain):
    root = make_helix_line(tmp_path / "c", {"x_axis": x_axis, "x_unit": x_unit, "gain": gain})
    res = analyze(root, progress=False, plots=False)
    fam = _auc_fit(res)
    # ln g = INTERCEPT + SLOPE ln C with C = x * (training / x-axis multiplier) * unit / 1e9
    to_train_gflops = (3.0 if x_axis == "forward" else 1.0) * (1e-9 if x_unit == "flops" else 1.0)
    expected = INTERCEPT + SLOPE * np.log(to_train_gflops) - (np.log(AUC_REF) if gain == "relative" else 0.0)
    assert fam.fit.slope == pytest.approx(SLOPE, abs=1e-6)
    assert fam.fit.intercept == pytest.approx(expected, abs=1e-6)
    assert not fam.helix.comparable
    report = (root / "report.md").read_text()
    assert "not compared with HELIX's CTR line" in report
    if x_axis == "forward":
        assert "this fit's x is forward FLOPs" in report
    if gain == "relative":
        assert "dAUC / AUC_ref" in report and "this fit's is relative" in report


def test_helix_line_is_drawn_only_in_its_convention(tmp_path):
    root = make_helix_line(tmp_path / "p", {"x_axis": "training", "x_unit": "gflops"})
    res = analyze(root, progress=False, plots=True)
    assert "scaling_auc" in res.plots and (root / res.plots["scaling_auc"]).stat().st_size > 10_000
