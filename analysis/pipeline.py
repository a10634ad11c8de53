"""`analyze(sweep folder)`: load results, fit, test, plot, and write report.md + plots/ + analysis.json.

Every run of runs.parquet is expected: a row whose run folder, metrics.json or (when DeLong compares it)
predictions file is missing is named in `warnings` (terminal summary, report.md, analysis.json) and kept in
`AnalysisResult.unread_runs` (`recscale analyze --strict` fails on it). A folder whose run folders are all
absent (a published reference study holding only sweep.yaml and runs.parquet) gets the single DeLong
coverage warning instead, while `unread_runs` still lists every run.

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

from core import results_layout as layout
from harness import runs_columns as C

from .collect import load_results, run_folders_absent, unreadable_runs
from .columns import family_columns, labelled_columns, size_columns
from .compare.ablations import ablation_analysis, delong_coverage
from .compare.expectations import evaluate_expectations
from .compare.protocol import protocol_evidence, rank_comparison
from .fits.data_scaling import data_scaling_analysis
from .fits.family_comparison import correct_scaling_tests, family_comparisons
from .fits.reference import resolve_reference
from .fits.scaling import MIN_SEEDS, scaling_analysis
from .headline import headline
from .report.curves import plot_learning_curves
from .report.plots import (
    group_frame,
    plot_forest,
    plot_forms,
    plot_frontier,
    plot_groups,
    plot_isoflop,
    plot_scaling,
    plot_seed_strip,
    plot_settings,
)
from .report.retry import retried_runs
from .report.summary import summary_dict
from .report.tuning import load_tuning, tuning_warnings
from .report.writer import render_report
from .result import AnalysisResult
from .run_health import annotate_headline, assess, healthy


def _group_labels(res: AnalysisResult) -> tuple[pd.DataFrame, pd.Series]:
    """Runs shown in the grouped-metric plot: per architecture (and varied non-size setting) the
    largest-compute model size, labelled by architecture and that setting."""
    results = res.results
    runs = results.runs
    sizes = size_columns(runs, results.config_columns, results.config.scaling.size_by)
    family_cols = family_columns(runs, results.config_columns, sizes)
    labelled = labelled_columns(runs, family_cols)
    label = runs[C.ARCH].astype(str)
    for c in labelled:
        label = label + f", {c}=" + runs[c].astype(str)
    if C.FLOPS_PER_TARGET not in runs.columns or runs[C.FLOPS_PER_TARGET].isna().all():
        return runs, label
    top = runs.groupby(family_cols, dropna=False)[C.FLOPS_PER_TARGET].transform("max")
    keep = np.isclose(runs[C.FLOPS_PER_TARGET].to_numpy(dtype=float), top.to_numpy(dtype=float))
    return runs[keep], label


def _make_plots(res: AnalysisResult, out: Path) -> None:
    cfg = res.results.config
    plots = out / layout.PLOTS_DIR
    plots.mkdir()
    metrics = [m for m in cfg.metrics if res.results.has_metric(m)]
    made = {
        "scaling_auc": plot_scaling(res.scaling, "auc", plots / layout.plot_file("scaling_auc"),
                                    helix=cfg.scaling.helix_reference),
        "scaling_logloss": plot_scaling(res.scaling, "logloss", plots / layout.plot_file("scaling_logloss"),
                                        helix=False),
        "forms_auc": plot_forms(res.scaling, "auc", plots / layout.plot_file("forms_auc")),
        "forms_logloss": plot_forms(res.scaling, "logloss", plots / layout.plot_file("forms_logloss")),
        "forest": plot_forest(res.ablations, metrics, plots / layout.plot_file("forest")),
        "seed_strip": plot_seed_strip(res.ablations, metrics, plots / layout.plot_file("seed_strip")),
        "settings": plot_settings(res.results, plots / layout.plot_file("settings")),
        "isoflop": plot_isoflop(res.data_scaling, plots / layout.plot_file("isoflop")),
        "frontier": plot_frontier(res.data_scaling, plots / layout.plot_file("frontier")),
    }
    runs, label = _group_labels(res)
    groups = group_frame(res.results, runs, label)
    made["groups"] = plot_groups(groups, plots / layout.plot_file("groups"))
    if groups.empty:
        res.group_note = (f"No run folder with {layout.METRICS_FILE} `groups` (a results folder with only "
                          f"{layout.RUNS_FILE} has none): no grouped-metric plot.")
    if res.health is not None:  # every run, unhealthy ones dashed (analysis/report/curves.py)
        made.update(plot_learning_curves(res.results, res.health.runs, res.health.status, plots))
    res.plots = {k: f"{layout.PLOTS_DIR}/{p.name}" for k, p in made.items() if p is not None}


def replace_path(src: Path, dst: Path) -> None:
    """Move file or folder `src` onto `dst`, replacing what is there (kept aside until the move is done)."""
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


def _warnings(res: AnalysisResult, compare_notes: list[str], *, plots: bool = True) -> list[str]:
    errors = [r.paired.error for r in res.ablations if r.paired.error]
    prediction_rows = ({int(r) for a in res.ablations for r in (*a.paired.rows_a, *a.paired.rows_b)}
                       if res.results.config.delong else set())
    res.unread_runs = unreadable_runs(res.results, prediction_rows, metrics_needed=plots)
    out = errors + ([] if run_folders_absent(res.results) else list(res.unread_runs))
    out += list(res.reference.notes) if res.reference is not None else []
    out += [f"{p.label}: no seed with a usable {f.gain_label} (vs {f.reference}); left out of the power law"
            for f in res.scaling for p in f.excluded]
    for f in res.scaling:
        if f.fit is not None and f.fit.dropped:
            out.append(f"{f.family} ({f.gain_label}): {len(f.fit.dropped)} per-seed point(s) left out of the power law "
                       "(listed with the reason in the report)")
    few = {f.family: f.n_seeds for f in res.scaling if f.fit is not None and 0 < f.n_seeds < MIN_SEEDS}
    out += [f"{fam}: {n} seed(s) (< {MIN_SEEDS}): its slope interval and family comparisons rest on few replicates"
            for fam, n in few.items()]
    out += list(res.data_scaling.dropped) if res.data_scaling is not None else []
    delong = delong_coverage(res.results, res.ablations)
    return out + compare_notes + ([delong] if delong else [])


def analyze(root: Path | str, *, baseline: str | None = None, progress: bool = True,
            plots: bool = True) -> AnalysisResult:
    """Run the whole analysis of sweep folder `root` and write its outputs there."""
    root = Path(root)
    everything = load_results(root, baseline=baseline)
    health = assess(everything.runs, everything.config_columns, everything.run_path)
    results = healthy(everything, health)  # unhealthy runs left out of every number, each listed
    reference = resolve_reference(results.runs, results.config, results.baseline, results.config_columns)
    scaling = scaling_analysis(results, reference)
    comparisons, compare_notes = family_comparisons(scaling, results.config.scaling)
    correct_scaling_tests(scaling, comparisons)
    ablations = ablation_analysis(results, progress=progress)
    arm_facts, arm_pairs, protocol_notes = protocol_evidence(results, ablations)
    head = headline(results, reference)
    res = AnalysisResult(results, scaling, ablations, head, comparisons, reference,
                         arm_facts=arm_facts, arm_pairs=arm_pairs, ranks=rank_comparison(results), health=health)
    annotate_headline(head, everything.runs, everything.config_columns, health)
    res.expectations = evaluate_expectations(results)
    res.data_scaling = data_scaling_analysis(results)
    res.tuning = load_tuning(root)
    res.retried = retried_runs(everything.runs, everything.config_columns)
    if not reference.families:
        res.notes.append(f"No family to fit: every architecture is the reference's ({reference.arch}); name "
                         "another architecture as analysis.scaling.reference to fit this one.")
    res.warnings = (health.warnings() + tuning_warnings(res.tuning)
                    + _warnings(res, compare_notes + protocol_notes, plots=plots))
    for message in res.warnings:
        warnings.warn(message, stacklevel=2)
    tmp = Path(tempfile.mkdtemp(prefix=".analysis-", dir=root))
    try:
        if plots:
            _make_plots(res, tmp)
        (tmp / layout.REPORT_FILE).write_text(render_report(res))
        (tmp / layout.ANALYSIS_FILE).write_text(json.dumps(json_safe(summary_dict(res)), indent=2, default=str))
        for name in (layout.PLOTS_DIR, layout.REPORT_FILE, layout.ANALYSIS_FILE):
            if (tmp / name).exists():
                replace_path(tmp / name, root / name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return res
