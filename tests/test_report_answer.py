"""The terminal summary of `recscale analyze` opens with the answers: each question's verdict (the delta and the
interval its Holm-corrected test uses, or "not decided at N seeds (MDE x)") and the best architecture, named only
when decided; the baseline's rows are never cut from the headline table. Expected values are computed here from
runs.parquet with pandas."""
from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd

from analysis.pipeline import analyze
from analysis.report.terminal import terminal_summary
from tests.test_analyze_cli import ANALYSIS, make_results


def test_summary_names_the_best_and_keeps_baseline_rows(tmp_path):
    root = make_results(tmp_path / "study", analysis=ANALYSIS)
    res = analyze(root, plots=False)
    text = terminal_summary(res, "r", max_rows=1).splitlines()
    runs = pd.read_parquet(root / "runs.parquet")
    means = runs.groupby(["arch", "model.dim"])["test_auc"].mean()
    arch, dim = means.idxmax()
    (best,) = [line for line in text if line.startswith("best: ")]
    assert f"(highest mean test AUC: {arch}, dim={dim}, {means.max():.4f} over 5 seed(s)" in best
    assert best.startswith("best: not decided among ")  # no question compares it with every other architecture
    assert any(line.lstrip().startswith("wukong, dim=64 ") for line in text)  # cut at 1 row, kept anyway


def test_answer_carries_the_comparison_verdict(tmp_path):
    analysis = {**ANALYSIS, "questions": [{"name": "whale vs wukong", "a": {"arch": "whale", "model.dim": 256},
                                           "b": {"arch": "wukong"}}]}
    root = make_results(tmp_path / "study", analysis=analysis)
    res = analyze(root, plots=False)
    (line,) = [x for x in terminal_summary(res, "r").splitlines() if x.lstrip().startswith("whale vs wukong")]
    (ablation,) = res.ablations
    runs = pd.read_parquet(root / "runs.parquet")
    a = runs[(runs["arch"] == "whale") & (runs["model.dim"] == 256)].set_index("seed")["test_auc"]
    b = runs[runs["arch"] == "wukong"].set_index("seed")["test_auc"]
    lo, hi = ablation.metrics["auc"].interval
    assert line.endswith(f"whale, model.dim=256 better: delta {(a - b).mean():+.5f} [{lo:+.5f}, {hi:+.5f}]")


def test_the_demo_names_no_best_it_has_not_decided(tmp_path):
    """The demo reference: the highest mean is one width of shallow_hybrid, 0.0005 above WHALE's; no comparison
    decides it against the others at 3 seeds, so the summary says so instead of naming a best."""
    ref = Path(__file__).resolve().parents[1] / "results" / "reference" / "demo"
    for name in ("sweep.yaml", "runs.parquet"):
        shutil.copy2(ref / name, tmp_path / name)
    text = terminal_summary(analyze(tmp_path, plots=False), "r")
    runs = pd.read_parquet(tmp_path / "runs.parquet")
    arch, dim = runs.groupby(["arch", "model.dim"])["test_auc"].mean().idxmax()
    assert f"\nbest: not decided among {arch}, " in text and f"(highest mean test AUC: {arch}, dim={dim}, " in text
