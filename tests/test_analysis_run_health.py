"""analysis.run_health through `recscale analyze`: an unhealthy run is left out of the headline mean and the
paired comparison (values checked against pandas on the healthy runs), listed with its reason, counted in the
headline table; a setting with no healthy run is used and marked; --strict fails; a runs.parquet without
recorded statuses gets them derived from its columns, naming what could not be checked."""
from __future__ import annotations

import json

import pandas as pd
import pytest
from test_analyze_cli import ANALYSIS, SEEDS, make_results

from cli.main import main


def _mark(root, **where_status):
    runs = pd.read_parquet(root / "runs.parquet")
    runs["health_status"], runs["health_reasons"], runs["health_unchecked"] = "ok", "", ""
    for trial, (status, reason) in where_status.items():
        runs.loc[runs["trial_id"] == trial, ["health_status", "health_reasons"]] = [status, reason]
    runs.to_parquet(root / "runs.parquet")
    return runs


def test_unhealthy_runs_are_left_out_listed_counted_and_fail_strict(tmp_path, capsys):
    root = make_results(tmp_path / "h", analysis=ANALYSIS)
    runs = _mark(root, whale_d64_s0_delay60=("collapsed", "auc_noise: valid AUC 0.5001"),
                 **{f"shallow_hybrid_d64_s{s}_delay60": ("undertrained", "ne_threshold: valid NE 1.01") for s in SEEDS})
    assert main(["analyze", str(root), "--no-plots"]) == 0
    summary = json.loads((root / "analysis.json").read_text())
    rows = {r["label"]: r for r in summary["headline"]["rows"]}
    whale = runs[(runs["arch"] == "whale") & (runs["model.dim"] == 64) & (runs["seed"] != 0)]
    assert rows["whale, dim=64"]["n_seeds"] == len(SEEDS) - 1
    assert rows["whale, dim=64"]["auc_mean"] == pytest.approx(whale["test_auc"].mean(), rel=1e-12)
    assert rows["whale, dim=64"]["health"] == f"{len(SEEDS) - 1} ok, 1 collapsed"
    # every run of shallow_hybrid is unhealthy: used (not silently dropped), counted and marked
    assert rows["shallow_hybrid, dim=64"]["n_seeds"] == len(SEEDS)
    assert rows["shallow_hybrid, dim=64"]["health"] == f"{len(SEEDS)} undertrained"
    # the paired comparison at dim 64 loses seed 0
    meanpool = [a for a in summary["ablations"] if a["comparison"] == "WHALE vs MeanPool"][0]
    assert meanpool["seeds"] == SEEDS[1:]
    health = summary["run_health"]
    assert health["counts"] == {"ok": len(runs) - 1 - len(SEEDS), "diverged": 0, "collapsed": 1,
                                "undertrained": len(SEEDS)}
    kept = {e["trial"]: e["kept"] for e in health["excluded"]}
    assert kept == {"whale_d64_s0_delay60": False, **{f"shallow_hybrid_d64_s{s}_delay60": True for s in SEEDS}}
    report = (root / "report.md").read_text()
    assert "## Run health" in report
    assert "| whale_d64_s0_delay60 | collapsed | auc_noise: valid AUC 0.5001 | left out |" in report
    assert any("whale_d64_s0_delay60: collapsed" in w for w in summary["warnings"])
    capsys.readouterr()
    assert main(["analyze", str(root), "--no-plots", "--strict"]) == 1
    assert f"--strict: {1 + len(SEEDS)} of {len(runs)} run(s) are not healthy" in capsys.readouterr().err


