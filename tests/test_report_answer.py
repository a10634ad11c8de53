"""The terminal summary of `recscale analyze` ends with its answer: the best architecture, and its gain over
the baseline with the Holm-corrected verdict of the comparison that pairs them; the baseline's rows are
never cut from the headline table. Expected values are computed here from runs.parquet with pandas."""
from __future__ import annotations

import pandas as pd

from analysis.pipeline import analyze
from analysis.report.terminal import terminal_summary
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
    assert text[-2] == (f"answer: the best architecture is {arch}, dim={dim} "
                        f"(test AUC {rivals.max():.4f} over 5 seed(s)).")
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


def test_the_gain_is_that_of_the_best_setting_not_of_another_width(tmp_path):
    """The demo reference: the best row is one width of its architecture; the answer quotes the comparison at
    that width (paired per seed with the baseline at the same width, recomputed here), even where another
    width of the same architecture gains more over its own baseline row."""
    import shutil
    from pathlib import Path

    ref = Path(__file__).resolve().parents[1] / "results" / "reference" / "demo"
    for name in ("sweep.yaml", "runs.parquet"):
        shutil.copy2(ref / name, tmp_path / name)
    last = terminal_summary(analyze(tmp_path, plots=False), "r").splitlines()[-2:]
    runs = pd.read_parquet(tmp_path / "runs.parquet")
    means = runs[runs["arch"] != "wukong"].groupby(["arch", "model.dim"])["test_auc"].mean()
    arch, dim = means.idxmax()
    a = runs[(runs["arch"] == arch) & (runs["model.dim"] == dim)].set_index("seed")["test_auc"]
    b = runs[(runs["arch"] == "wukong") & (runs["model.dim"] == dim)].set_index("seed")["test_auc"]
    assert f"{arch}, dim={dim}" in last[0]
    assert f"[model.dim={dim}]" in last[1] and f"{(a - b).mean():+.5f}" in last[1]
