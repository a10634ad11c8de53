"""The report opens with the answers, then the per-architecture table (values checked against pandas/numpy on the
runs table, the oracle-gap share by hand), in the order answers -> headline -> comparisons -> fits -> family
comparisons, on disk and on stdout; a folder with only sweep.yaml and runs.parquet is analysed with DeLong's
absence named, and twice (or as a copy under another name) gives the same analysis.json."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_analyze_cli import ANALYSIS, SEEDS, make_results

from cli.main import main

ORACLE = 0.80


def _with_oracle(root: Path) -> pd.DataFrame:
    runs = pd.read_parquet(root / "runs.parquet")
    runs["oracle_test_auc"] = ORACLE
    runs.to_parquet(root / "runs.parquet")
    return runs


def test_headline_table_follows_the_answers_with_independently_computed_values(tmp_path, capsys):
    root = make_results(tmp_path / "h", analysis=ANALYSIS)
    runs = _with_oracle(root)
    assert main(["analyze", str(root), "--no-plots"]) == 0
    out = capsys.readouterr().out
    report = (root / "report.md").read_text()
    sections = ("## Answers", "## Results per architecture", "## Comparisons", "## Scaling fits")
    order = [report.index(h) for h in sections]
    assert order == sorted(order)
    lines = out.splitlines()  # stdout opens with the answers and the best line, then the table
    best = next(i for i, x in enumerate(lines) if x.startswith("best: "))
    assert lines[1].startswith("answers  (") and lines[best + 1].lstrip().startswith("architecture (setting)")
    summary = json.loads((root / "analysis.json").read_text())
    rows = {r["label"]: r for r in summary["headline"]["rows"]}
    whale = runs[(runs["arch"] == "whale") & (runs["model.dim"] == 128)]
    ref = runs[runs["arch"] == "wukong"]
    row = rows["whale, dim=128"]
    assert row["n_seeds"] == len(SEEDS)
    assert row["auc_mean"] == pytest.approx(whale["test_auc"].mean(), rel=1e-12)
    assert row["auc_sd"] == pytest.approx(np.std(whale["test_auc"].to_numpy(), ddof=1), rel=1e-9)
    assert row["logloss_sd"] == pytest.approx(np.std(whale["test_logloss"].to_numpy(), ddof=1), rel=1e-9)
    assert row["params_non_embedding"] == 128_000 and row["flops_per_target"] == pytest.approx(32e6)
    share = (whale["test_auc"].mean() - ref["test_auc"].mean()) / (ORACLE - ref["test_auc"].mean())
    assert row["share_oracle_gap"] == pytest.approx(share, rel=1e-9)
    assert rows["wukong, dim=64"]["is_reference"] and rows["wukong, dim=64"]["share_oracle_gap"] == pytest.approx(0)
    assert f"{share:.1%}" in report and "share of oracle gap closed" in report
    assert "128,000" in report


def test_results_folder_without_run_folders_names_the_missing_predictions_and_is_deterministic(tmp_path, capsys):
    root = make_results(tmp_path / "only", analysis=ANALYSIS)
    shutil.rmtree(root / "runs")  # a committed reference study: sweep.yaml and runs.parquet only
    n_compared = len(pd.read_parquet(root / "runs.parquet").query("arch != 'whale' or `model.dim` == 64"))
    assert main(["analyze", str(root), "--no-plots"]) == 0
    first = (root / "analysis.json").read_text()
    summary = json.loads(first)
    (delong,) = [w for w in summary["warnings"] if w.startswith("DeLong skipped")]
    assert f"{n_compared} of {n_compared} compared run(s) lack predictions_test.parquet" in delong
    assert "runs/" in delong
    assert "DeLong skipped" in (root / "report.md").read_text()
    assert all(d["note"] == "no prediction files" for a in summary["ablations"] for d in a["delong"])
    assert summary["ablations"][0]["metrics"]["auc"]["verdict"]  # everything else comes from runs.parquet
    assert main(["analyze", str(root), "--no-plots"]) == 0
    assert (root / "analysis.json").read_text() == first
    copy = tmp_path / "elsewhere" / "renamed"
    copy.parent.mkdir()
    shutil.copytree(root, copy)
    (copy / "analysis.json").unlink()
    assert main(["analyze", str(copy), "--no-plots"]) == 0
    assert (copy / "analysis.json").read_text() == first
    capsys.readouterr()


def test_only_a_fixed_reference_model_is_marked_as_the_reference(tmp_path, capsys):
    """A single-architecture ablation sweep (the committed helix_ablations study) has no fixed reference
    model: its default reference matches every run, and no row may be labelled as the reference."""
    src = Path(__file__).resolve().parents[1] / "results" / "reference" / "helix_ablations"
    copy = tmp_path / "helix_ablations"
    shutil.copytree(src, copy, ignore=shutil.ignore_patterns("plots", "analysis.json", "report.md"))
    assert main(["analyze", str(copy), "--no-plots"]) == 0
    capsys.readouterr()
    rows = json.loads((copy / "analysis.json").read_text())["headline"]["rows"]
    assert len(rows) == 22 and not any(r["is_reference"] for r in rows)  # 11 variants x its 2 tasks
    assert "(reference)" not in (copy / "report.md").read_text()