def test_old_runs_table_gets_health_derived_from_its_columns(tmp_path):
    root = make_results(tmp_path / "old", analysis=ANALYSIS)
    runs = pd.read_parquet(root / "runs.parquet")
    runs["valid_n"], runs["valid_positives"] = 10_000, 3_000
    runs["valid_auc"], runs["valid_ne"], runs["train_loss"] = 0.7, 0.9, 0.5
    runs.loc[runs["trial_id"] == "wukong_d64_s1_delay60", "valid_auc"] = 0.5003  # within 2 SE (0.0063) of 0.5
    runs.to_parquet(root / "runs.parquet")
    assert main(["analyze", str(root), "--no-plots"]) == 0
    summary = json.loads((root / "analysis.json").read_text())
    health = summary["run_health"]
    assert health["derived_rows"] == len(runs)
    assert health["unchecked"] == ["nonfinite_weights", "constant_predictions", "still_falling"]
    assert [(e["trial"], e["status"], e["derived"]) for e in health["excluded"]] == \
        [("wukong_d64_s1_delay60", "collapsed", True)]
    report = (root / "report.md").read_text()
    assert "derived from runs.parquet's columns" in report and "constant_predictions" in report


def test_all_healthy_sweep_analyses_as_before(tmp_path):
    """Every run ok: the same numbers as without the health columns (nothing left out)."""
    a = make_results(tmp_path / "a", analysis=ANALYSIS)
    b = make_results(tmp_path / "b", analysis=ANALYSIS)
    _mark(b)
    for root in (a, b):
        assert main(["analyze", str(root), "--no-plots"]) == 0
    sa, sb = (json.loads((r / "analysis.json").read_text()) for r in (a, b))
    assert sa["ablations"] == sb["ablations"] and sa["scaling"] == sb["scaling"]
    assert sb["run_health"]["excluded"] == [] and sb["run_health"]["derived_rows"] == 0


def test_an_undertrained_seed_is_kept_and_marked_where_a_collapsed_one_is_left_out(tmp_path):
    """In one setting, one seed undertrained: it stays in the mean (leaving out the seed that learned least
    would bias the setting upwards), marked; in another, one seed collapsed: it is left out. Means checked
    against pandas on the runs each policy keeps."""
    root = make_results(tmp_path / "u", analysis=ANALYSIS)
    runs = _mark(root, whale_d64_s1_delay60=("undertrained", "ne_threshold: valid NE 0.995"),
                 wukong_d64_s2_delay60=("collapsed", "auc_noise: valid AUC 0.5001"))
    assert main(["analyze", str(root), "--no-plots"]) == 0
    summary = json.loads((root / "analysis.json").read_text())
    rows = {r["label"]: r for r in summary["headline"]["rows"]}
    whale = runs[(runs["arch"] == "whale") & (runs["model.dim"] == 64)]
    wukong = runs[(runs["arch"] == "wukong") & (runs["model.dim"] == 64) & (runs["seed"] != 2)]
    assert rows["whale, dim=64"]["n_seeds"] == len(SEEDS)
    assert rows["whale, dim=64"]["auc_mean"] == pytest.approx(whale["test_auc"].mean(), rel=1e-12)
    assert rows["wukong, dim=64"]["auc_mean"] == pytest.approx(wukong["test_auc"].mean(), rel=1e-12)
    kept = {e["trial"]: e["kept"] for e in summary["run_health"]["excluded"]}
    assert kept == {"whale_d64_s1_delay60": True, "wukong_d64_s2_delay60": False}
    report = (root / "report.md").read_text()
    assert "| whale_d64_s1_delay60 | undertrained | ne_threshold: valid NE 0.995 | **used: undertrained runs" in report


def _write_curve(run_dir, values, every=10):
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(log_dir=str(run_dir / "curves"))
    for i, v in enumerate(values, start=1):
        w.add_scalar("train/loss", float(v), i * every)
    w.close()


