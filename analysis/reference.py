"""Committed reference studies: copy a finished sweep's shareable files into `results/reference/<sweep>/`,
analyse the copy there, and compare a fresh run of the same sweep with its reference.

A reference folder holds exactly `sweep.yaml`, `runs.parquet`, and what `recscale analyze` writes from
those two (`analysis.json`, `report.md`, `plots/`): never run folders, checkpoints or predictions, so
that `recscale analyze` on a copy of the folder reproduces its analysis.json. Run folders are left out on
purpose (hundreds of MB of checkpoints); analyses that need per-target predictions (DeLong) say so in
the reference's warnings.
"""
from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from protocols.errors import RecscaleError

from .collect import RUNS_FILE, SWEEP_FILE
from .pipeline import replace_path

#: Files copied from the sweep folder into its reference (everything else is regenerated there).
REFERENCE_INPUTS = (SWEEP_FILE, RUNS_FILE)
#: Per-run columns that must agree between a fresh sweep and its reference for it to count as reproduced.
REPRODUCED_COLUMNS = ("test_auc", "test_logloss")


def publish_reference(sweep_dir: Path | str, out: Path | str) -> Path:
    """Copy `sweep.yaml` and `runs.parquet` of `sweep_dir` into `out` (replaced atomically) and return it.

    The caller analyses the new folder (`analysis.pipeline.analyze(out)`); nothing else is copied.
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
        replace_path(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


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
