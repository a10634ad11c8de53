"""Committed reference studies: copy a finished sweep's shareable files into `results/reference/<sweep>/`,
analyse the copy there, and compare a fresh run of the same sweep with its reference.

A reference folder holds `sweep.yaml`, `runs.parquet`, for a sweep that varies a data setting also
`datasets.json` (target sharing and history membership of its datasets) and `score_ranks_<split>.parquet`
(the score order of the runs its data comparisons compare: all DeLong's test needs), and what
`recscale analyze` writes from those (`analysis.json`, `report.md`, `plots/`): never run folders,
checkpoints or predictions, so that `recscale analyze` on a copy of the folder reproduces its
analysis.json. Run folders are left out on purpose (hundreds of MB of checkpoints); other analyses that
need per-target predictions (DeLong of architecture comparisons) say so in the reference's warnings.
"""
from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from protocols.errors import RecscaleError

from protocols.results_layout import DATASETS_FILE

from .collect import RUNS_FILE, SWEEP_FILE, load_results
from .comparisons import default_comparisons, pair_runs
from .pipeline import replace_path
from .score_ranks import ranks_file, write_score_ranks

#: Files copied from the sweep folder into its reference (everything else is regenerated there).
REFERENCE_INPUTS = (SWEEP_FILE, RUNS_FILE)
#: Inputs a reference holds when its sweep has them: the datasets' facts, written by `recscale sweep`, and
#: the score ranks of the data comparisons' runs, written here (`analysis.score_ranks`).
OPTIONAL_INPUTS = (DATASETS_FILE, ranks_file("test"), ranks_file("valid"))
#: Per-run columns that must agree between a fresh sweep and its reference for it to count as reproduced.
REPRODUCED_COLUMNS = ("test_auc", "test_logloss")


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
        if (sweep_dir / DATASETS_FILE).is_file():
            shutil.copy2(sweep_dir / DATASETS_FILE, tmp / DATASETS_FILE)
        _write_ranks(sweep_dir, tmp)
        replace_path(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _write_ranks(sweep_dir: Path, out: Path) -> None:
    """Score ranks of every run that a comparison varying a data setting pairs (nothing when none does)."""
    results = load_results(sweep_dir)
    comparisons = results.config.comparisons or default_comparisons(results)
    rows = [int(r) for c in comparisons for p in pair_runs(results, c) if p.varies_data
            for r in (*p.rows_a, *p.rows_b)]
    if rows and results.config.delong:
        write_score_ranks(results, rows, out / ranks_file(results.config.split))


@dataclass
class ReproductionCheck:
    """Per-trial agreement of a fresh sweep with its reference on `REPRODUCED_COLUMNS`."""

    matched: int  # trials present in both
    missing: list[str]  # reference trials the fresh sweep lacks
    extra: list[str]  # fresh trials the reference lacks
    max_abs_diff: dict[str, float]  # column -> largest |fresh - reference| over matched trials
    worst_trial: dict[str, str]

    @property
    def exact(self) -> bool:
        return not self.missing and not self.extra and all(v == 0.0 for v in self.max_abs_diff.values())


def compare_with_reference(fresh_dir: Path | str, reference_dir: Path | str) -> ReproductionCheck:
    """Match the two runs tables by `trial_id` and measure how far their test metrics differ."""
    tables = []
    for folder in (Path(fresh_dir), Path(reference_dir)):
        path = folder / RUNS_FILE
        if not path.is_file():
            raise RecscaleError(f"{path}: not found")
        table = pd.read_parquet(path)
        missing = [c for c in ("trial_id", *REPRODUCED_COLUMNS) if c not in table.columns]
        if missing:
            raise RecscaleError(f"{path}: column {missing[0]!r} missing")
        tables.append(table.set_index("trial_id"))
    fresh, ref = tables
    both = ref.index.intersection(fresh.index)
    diffs, worst = {}, {}
    for col in REPRODUCED_COLUMNS:
        d = np.abs(fresh.loc[both, col].to_numpy(dtype=np.float64) - ref.loc[both, col].to_numpy(dtype=np.float64))
        diffs[col] = float(d.max()) if len(d) else float("nan")
        worst[col] = str(both[int(np.argmax(d))]) if len(d) else ""
    return ReproductionCheck(
        matched=len(both), missing=sorted(set(ref.index) - set(fresh.index)),
        extra=sorted(set(fresh.index) - set(ref.index)), max_abs_diff=diffs, worst_trial=worst,
    )
