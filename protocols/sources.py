"""Registered data sources (`recflow`, `synthetic`, `movielens100k`): name -> load(root, **options) ->
ExposureLog, each registered with its default split and target counts (`SourceDefaults`). What each reads:
docs/data.md; their defaults: docs/protocols.md, "Sources declare their defaults".
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pyarrow.feather as feather

import protocols

from . import SourceDefaults, register_source
from .errors import DataValidationError, check_rows
from .log import ExposureLog
from .movielens import read_movielens
from .recflow import read_recflow, truth_path
from .schema import TRUE_P_COLUMN
from .split import SplitConfig, tail_split

RECFLOW_DEFAULTS = SourceDefaults(
    split=lambda log: SplitConfig(), sizes="scaled",
    split_doc="the RecFlow seed's dates 2024-01-13 / 2024-02-08 / 2024-02-12 / 2024-02-19 (Asia/Shanghai)")

#: MovieLens-100k's default split: its last 21 days are test, the 21 before valid (UTC calendar days).
MOVIELENS_VALID_DAYS = 21
MOVIELENS_TEST_DAYS = 21


MOVIELENS_DEFAULTS = SourceDefaults(
    split=lambda log: tail_split(int(log["request_timestamp"].min()), int(log["request_timestamp"].max()),
                                 valid_days=MOVIELENS_VALID_DAYS, test_days=MOVIELENS_TEST_DAYS, timezone="UTC"),
    sizes="all",
    split_doc=f"from the log's dates (UTC): test = the last {MOVIELENS_TEST_DAYS} days, valid = the "
              f"{MOVIELENS_VALID_DAYS} days before, train = every earlier day")


def source_defaults(source: str) -> SourceDefaults:
    """The defaults `source` registered with (an unknown source is an error listing the registered ones)."""
    return protocols.source(source).defaults


@register_source("recflow", defaults=RECFLOW_DEFAULTS)
def load_recflow(root: Path | str, *, days: Iterable[str | dt.date] | None = None,
                 progress: bool = False) -> ExposureLog:
    """Real RecFlow `realshow` files (validated); `days` defaults to the 37 released days."""
    return read_recflow(root, days, progress=progress)


def read_truth(log: ExposureLog) -> np.ndarray:
    """true_p of every row of `log`, from the synthetic truth side files, validated for alignment."""
    parts = []
    counts = np.bincount(log.columns["file_index"], minlength=len(log.days))
    for i, day in enumerate(log.days):
        path = truth_path(log.root, day)
        if not path.exists():
            raise DataValidationError(str(path), TRUE_P_COLUMN,
                                      "synthetic truth file missing (is this a synthetic log?)")
        try:
            p = feather.read_table(str(path), columns=[TRUE_P_COLUMN]).column(0).to_numpy().astype(np.float64)
        except Exception as e:
            raise DataValidationError(str(path), TRUE_P_COLUMN, f"unreadable: {e}") from None
        if len(p) != counts[i]:
            raise DataValidationError(str(path), TRUE_P_COLUMN,
                                      f"has {len(p)} rows but the realshow file has {counts[i]}")
        check_rows(path, TRUE_P_COLUMN, ~((p >= 0) & (p <= 1)), p, "must be a probability")
        parts.append(p)
    return np.concatenate(parts)


@register_source("synthetic", defaults=RECFLOW_DEFAULTS)
def load_synthetic(root: Path | str, *, days: Iterable[str | dt.date] | None = None,
                   progress: bool = False) -> ExposureLog:
    """A `recscale synth` log: the recflow reader plus `true_p`."""
    log = read_recflow(root, days, source="synthetic", progress=progress)
    log.columns[TRUE_P_COLUMN] = read_truth(log)
    return log


@register_source("movielens100k", defaults=MOVIELENS_DEFAULTS)
def load_movielens(root: Path | str, **options) -> ExposureLog:
    """MovieLens-100k folder (u.data, u.user, u.item) mapped onto the canonical table."""
    return read_movielens(root, **options)
