"""End to end: `recscale analyze` on a hand-made sweep folder writes report.md, the PNGs and a JSON summary.

The folder is built here with known truths: WHALE's gain over Wukong follows dAUC = exp(-4.7) * MFLOPs**0.2,
WHALE beats MeanPool by 0.004 AUC (far above the 0.0003 seed noise), Shallow-hybrid equals Wukong except for
noise, and one WHALE size sits below the reference (a non-positive gain the power law must keep).
"""
from __future__ import annotations

import json
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from cli.main import main

SEEDS = [0, 1, 2, 3, 4]
N_EVENTS = 300


def _write_run(run: Path, arch: str, seed: int, auc: float, labels: np.ndarray, quality: float) -> None:
    run.mkdir(parents=True)
    rng = np.random.default_rng(zlib.crc32(f"{arch}/{seed}/{quality}".encode()))  # reproducible across runs
    logits = quality * (labels - 0.5) + rng.normal(0, 1, len(labels))
    pd.DataFrame({"event_id": np.arange(len(labels), dtype=np.int64), "label": labels.astype(np.float32),
                  "score": 1 / (1 + np.exp(-logits))}).to_parquet(run / "predictions_test.parquet")
    groups = {"video_seen": {"n": 120, "auc": auc + 0.002, "logloss": 0.46},
              "video_unseen": {"n": 180, "auc": auc - 0.001, "logloss": 0.45}}
    (run / "metrics.json").write_text(json.dumps({"arch": arch, "seed": seed, "test_auc": auc,
                                                  "groups": {"test": groups}}))


def make_results(root: Path, *, analysis: dict | None = None, delay_zero: bool = False) -> Path:
    """A sweep folder with runs.parquet, sweep.yaml and run folders (metrics.json + predictions)."""
    rng = np.random.default_rng(0)
    labels = (rng.random(N_EVENTS) < 0.3).astype(np.int64)
    seed_effect = dict(zip(SEEDS, rng.normal(0, 3e-4, len(SEEDS))))
    rows = []
    whale_dims = {16: 0.15e6, 32: 2e6, 64: 8e6, 128: 32e6, 256: 128e6}

    def add(arch: str, dim: int, flops: float, auc: float, seed: int, quality: float, delay: int = 60) -> None:
        trial = f"{arch}_d{dim}_s{seed}_delay{delay}"
        _write_run(root / "runs" / trial, arch, seed, auc, labels, quality)
        ll = 0.48 - 0.5 * (auc - 0.72)
        rows.append({"trial_id": trial, "run_dir": f"runs/{trial}", "arch": arch, "seed": seed,
                     "protocol": "exposure", "delay_s": delay, "history_len": 128, "model.dim": dim,
                     "test_auc": auc, "test_logloss": ll, "test_ne": ll / 0.53, "test_gauc": auc - 0.05,
                     "flops_per_target": flops, "params_non_embedding": dim * 1000})

    for s in SEEDS:
        base = 0.72 + seed_effect[s]
        add("wukong", 64, 0.4e6, base, s, 1.0)
        add("shallow_hybrid", 64, 36e6, base + rng.normal(0, 3e-4), s, 1.0)
        for dim, flops in whale_dims.items():
            true_gain = np.exp(-4.7) * (flops / 1e6) ** 0.2 if dim > 16 else -0.002
            add("whale", dim, flops, base + true_gain + rng.normal(0, 1e-4), s, 1.5)
        if delay_zero:  # a leaky history (no delay) looks 0.001 better
            add("whale", 64, 8e6, base + np.exp(-4.7) * 8**0.2 + 0.001 + rng.normal(0, 1e-4), s, 1.5, delay=0)
        add("whale_meanpool", 64, 7.5e6, base + np.exp(-4.7) * 8**0.2 - 0.004 + rng.normal(0, 3e-4), s, 1.2)
    root.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(root / "runs.parquet")
    sweep = {"name": root.name, "base": {"arch": "wukong"}}
    if analysis is not None:
        sweep["analysis"] = analysis
    (root / "sweep.yaml").write_text(yaml.safe_dump(sweep))
    return root


ANALYSIS = {
    "baseline": "wukong",
    "questions": [
        {"name": "WHALE vs MeanPool", "a": {"arch": "whale"}, "b": {"arch": "whale_meanpool"},
         "where": {"model.dim": 64}},
        {"name": "Shallow-hybrid vs Wukong", "a": {"arch": "shallow_hybrid"}, "b": {"arch": "wukong"}},
        {"name": "delay 0 s vs 60 s", "vary": {"delay_s": [0, 60]}, "where": {"arch": "whale"}},
    ],
    "n_resamples": 999,
}


