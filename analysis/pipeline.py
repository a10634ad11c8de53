"""`analyze(sweep folder)`: load results, fit, test, plot, and write report.md + plots/ + analysis.json.

Outputs are first written to a temporary folder inside the sweep folder and then moved into place, so an
interrupted analysis leaves the previous report intact and never a half-written one.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from .ablations import ablation_analysis
from .collect import load_results
from .comparisons import select
from .plots import group_frame, plot_forest, plot_groups, plot_scaling, plot_seed_strip, plot_settings
from .report import AnalysisResult, render_report, summary_dict
from .scaling import GAIN_LABELS, scaling_analysis, size_columns

REPORT = "report.md"
PLOTS = "plots"
SUMMARY = "analysis.json"


def _group_labels(res: AnalysisResult) -> tuple[pd.DataFrame, pd.Series]:
    """Runs shown in the grouped-metric plot: per architecture (and varied non-size setting) the
    largest-compute model size, labelled by architecture and that setting."""
    results = res.results
    runs = results.runs
    family_cols = [c for c in results.config_columns if c not in size_columns(results)]
    labelled = [c for c in family_cols if c != "arch" and runs[c].nunique(dropna=False) > 1]
    label = runs["arch"].astype(str)
    for c in labelled:
        label = label + f", {c}=" + runs[c].astype(str)
    if "flops_per_target" not in runs.columns or runs["flops_per_target"].isna().all():
        return runs, label
    top = runs.groupby(family_cols, dropna=False)["flops_per_target"].transform("max")
    keep = np.isclose(runs["flops_per_target"].to_numpy(dtype=float), top.to_numpy(dtype=float))
    return runs[keep], label


def _make_plots(res: AnalysisResult, out: Path) -> None:
    cfg = res.results.config
    plots = out / PLOTS
    plots.mkdir()
    metrics = [m for m in cfg.metrics if res.results.has_metric(m)]
    made = {
        "scaling_auc": plot_scaling(res.scaling, "auc", plots / "scaling_auc.png", helix=cfg.scaling.helix_reference),
        "scaling_logloss": plot_scaling(res.scaling, "logloss", plots / "scaling_logloss.png", helix=False),
        "forest": plot_forest(res.ablations, metrics, plots / "forest.png"),
        "seed_strip": plot_seed_strip(res.ablations, metrics, plots / "seed_strip.png"),
        "settings": plot_settings(res.results, plots / "settings.png"),
    }
    runs, label = _group_labels(res)
    made["groups"] = plot_groups(group_frame(res.results, runs, label), plots / "groups.png")
    res.plots = {k: f"{PLOTS}/{p.name}" for k, p in made.items() if p is not None}


def _replace(src: Path, dst: Path) -> None:
    backup = None
    if dst.exists():
        backup = dst.with_name(f".{dst.name}.old")
        if backup.exists():
            shutil.rmtree(backup) if backup.is_dir() else backup.unlink()
        os.replace(dst, backup)
    os.replace(src, dst)
    if backup is not None:
        shutil.rmtree(backup) if backup.is_dir() else backup.unlink()


def json_safe(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
    return x


def analyze(root: Path | str, *, baseline: str | None = None, progress: bool = True, plots: bool = True) -> AnalysisResult:
    """Run the whole analysis of sweep folder `root` and write its outputs there."""
    root = Path(root)
    results = load_results(root, baseline=baseline)
    res = AnalysisResult(results, scaling_analysis(results), ablation_analysis(results, progress=progress))
    res.warnings = [f"{p.label}: {GAIN_LABELS[f.metric]} {p.gain:+.3g} <= 0 (vs {f.reference}); left out of the log fit"
                    for f in res.scaling for p in f.excluded]
    for message in res.warnings:
        warnings.warn(message, stacklevel=2)
    tmp = Path(tempfile.mkdtemp(prefix=".analysis-", dir=root))
    try:
        if plots:
            _make_plots(res, tmp)
        (tmp / REPORT).write_text(render_report(res))
        (tmp / SUMMARY).write_text(json.dumps(json_safe(summary_dict(res)), indent=2, default=str))
        for name in (PLOTS, REPORT, SUMMARY):
            if (tmp / name).exists():
                _replace(tmp / name, root / name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return res