def test_still_falling_is_checked_from_the_run_folders_curves_where_there_are_some(tmp_path, capsys):
    """Runs that recorded still_falling unchecked: checked by the analysis from their run folder's event files
    (one falling 5 % per tenth of the run: undertrained; one flat: ok); the rest named unchecked, no curve."""
    import numpy as np

    root = make_results(tmp_path / "f", analysis=ANALYSIS)
    runs = _mark(root)
    runs["health_unchecked"], runs["epochs_run"], runs["train_steps"] = "still_falling", 1, 300
    runs.to_parquet(root / "runs.parquet")
    steps = np.arange(10, 301, 10)
    _write_curve(root / "runs" / "whale_d64_s1_delay60", 0.8 - 1e-3 * steps)  # 0.03 per 30 steps, level 0.5
    _write_curve(root / "runs" / "wukong_d64_s1_delay60", np.full(len(steps), 0.6))
    assert main(["analyze", str(root), "--no-plots"]) == 0
    health = json.loads((root / "analysis.json").read_text())["run_health"]
    assert health["still_falling_checked_here"] == 2
    assert health["still_falling_unchecked"] == {"no curve": len(runs) - 2}
    assert [(e["trial"], e["status"], e["kept"]) for e in health["excluded"]] == \
        [("whale_d64_s1_delay60", "undertrained", True)]
    fall = 1e-3 * 30 / 0.5  # closed form of the straight line: 6 % per tenth of the run
    assert f"train/loss falling {fall:.1%} per tenth of the run over steps 210-300" in health["excluded"][0]["reasons"]
    report = (root / "report.md").read_text()
    assert f"not checked for {len(runs) - 2} of {len(runs)} run(s): no curve: {len(runs) - 2}" in report
    assert "checked by the analysis from the learning curves of 2 run(s)" in report
    capsys.readouterr()
    assert main(["analyze", str(root), "--no-plots", "--strict"]) == 1


def test_a_run_without_its_folder_is_not_checked_for_still_falling(tmp_path):
    from analysis.run_health import curve_trend

    assert curve_trend({"run_dir": "runs/gone"}, lambda d: tmp_path / d) == "no curve (no run folder)"
    assert curve_trend({}, None) == "no curve (no run folder)"


def test_publishing_writes_the_curve_check_into_the_references_runs_table(tmp_path):
    """A reference keeps no run folders: `reference publish` measures still_falling from the sweep's curves and
    writes it into the copy of runs.parquet, so analysing the reference (no run folders) gives the same verdicts
    as analysing the sweep folder; the closed-form fall of the straight line is recorded."""
    import numpy as np

    root = make_results(tmp_path / "p", analysis=ANALYSIS)
    runs = _mark(root)
    runs["health_unchecked"], runs["epochs_run"], runs["train_steps"] = "still_falling", 1, 300
    runs.to_parquet(root / "runs.parquet")
    steps = np.arange(10, 301, 10)
    _write_curve(root / "runs" / "whale_d64_s1_delay60", 0.8 - 1e-3 * steps)
    _write_curve(root / "runs" / "wukong_d64_s1_delay60", np.full(len(steps), 0.6))
    assert main(["analyze", str(root), "--no-plots"]) == 0
    in_sweep = json.loads((root / "analysis.json").read_text())["run_health"]
    ref = tmp_path / "ref"
    assert main(["reference", "publish", str(root), "--out", str(ref), "--no-plots"]) == 0
    published = pd.read_parquet(ref / "runs.parquet").set_index("trial_id")
    assert published.loc["whale_d64_s1_delay60", "health_status"] == "undertrained"
    assert published.loc["whale_d64_s1_delay60", "loss_fall"] == pytest.approx(1e-3 * 30 / 0.5, rel=1e-6)
    assert published.loc["wukong_d64_s1_delay60", "health_status"] == "ok"
    assert published.loc["wukong_d64_s1_delay60", "health_unchecked"] == ""
    assert published.loc["whale_d64_s0_delay60", "health_unchecked"] == "still_falling"  # no curve: left as is
    in_ref = json.loads((ref / "analysis.json").read_text())["run_health"]
    assert [(e["trial"], e["status"]) for e in in_ref["excluded"]] == \
        [(e["trial"], e["status"]) for e in in_sweep["excluded"]]
    # the same runs stay unchecked (in the sweep their folders hold no curve; the reference has no folders)
    assert sum(in_ref["still_falling_unchecked"].values()) == sum(in_sweep["still_falling_unchecked"].values())
