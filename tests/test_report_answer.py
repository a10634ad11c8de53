"""The terminal summary of `recscale analyze` ends with its answer: the best architecture, and its gain over
the baseline with the Holm-corrected verdict of the comparison that pairs them; the baseline's rows are
never cut from the headline table. Expected values are computed here from runs.parquet with pandas."""
from __future__ import annotations

import pandas as pd

from analysis.pipeline import analyze
from analysis.report import terminal_summary
from tests.test_analyze_cli import ANALYSIS, make_results


def test_summary_ends_with_the_answer_and_keeps_baseline_rows(tmp_path):
    root = make_results(tmp_path / "study", analysis=ANALYSIS)
    res = analyze(root, plots=False)
    text = terminal_summary(res, "r", max_rows=1).splitlines()
    runs = pd.read_parquet(root / "runs.parquet")
    means = runs.groupby(["arch", "model.dim"])["test_auc"].mean()
    rivals = means.drop("wukong", level="arch")
    arch, dim = rivals.idxmax()
    gain = rivals.max() - means[("wukong", 64)]
    assert text[-2] == f"answer: the best architecture is {arch}, dim={dim} (test AUC {rivals.max():.4f} over 5 seed(s))."
    assert text[-1].startswith("answer: its gain over the baseline wukong is ")
    assert f"{gain:+.5f}" in text[-1]
    assert any(line.lstrip().startswith("wukong, dim=64 ") for line in text)  # cut at 1 row, kept anyway


def test_answer_carries_the_comparison_verdict(tmp_path):
    analysis = {**ANALYSIS, "comparisons": [{"name": "whale vs wukong", "a": {"arch": "whale", "model.dim": 256},
                                             "b": {"arch": "wukong"}}]}
    root = make_results(tmp_path / "study", analysis=analysis)
    res = analyze(root, plots=False)
    last = terminal_summary(res, "r").splitlines()[-1]
    (ablation,) = [r for r in res.ablations if r.label.startswith("whale vs wukong")]
    runs = pd.read_parquet(root / "runs.parquet").set_index("trial_id")
    a = runs[(runs["arch"] == "whale") & (runs["model.dim"] == 256)].set_index("seed")["test_auc"]
    b = runs[runs["arch"] == "wukong"].set_index("seed")["test_auc"]
    assert f"{(a - b).mean():+.5f}" in last and ablation.metrics["auc"].verdict in last and "Holm-adjusted" in last
