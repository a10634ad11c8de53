"""Reference studies: publishing copies only the shareable inputs, and the reproduction check measures
per-trial differences against an independent element-wise comparison."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.reference import compare_with_reference, publish_reference
from harness.cli import main
from protocols.errors import RecscaleError


def _runs(folder, aucs, losses, trials=None):
    folder.mkdir(parents=True, exist_ok=True)
    trials = trials or [f"t{i}" for i in range(len(aucs))]
    pd.DataFrame({"trial_id": trials, "run_dir": [f"runs/{t}" for t in trials], "arch": "whale",
                  "seed": range(len(aucs)), "test_auc": aucs, "test_logloss": losses}).to_parquet(folder / "runs.parquet")
    (folder / "sweep.yaml").write_text("name: x\n")


def test_publish_copies_only_sweep_and_runs(tmp_path):
    sweep = tmp_path / "results" / "x"
    _runs(sweep, [0.7, 0.71], [0.5, 0.49])
    (sweep / "runs" / "t0").mkdir(parents=True)
    (sweep / "runs" / "t0" / "checkpoint.pt").write_bytes(b"0" * 16)
    (sweep / "report.md").write_text("stale")
    out = publish_reference(sweep, tmp_path / "reference" / "x")
    assert sorted(p.name for p in out.iterdir()) == ["runs.parquet", "sweep.yaml"]
    pd.testing.assert_frame_equal(pd.read_parquet(out / "runs.parquet"), pd.read_parquet(sweep / "runs.parquet"))
    # publishing again replaces the folder whole (stale outputs never survive)
    (out / "report.md").write_text("old analysis")
    publish_reference(sweep, out)
    assert not (out / "report.md").exists()
    assert not list(out.parent.glob(".x*")), "no temporary folder left behind"


def test_publish_refuses_a_folder_without_runs(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(RecscaleError, match="runs.parquet|sweep.yaml"):
        publish_reference(tmp_path / "empty", tmp_path / "ref")
    assert not (tmp_path / "ref").exists()


def test_check_measures_the_largest_difference(tmp_path):
    rng = np.random.default_rng(0)
    auc = rng.uniform(0.6, 0.8, 6)
    loss = rng.uniform(0.4, 0.5, 6)
    _runs(tmp_path / "ref", auc, loss)
    _runs(tmp_path / "same", auc.copy(), loss.copy())
    same = compare_with_reference(tmp_path / "same", tmp_path / "ref")
    assert same.exact and same.matched == 6
    bumped = auc.copy()
    bumped[3] += 2.5e-4
    _runs(tmp_path / "off", bumped, loss)
    off = compare_with_reference(tmp_path / "off", tmp_path / "ref")
    assert not off.exact
    assert off.max_abs_diff["test_auc"] == pytest.approx(float(np.max(np.abs(bumped - auc))))
    assert off.worst_trial["test_auc"] == "t3" and off.max_abs_diff["test_logloss"] == 0.0
    assert main(["reference", "check", str(tmp_path / "same"), str(tmp_path / "ref")]) == 0
    assert main(["reference", "check", str(tmp_path / "off"), str(tmp_path / "ref")]) == 1
    assert main(["reference", "check", str(tmp_path / "off"), str(tmp_path / "ref"), "--tolerance", "1e-3"]) == 0


def test_check_reports_missing_trials(tmp_path):
    _runs(tmp_path / "ref", [0.7, 0.71, 0.72], [0.5, 0.5, 0.5])
    _runs(tmp_path / "fresh", [0.7, 0.71], [0.5, 0.5])
    check = compare_with_reference(tmp_path / "fresh", tmp_path / "ref")
    assert check.missing == ["t2"] and not check.exact
