"""`analyze(sweep folder)`: load results, fit, test, plot, and write report.md + plots/ + analysis.json atomically
(a temporary folder, then moved into place); which runs it expects and how it reports them: docs/analysis.md."""
from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import warnings
from pathlib import Path

from core import results_layout as layout
from harness import runs_columns as C
from harness.sweep.tuning import read_choice

from .collect import load_results, run_folders_absent, unreadable_runs
from .compare.delong_seeds import delong_coverage
from .compare.protocol import protocol_evidence, rank_comparison
from .compare.questions import evaluate_questions
from .fits.data_scaling import data_scaling_analysis
from .fits.family_comparison import correct_scaling_tests, family_comparisons
from .fits.reference import resolve_reference
from .fits.scaling import MIN_SEEDS, scaling_analysis
from .headline import headline
from .report.overview import tuning_warnings
from .report.plots import draw_figures
from .report.sections import render_report, summary_dict
from .result import AnalysisResult
from .run_health import annotate_headline, assess, healthy, retried_runs


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
    out += [f"{f.family} ({f.gain_label}): {len(f.fit.dropped)} per-seed point(s) left out of the power law (listed "
            "with the reason in the report)" for f in res.scaling if f.fit is not None and f.fit.dropped]
    few = {f.family: f.n_seeds for f in res.scaling if f.fit is not None and 0 < f.n_seeds < MIN_SEEDS}
    out += [f"{fam}: {n} seed(s) (< {MIN_SEEDS}): its slope interval and family comparisons rest on few replicates"
            for fam, n in few.items()]
    out += list(res.data_scaling.dropped) if res.data_scaling is not None else []
    delong = delong_coverage(res.results, [a.paired for a in res.ablations])
    return out + compare_notes + ([delong] if delong else [])


def seeds_added_warnings(root: Path) -> list[str]:
    """One warning per launch that added seeds to grid.seed after others had run (its SEEDS_ADDED_FILE record)."""
    path = root / layout.SEEDS_ADDED_FILE
    records = json.loads(path.read_text()) if path.exists() else []
    return [f"seed(s) {', '.join(map(str, r['seeds']))} were added to grid.seed after seed(s) "
            f"{', '.join(map(str, r['after']))} had run; the tests treat every seed as planned in advance. Seeds added "
            "because a question was still open make each look a test of its own, which raises the type-I error above "
            "alpha; plan such looks with `rounds:` (docs/analysis.md, *Seeds in rounds*)" for r in records]


def open_runs(root: Path, rounds_done: int) -> set[str]:
    """Trial ids of the runs of every comparison stratum still open after the first `rounds_done` rounds of the
    sequential sweep in `root`, judged as `analyze` judges them (docs/analysis.md, *Seeds in rounds*)."""
    everything = load_results(root)
    everything.runs = everything.runs[everything.runs[C.ROUND] <= rounds_done].reset_index(drop=True)
    results = healthy(everything, assess(everything.runs, everything.config_columns))
    results.config.delong = False  # no verdict reads DeLong
    strata = [s for q in evaluate_questions(results, [], [], progress=False) for s in q.strata if not s.settled]
    return {str(results.runs.at[int(i), C.TRIAL_ID]) for s in strata for i in (*s.paired.rows_a, *s.paired.rows_b)}


def analyze(root: Path | str, *, baseline: str | None = None, progress: bool = True,
            plots: bool = True, trust_edits: bool = False) -> AnalysisResult:
    """Run the whole analysis of sweep folder `root` and write its outputs there."""
    root = Path(root)
    everything = load_results(root, baseline=baseline, trust_edits=trust_edits)
    health = assess(everything.runs, everything.config_columns)
    results = healthy(everything, health)  # unhealthy runs left out of every number, each listed
    reference = resolve_reference(results.runs, results.config, results.baseline, results.config_columns)
    scaling = scaling_analysis(results, reference)
    comparisons, compare_notes = family_comparisons(scaling, results.config.scaling)
    correct_scaling_tests(scaling, comparisons)
    questions = evaluate_questions(results, scaling, comparisons, progress=progress)
    ablations = [s for q in questions for s in q.strata]
    data_scaling = data_scaling_analysis(results)  # data.n_train is then a compute axis, not a data protocol
    arm_facts, arm_pairs, protocol_notes = protocol_evidence(results, ablations) if data_scaling is None \
        else ({}, None, [])
    head = headline(results, reference)
    res = AnalysisResult(results, scaling, ablations, head, comparisons, reference, questions=questions,
                         arm_facts=arm_facts, arm_pairs=arm_pairs, health=health, data_scaling=data_scaling,
                         ranks=rank_comparison(results) if data_scaling is None else None)
    annotate_headline(head, everything.runs, everything.config_columns, health)
    res.tuning = read_choice(root)  # None for a sweep without a tuning stage
    res.retried = retried_runs(everything.runs, everything.config_columns)
    if not reference.families:
        res.notes.append(f"No family to fit: every architecture is the reference's ({reference.arch}); name "
                         "another architecture as analysis.scaling.reference to fit this one.")
    res.warnings = (health.warnings() + tuning_warnings(res.tuning) + seeds_added_warnings(root)
                    + _warnings(res, compare_notes + protocol_notes, plots=plots))
    for message in res.warnings:
        warnings.warn(message, stacklevel=2)
    tmp = Path(tempfile.mkdtemp(prefix=".analysis-", dir=root))
    try:
        if plots:
            (tmp / layout.PLOTS_DIR).mkdir()
            res.plots = draw_figures(res, tmp / layout.PLOTS_DIR)
        (tmp / layout.REPORT_FILE).write_text(render_report(res))
        (tmp / layout.ANALYSIS_FILE).write_text(json.dumps(json_safe(summary_dict(res)), indent=2, default=str))
        for name in (layout.PLOTS_DIR, layout.REPORT_FILE, layout.ANALYSIS_FILE):
            if (tmp / name).exists():
                replace_path(tmp / name, root / name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return res