def test_analyze_writes_report_plots_and_verdicts(tmp_path, capsys):
    root = make_results(tmp_path / "sweep", analysis=ANALYSIS, delay_zero=True)
    assert main(["analyze", str(root)]) == 0
    out = capsys.readouterr().out
    report = (root / "report.md").read_text()
    summary = json.loads((root / "analysis.json").read_text())
    pngs = sorted(p.name for p in (root / "plots").glob("*.png"))
    assert set(pngs) == {"scaling_auc.png", "scaling_logloss.png", "forms_auc.png", "forms_logloss.png",
                         "forest.png", "seed_strip.png", "groups.png", "settings.png"}
    assert all((root / "plots" / p).stat().st_size > 10_000 for p in pngs)
    for name in pngs:
        assert f"plots/{name}" in report
    assert not list(root.glob(".analysis-*")), "temporary folder left behind"

    by_name = {a["comparison"]: a for a in summary["ablations"]}
    assert by_name["WHALE vs MeanPool"]["metrics"]["auc"]["verdict"] == "decided"
    assert by_name["WHALE vs MeanPool"]["answer"].startswith("whale better: delta +")
    assert by_name["Shallow-hybrid vs Wukong"]["metrics"]["auc"]["verdict"] == "not decided"
    assert by_name["Shallow-hybrid vs Wukong"]["answer"].startswith(f"not decided at {len(SEEDS)} seeds (MDE ")
    assert by_name["delay 0 s vs 60 s"]["stratum"] == {"model.dim": 64}, "only the shared width pairs"
    assert by_name["delay 0 s vs 60 s"]["metrics"]["auc"]["verdict"] == "decided"
    assert len(by_name["WHALE vs MeanPool"]["delong"]) == len(SEEDS)
    assert all("p" in d for d in by_name["WHALE vs MeanPool"]["delong"])

    whale = next(f for f in summary["scaling"] if f["family"] == "whale, delay_s=60" and f["metric"] == "auc")
    # dim=16 is off the law with a gain <= 0: kept as a point, it pulls the slope above the law's 0.2
    assert whale["excluded_sizes"] == [] and whale["fit"]["dropped_points"] == []
    assert whale["fit"]["n_obs"] == 5 * len(SEEDS) and 0.2 < whale["fit"]["slope_ci"][0] < whale["fit"]["slope"] < 0.3
    power = next(f for f in whale["forms"]["forms"] if f["form"] == "power law of the gain")
    assert power["largest"]["label"] == "dim=256"
    assert "Runs that did not learn" not in report  # nothing else is left out of a fit
    assert "whale better: delta +" in out and "report:" in out
    assert len(out.splitlines()) <= 35


