"""analysis.run_health through `recscale analyze`: an unhealthy run is left out of the headline mean and the
paired comparison (values checked against pandas on the healthy runs), listed with its reason, counted in the
headline table; a setting with no healthy run is used and marked; --strict fails; a runs.parquet without
recorded statuses is used unchecked, with a warning that says so; a run that recorded still_falling unchecked
is counted with the reason it recorded."""
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


def test_a_runs_table_without_recorded_health_is_used_unchecked_and_warned_about(tmp_path):
    """No status is made up from the columns: a collapsed-looking run stays in, and the warning says why."""
    root = make_results(tmp_path / "old", analysis=ANALYSIS)
    runs = pd.read_parquet(root / "runs.parquet")
    runs.loc[runs["trial_id"] == "wukong_d64_s1_delay60", "valid_auc"] = 0.5003
    runs.to_parquet(root / "runs.parquet")
    assert main(["analyze", str(root), "--no-plots"]) == 0
    summary = json.loads((root / "analysis.json").read_text())
    health = summary["run_health"]
    assert health["unrecorded"] == len(runs) and health["excluded"] == []
    assert health["counts"]["ok"] == len(runs)
    assert any(w.startswith(f"run health not recorded for {len(runs)} of {len(runs)} run(s)")
               for w in summary["warnings"])


def test_all_healthy_sweep_analyses_as_before(tmp_path):
    """Every run ok: the same numbers as without the health columns (nothing left out)."""
    a = make_results(tmp_path / "a", analysis=ANALYSIS)
    b = make_results(tmp_path / "b", analysis=ANALYSIS)
    _mark(b)
    for root in (a, b):
        assert main(["analyze", str(root), "--no-plots"]) == 0
    sa, sb = (json.loads((r / "analysis.json").read_text()) for r in (a, b))
    assert sa["ablations"] == sb["ablations"] and sa["scaling"] == sb["scaling"]
    assert sb["run_health"]["excluded"] == [] and sb["run_health"]["unrecorded"] == 0


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


def test_a_run_that_recorded_still_falling_unchecked_is_counted_with_its_reason(tmp_path):
    root = make_results(tmp_path / "f", analysis=ANALYSIS)
    runs = _mark(root)
    runs["health_unchecked"], runs["loss_fall_curve"] = "", None
    first, second = runs["trial_id"].iloc[0], runs["trial_id"].iloc[1]
    runs.loc[runs["trial_id"] == first, ["health_unchecked", "loss_fall_curve"]] = \
        ["still_falling", "not checked: curve too short (2 training-loss points)"]
    runs.loc[runs["trial_id"] == second, "health_unchecked"] = "still_falling"
    runs.to_parquet(root / "runs.parquet")
    assert main(["analyze", str(root), "--no-plots"]) == 0
    health = json.loads((root / "analysis.json").read_text())["run_health"]
    assert health["still_falling_unchecked"] == {"curve too short (2 training-loss points)": 1, "not recorded": 1}
    assert health["unchecked"] == ["still_falling"] and health["unrecorded"] == 0
