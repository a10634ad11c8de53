"""ExposureLog: the canonical in-memory exposure table every source yields and protocols, splits and encoders
read (docs/data.md). Rows are in (file_index, record_index) order.
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .schema import EXPOSURE_COLUMNS, IDENTITY_COLUMNS, TRUE_P_COLUMN


@dataclass
class ExposureLog:
    """Columns of the exposure table as numpy arrays of equal length."""

    columns: dict[str, np.ndarray]  # EXPOSURE_COLUMNS + IDENTITY_COLUMNS as int64, + `true_p` (float64) if synthetic
    days: tuple[dt.date, ...]  # the calendar day (Asia/Shanghai) of each file_index
    source: str  # registered source name
    root: Path  # folder the log was read from
    fingerprint: str  # content hash of the inputs (stable across copies of the same files)
    #: {request_id: int64 [50, 10]} of one file_index (RecFlow's seq_effective_50_dict), loaded lazily: it is large
    author50_loader: Callable[[int], dict[int, np.ndarray]] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        missing = [c for c in EXPOSURE_COLUMNS + IDENTITY_COLUMNS if c not in self.columns]
        if missing:
            raise ValueError(f"ExposureLog lacks columns {missing}")
        n = {len(v) for v in self.columns.values()}
        if len(n) > 1:
            raise ValueError(f"ExposureLog columns differ in length: {sorted(n)}")

    def __len__(self) -> int:
        return len(self.columns["event_id"])

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name]

    @property
    def has_truth(self) -> bool:
        return TRUE_P_COLUMN in self.columns
