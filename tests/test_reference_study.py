"""Reference studies: publishing copies only the shareable inputs, and the reproduction check measures
per-trial differences against an independent element-wise comparison."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.reference import compare_with_reference, publish_reference
from cli.main import main
from core.errors import RecscaleError


def _runs(folder, aucs, losses, trials=None):
    folder.mkdir(parents=True, exist_ok=True)
    trials = trials or [f"t{i}" for i in range(len(aucs))]
    pd.DataFrame({"trial_id": trials, "run_dir": [f"runs/{t}" for t in trials], "arch": "whale",
                  "seed": range(len(aucs)), "test_auc": aucs,
                  "test_logloss": losses}).to_parquet(folder / "runs.parquet")
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
    assert same.exact and same.matched == 6 and same.verdict == "bit-exact"
    bumped = auc.copy()
    bumped[3] += 2.5e-4
    _runs(tmp_path / "off", bumped, loss)
    off = compare_with_reference(tmp_path / "off", tmp_path / "ref")
    assert not off.exact
    assert off.metrics["test_auc"].largest == pytest.approx(float(np.max(np.abs(bumped - auc))))
    assert off.metrics["test_auc"].worst_trial == "t3" and off.metrics["test_logloss"].largest == 0.0
    # one setting (whale) with six seeds: tolerance half their SD, far above 2.5e-4
    assert off.metrics["test_auc"].worst_setting_sd == pytest.approx(float(np.std(auc, ddof=1)), rel=1e-12)
    assert off.verdict == "within tolerance"
    assert main(["reference", "check", str(tmp_path / "same"), str(tmp_path / "ref")]) == 0
    assert main(["reference", "check", str(tmp_path / "off"), str(tmp_path / "ref")]) == 0
    assert main(["reference", "check", str(tmp_path / "off"), str(tmp_path / "ref"), "--exact"]) == 1
    assert main(["reference", "check", str(tmp_path / "off"), str(tmp_path / "ref"), "--tolerance", "1e-4"]) == 1
    assert main(["reference", "check", str(tmp_path / "off"), str(tmp_path / "ref"), "--tolerance", "1e-3"]) == 0


def _settings(folder, aucs, fingerprint=None):
    """Three architectures x three seeds (trials a0..a2, b0..b2, c0..c2), with optional env_* columns."""
    folder.mkdir(parents=True, exist_ok=True)
    trials = [f"{a}{s}" for a in "abc" for s in range(3)]
    table = pd.DataFrame({"trial_id": trials, "arch": [t[0] for t in trials], "seed": [int(t[1]) for t in trials],
                          "test_auc": aucs, "test_logloss": 0.5})
    for k, v in (fingerprint or {}).items():
        table[k] = v
    table.to_parquet(folder / "runs.parquet")


#: Setting a spreads by 0.01 across seeds, b by 0.001, c by 0.002 (the median setting SD).
REF = np.array([0.70, 0.71, 0.72, 0.700, 0.701, 0.702, 0.600, 0.602, 0.604])
SDS = np.repeat([0.01, 0.001, 0.002], 3)


def test_tolerance_is_twice_the_seed_sd_of_each_trials_setting_floored_at_the_median(tmp_path, capsys):
    """A difference of 0.01 is within a's tolerance (2 x 0.01) and beyond b's (2 x 0.002: b's own SD, 0.001,
    is below the median setting SD, 0.002); the printout names the trial, the metric and both machines'
    differing fingerprint entries."""
    _settings(tmp_path / "ref", REF, {"env_cpu_flags": "avx,avx2,fma,avx512f", "env_torch": "2.13.0"})
    moved_a = REF.copy()
    moved_a[1] += 0.01
    _settings(tmp_path / "fresh_a", moved_a, {"env_cpu_flags": "avx,avx2,fma", "env_torch": "2.13.0"})
    check = compare_with_reference(tmp_path / "fresh_a", tmp_path / "ref")
    assert check.verdict == "within tolerance"
    assert check.metrics["test_auc"].worst_tolerance == pytest.approx(2 * np.std(REF[:3], ddof=1))
    assert check.metrics["test_auc"].floor_sd == pytest.approx(np.std(REF[6:], ddof=1))
    assert check.metrics["test_auc"].shift_p is None  # one trial differs: too few for the shift test
    assert check.fingerprint_differences == [("cpu_flags", "avx,avx2,fma", "avx,avx2,fma,avx512f")]
    moved_b = REF.copy()
    moved_b[4] += 0.01
    _settings(tmp_path / "fresh_b", moved_b)
    check = compare_with_reference(tmp_path / "fresh_b", tmp_path / "ref")
    assert check.verdict == "NOT reproduced"
    assert [(t, round(d, 6), round(tol, 6)) for t, d, tol in check.metrics["test_auc"].beyond] == [("b1", 0.01, 0.004)]
    assert main(["reference", "check", str(tmp_path / "fresh_b"), str(tmp_path / "ref")]) == 1
    out = capsys.readouterr().out
    assert "beyond tolerance: b1 test_auc differs by 0.01" in out and out.strip().endswith("NOT reproduced")
    assert "cpu_flags: (not recorded) vs avx,avx2,fma,avx512f" in out


def test_a_systematic_shift_within_each_trials_tolerance_is_not_reproduced(tmp_path):
    """Every trial moved up by 0.3 to 0.7 of its (floored) setting SD: each is within its own tolerance,
    but all move one way; the one-sample t-test of the standardised differences (recomputed here with
    scipy) finds it, while the same sizes with alternating signs pass."""
    from scipy import stats

    used = np.maximum(SDS, 0.002)
    steps = np.array([0.3, 0.5, 0.7, 0.4, 0.6, 0.35, 0.45, 0.55, 0.5])
    _settings(tmp_path / "ref", REF)
    _settings(tmp_path / "up", REF + steps * used)
    check = compare_with_reference(tmp_path / "up", tmp_path / "ref")
    assert not check.metrics["test_auc"].beyond and check.verdict == "NOT reproduced"
    assert check.metrics["test_auc"].shift_p == pytest.approx(stats.ttest_1samp(steps, 0.0).pvalue, rel=1e-6)
    signs = np.array([1, -1, 1, -1, 1, -1, 1, -1, -1])
    _settings(tmp_path / "both_ways", REF + signs * steps * used)
    assert compare_with_reference(tmp_path / "both_ways", tmp_path / "ref").verdict == "within tolerance"


def test_check_reports_missing_trials(tmp_path):
    _runs(tmp_path / "ref", [0.7, 0.71, 0.72], [0.5, 0.5, 0.5])
    _runs(tmp_path / "fresh", [0.7, 0.71], [0.5, 0.5])
    check = compare_with_reference(tmp_path / "fresh", tmp_path / "ref")
    assert check.missing == ["t2"] and not check.exact and check.verdict == "NOT reproduced"


def test_publish_over_an_existing_reference_shows_the_change_and_needs_force(tmp_path, capsys):
    sweep, out = tmp_path / "results" / "x", tmp_path / "reference" / "x"
    _runs(sweep, [0.7, 0.71], [0.5, 0.49])
    publish_reference(sweep, out)
    before = (out / "runs.parquet").read_bytes()
    _runs(sweep, [0.7, 0.73], [0.5, 0.49])
    assert main(["reference", "publish", str(sweep), "--out", str(out), "--no-plots"]) == 2
    captured = capsys.readouterr()
    assert "test_auc: largest |fresh - reference| = 0.02 (t1" in captured.out
    assert "pass --force" in captured.err
    assert (out / "runs.parquet").read_bytes() == before
    assert main(["reference", "publish", str(sweep), "--out", str(out), "--no-plots", "--force"]) == 0
    assert pd.read_parquet(out / "runs.parquet")["test_auc"].tolist() == [0.7, 0.73]
