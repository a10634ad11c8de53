"""RecFlow's author-provided 50-event histories, `seq_effective_50_dict/YYYY-MM-DD.pkl`, read lazily per day.

Each file is a dict request_id -> int array [50, 10] (columns `recflow_format.AUTHOR50_COLUMNS`; valid
rows at the end, zero rows in front). Files are opened only through the restricted unpickler of
`protocols.safe_pickle` and their arrays are checked for shape and cast to int64.
"""
from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np

from .errors import DataValidationError
from .recflow_format import AUTHOR50_COLUMNS, AUTHOR50_LEN, author50_path
from .safe_pickle import load_int_array_dict

AUTHOR50_SHAPE = (AUTHOR50_LEN, len(AUTHOR50_COLUMNS))


class Author50Reader:
    """Callable file_index -> {request_id: int64 [50, 10]} for the days of an ExposureLog."""

    def __init__(self, root: Path, days: tuple[dt.date, ...]):
        self.root, self.days = Path(root), tuple(days)

    def path(self, file_index: int) -> Path:
        return author50_path(self.root, self.days[file_index])

    def __call__(self, file_index: int) -> dict[int, np.ndarray]:
        path = self.path(file_index)
        if not path.exists():
            raise DataValidationError(str(path), "(file)", f"no author-50 file for day {self.days[file_index]}")
        arrays = load_int_array_dict(path)
        for request_id, arr in arrays.items():
            if arr.shape != AUTHOR50_SHAPE:
                raise DataValidationError(str(path), "(array shape)",
                                          f"array of request_id {request_id} must be {AUTHOR50_SHAPE}",
                                          value=str(arr.shape))
        return {k: v.astype(np.int64, copy=False) for k, v in arrays.items()}

    def stack(self, file_index: int) -> tuple[np.ndarray, np.ndarray]:
        """The day's arrays stacked: (request_ids [R] int64 sorted, histories [R, 50, 10] int64)."""
        arrays = self(file_index)
        ids = np.fromiter(arrays.keys(), dtype=np.int64, count=len(arrays))
        order = np.argsort(ids)
        stacked = np.stack(list(arrays.values())) if arrays else np.zeros((0,) + AUTHOR50_SHAPE, np.int64)
        return ids[order], stacked[order]