def test_defaults_without_analysis_section_compare_every_arch_to_cheapest(tmp_path, capsys):
    root = make_results(tmp_path / "plain")
    assert main(["analyze", str(root), "--json", "--no-plots"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["baseline"] == "wukong"
    names = {a["comparison"] for a in summary["ablations"]}
    assert names == {"shallow_hybrid vs wukong", "whale vs wukong", "whale_meanpool vs wukong"}
    whale_strata = [a for a in summary["ablations"] if a["comparison"] == "whale vs wukong"]
    assert [a["stratum"] for a in whale_strata] == [{"model.dim": 64}], "pairs only on the shared width"


def test_single_seed_reports_deltas_without_p_values(tmp_path, capsys):
    root = make_results(tmp_path / "one")
    runs = pd.read_parquet(root / "runs.parquet")
    runs[runs["seed"] == 0].to_parquet(root / "runs.parquet")
    assert main(["analyze", str(root), "--json", "--no-plots"]) == 0
    summary = json.loads(capsys.readouterr().out)
    auc = summary["ablations"][0]["metrics"]["auc"]
    assert auc["n"] == 1 and auc["p_t"] is None and auc["verdict"] == "not testable"
    assert "without p-values" in auc["notes"][0]


@pytest.mark.fault
def test_bad_input_is_a_clear_error_and_writes_nothing(tmp_path, capsys):
    root = make_results(tmp_path / "bad")
    runs = pd.read_parquet(root / "runs.parquet").drop(columns=["seed"])
    runs.to_parquet(root / "runs.parquet")
    assert main(["analyze", str(root)]) == 2
    err = capsys.readouterr().err
    assert "runs.parquet" in err and "'seed'" in err
    assert not (root / "report.md").exists()
    assert main(["analyze", str(tmp_path / "missing")]) == 2


def test_help_runs():
    done = subprocess.run([sys.executable, "-m", "cli", "analyze", "--help"], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0 and "RESULTS_DIR" in done.stdout and "--baseline" in done.stdout


def test_list_valued_config_columns_are_accepted(tmp_path, capsys):
    """Sweeps over list-valued settings (e.g. HELIX gather quotas) store arrays in runs.parquet."""
    root = make_results(tmp_path / "lists")
    runs = pd.read_parquet(root / "runs.parquet")
    runs["model.gather_quotas"] = [[8, 4, 4]] * len(runs)
    runs.to_parquet(root / "runs.parquet")
    assert main(["analyze", str(root), "--json", "--no-plots"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert {a["comparison"] for a in summary["ablations"]} == {
        "shallow_hybrid vs wukong", "whale vs wukong", "whale_meanpool vs wukong"}


@pytest.mark.fault
def test_missing_runs_are_each_reported_and_strict_fails(tmp_path, capsys):
    """A deleted run folder and a deleted predictions file: named on stdout, in report.md and in
    analysis.json warnings; exit 0 by default, 1 with --strict (the report is written either way)."""
    import shutil

    root = make_results(tmp_path / "sweep", analysis=ANALYSIS)
    shutil.rmtree(root / "runs" / "whale_meanpool_d64_s2_delay60")
    (root / "runs" / "wukong_d64_s1_delay60" / "predictions_test.parquet").unlink()
    assert main(["analyze", str(root), "--no-plots"]) == 0
    out = capsys.readouterr().out
    assert "2 expected run(s) could not be read" in out
    assert "runs/whale_meanpool_d64_s2_delay60 (whale_meanpool seed 2) could not be read: run folder missing" in out
    assert "runs/wukong_d64_s1_delay60 (wukong seed 1) could not be read: predictions_test.parquet missing" in out
    warnings_ = json.loads((root / "analysis.json").read_text())["warnings"]
    assert sum("could not be read" in w for w in warnings_) == 2
    assert "run folder missing" in (root / "report.md").read_text()
    assert main(["analyze", str(root), "--no-plots", "--strict"]) == 1
    assert "--strict: 2 of" in capsys.readouterr().err


@pytest.mark.fault
def test_seeds_added_after_earlier_seeds_ran_are_a_warning(tmp_path):
    """A sweep extended with seeds (its seeds_added.json, written by the launch that added them): one warning per
    extension in analysis.json and report.md; a published reference keeps the record, so its analysis warns too."""
    from analysis.reference import publish_reference

    root = make_results(tmp_path / "sweep", analysis=ANALYSIS)
    (root / "seeds_added.json").write_text(json.dumps([{"seeds": [3, 4], "after": [0, 1, 2]}]))
    assert main(["analyze", str(root), "--no-plots"]) == 0
    (warning,) = [w for w in json.loads((root / "analysis.json").read_text())["warnings"] if "grid.seed" in w]
    assert warning.startswith("seed(s) 3, 4 were added to grid.seed after seed(s) 0, 1, 2 had run")
    assert "type-I error above alpha" in warning and "`rounds:`" in warning
    assert warning in (root / "report.md").read_text()
    out = publish_reference(root, tmp_path / "reference")
    assert (out / "seeds_added.json").read_bytes() == (root / "seeds_added.json").read_bytes()


@pytest.mark.fault
def test_complete_results_pass_strict_and_reference_style_folder_keeps_one_warning(tmp_path, capsys):
    import shutil

    root = make_results(tmp_path / "sweep", analysis=ANALYSIS)
    assert main(["analyze", str(root), "--no-plots", "--strict"]) == 0
    assert "could not be read" not in capsys.readouterr().out
    shutil.rmtree(root / "runs")  # like results/reference/*: sweep.yaml and runs.parquet only
    assert main(["analyze", str(root), "--no-plots"]) == 0
    assert "could not be read" not in capsys.readouterr().out
    warnings_ = json.loads((root / "analysis.json").read_text())["warnings"]
    assert not any("could not be read" in w for w in warnings_)
    assert sum(w.startswith("DeLong skipped") for w in warnings_) == 1
    assert main(["analyze", str(root), "--no-plots", "--strict"]) == 1
    assert "no run folder exists" in capsys.readouterr().err
