"""Registered data sources: name -> load(root, **options) -> ExposureLog.

- `recflow`: the real RecFlow files (`protocols.recflow.read_recflow`).
- `synthetic`: a log written by `recscale synth`: the same reader plus `true_p` from
  `synthetic_truth/YYYY-MM-DD.feather` (row-aligned with each realshow file).
- `movielens100k`: MovieLens-100k mapped onto the canonical table (`protocols.movielens`).
"""
from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Iterable

import numpy as np
import pyarrow.feather as feather

from . import register_source
from .errors import DataValidationError
from .log import ExposureLog
from .recflow import read_recflow
from .recflow_format import truth_path
from .schema import TRUE_P_COLUMN


@register_source("recflow")
def load_recflow(root: Path | str, *, days: Iterable[str | dt.date] | None = None, progress: bool = False) -> ExposureLog:
    """Real RecFlow `realshow` files (validated); `days` defaults to the 37 released days."""
    return read_recflow(root, days, progress=progress)


def read_truth(log: ExposureLog) -> np.ndarray:
    """true_p of every row of `log`, from the synthetic truth side files, validated for alignment."""
    parts = []
    counts = np.bincount(log.columns["file_index"], minlength=len(log.days))
    for i, day in enumerate(log.days):
        path = truth_path(log.root, day)
        if not path.exists():
            raise DataValidationError(str(path), TRUE_P_COLUMN, "synthetic truth file missing (is this a synthetic log?)")
        try:
            p = feather.read_table(str(path), columns=[TRUE_P_COLUMN]).column(0).to_numpy().astype(np.float64)
        except Exception as e:
            raise DataValidationError(str(path), TRUE_P_COLUMN, f"unreadable: {e}") from None
        if len(p) != counts[i]:
            raise DataValidationError(str(path), TRUE_P_COLUMN, f"has {len(p)} rows but the realshow file has {counts[i]}")
        bad = np.flatnonzero(~((p >= 0) & (p <= 1)))
        if len(bad):
            raise DataValidationError(str(path), TRUE_P_COLUMN, "must be a probability", record=int(bad[0]) + 1, value=float(p[bad[0]]))
        parts.append(p)
    return np.concatenate(parts)


@register_source("synthetic")
def load_synthetic(root: Path | str, *, days: Iterable[str | dt.date] | None = None, progress: bool = False) -> ExposureLog:
    """A `recscale synth` log: the recflow reader plus `true_p`."""
    log = read_recflow(root, days, source="synthetic", progress=progress)
    log.columns[TRUE_P_COLUMN] = read_truth(log)
    return log


@register_source("movielens100k")
def load_movielens(root: Path | str, **options) -> ExposureLog:
    """MovieLens-100k folder (u.data, u.user, u.item) mapped onto the canonical table."""
    from .movielens import read_movielens

    return read_movielens(root, **options)
