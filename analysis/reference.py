"""Committed reference studies: copy a finished sweep's shareable files into `results/reference/<sweep>/`,
and analyse the copy there (`analysis.reproduction` compares a fresh run of the sweep with it).

A reference folder holds `sweep.yaml`, `runs.parquet`, for a sweep that varies a data setting also
`datasets.json` (target sharing and history membership of its datasets) and `score_ranks_<split>.parquet`
(the score order of the runs its data comparisons compare: all DeLong's test needs), and what
`recscale analyze` writes from those (`analysis.json`, `report.md`, `plots/`): never run folders,
checkpoints or predictions, so that `recscale analyze` on a copy of the folder reproduces its
analysis.json. What the analysis would measure from run folders (the still-falling check of runs that did not
record it) is measured at publishing and written into the copy of runs.parquet. Run folders are left out on
purpose (hundreds of MB of checkpoints); other analyses that need per-target predictions (DeLong of
architecture comparisons) say so in the reference's warnings.
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pandas as pd

from core.errors import RecscaleError
from core.results_layout import DATASETS_FILE, TUNING_FILE

from .collect import RUNS_FILE, SWEEP_FILE, load_results
from .comparisons import default_comparisons, pair_runs
from .pipeline import replace_path
from .run_health import record_trends
from .score_ranks import ranks_file, write_score_ranks

#: Files copied from the sweep folder into its reference (everything else is regenerated there).
REFERENCE_INPUTS = (SWEEP_FILE, RUNS_FILE)
#: Inputs a reference holds when its sweep has them: the datasets' facts and the tuning stage's choice (every
#: tuning trial's validation metric), written by `recscale sweep`, and the score ranks of the data comparisons'
#: runs, written here (`analysis.score_ranks`).
OPTIONAL_INPUTS = (DATASETS_FILE, TUNING_FILE, ranks_file("test"), ranks_file("valid"))


def publish_reference(sweep_dir: Path | str, out: Path | str) -> Path:
    """Copy `sweep.yaml`, `runs.parquet` and `datasets.json` (when present) of `sweep_dir` into `out`
    (replaced atomically), add the score ranks of the runs that comparisons varying a data setting compare,
    and return it. The caller analyses the new folder (`analysis.pipeline.analyze(out)`).
    """
    sweep_dir, out = Path(sweep_dir), Path(out)
    for name in REFERENCE_INPUTS:
        if not (sweep_dir / name).is_file():
            raise RecscaleError(f"{sweep_dir / name}: not found; is {sweep_dir} a finished sweep folder?")
    if out.resolve() == sweep_dir.resolve():
        raise RecscaleError(f"{out}: the reference folder must differ from the sweep folder")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        for name in REFERENCE_INPUTS:
            shutil.copy2(sweep_dir / name, tmp / name)
        _record_trends(sweep_dir, tmp / RUNS_FILE)
        for name in (DATASETS_FILE, TUNING_FILE):
            if (sweep_dir / name).is_file():
                shutil.copy2(sweep_dir / name, tmp / name)
        _write_ranks(sweep_dir, tmp)
        replace_path(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _record_trends(sweep_dir: Path, runs_file: Path) -> None:
    """Write the still-falling check, measured from the sweep's run folders' curves, into the reference's copy
    of runs.parquet for the runs that did not record it (`run_health.record_trends`): the reference keeps no
    run folders, so its analysis could not measure it."""
    runs = pd.read_parquet(runs_file)
    runs, filled = record_trends(runs, lambda run_dir: sweep_dir / run_dir)
    if filled:
        runs.to_parquet(runs_file, index=False)


def _write_ranks(sweep_dir: Path, out: Path) -> None:
    """Score ranks of every run that a comparison varying a data setting pairs (nothing when none does)."""
    results = load_results(sweep_dir)
    comparisons = results.config.comparisons or default_comparisons(results)
    rows = [int(r) for c in comparisons for p in pair_runs(results, c) if p.varies_data
            for r in (*p.rows_a, *p.rows_b)]
    if rows and results.config.delong:
        write_score_ranks(results, rows, out / ranks_file(results.config.split))
