"""Write a generated log in RecFlow's on-disk layout into a folder: per day the realshow file, the truth side file
and optionally the author-50 pickle (the files: docs/data.md, "The synthetic log"). A request's author-50 array
holds the (up to) 50 most recent effective views of its user strictly before its time, oldest first, right-aligned
with zero leading rows; `EffectiveViewIndex` finds each request's window end with one searchsorted.
"""
from __future__ import annotations

import datetime as dt
import pickle
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather

from ..recflow import (
    AUTHOR50_COLUMNS,
    AUTHOR50_LEN,
    REALSHOW_DIR,
    RECFLOW_COLUMNS,
    RECFLOW_DTYPES,
    author50_path,
    truth_path,
)

_USER_SHIFT = 42


class EffectiveViewIndex:
    """Effective-view events of the whole log, sorted by (user, request_timestamp, request_id, position)."""

    def __init__(self, columns: dict[str, np.ndarray], effective: np.ndarray):
        """`columns`: canonical columns of log rows in file order; only rows with `effective` == 1 are kept."""
        sel = np.flatnonzero(effective == 1)
        user, ts = columns["user_id"][sel].astype(np.int64), columns["request_timestamp"][sel]
        self.t0 = int(ts.min()) - 1 if len(ts) else 0
        keys = (user << _USER_SHIFT) + (ts - self.t0)
        order = np.argsort(keys, kind="stable")  # input is already in (time, request, position) order
        self.keys = keys[order]
        self.rows = np.stack([columns[c][sel[order]].astype(np.int64) for c in AUTHOR50_COLUMNS], axis=1)  # [E, 10]

    def arrays(self, user: np.ndarray, ts: np.ndarray) -> np.ndarray:
        """[n, 50, 10] int64 histories of requests given by their user and timestamp."""
        user = np.asarray(user, dtype=np.int64)
        end = np.searchsorted(self.keys, (user << _USER_SHIFT) + (ts - self.t0), side="left")
        begin = np.searchsorted(self.keys, user << _USER_SHIFT, side="left")
        idx = end[:, None] - AUTHOR50_LEN + np.arange(AUTHOR50_LEN)[None, :]  # [n, 50]
        valid = idx >= begin[:, None]
        out = (self.rows[np.where(valid, idx, 0)] if len(self.rows)
               else np.zeros((len(user), AUTHOR50_LEN, len(AUTHOR50_COLUMNS)), np.int64))
        out[~valid] = 0
        return out


def write_day(
    root: Path,
    day: dt.date,
    columns: dict[str, np.ndarray],
    true_p: np.ndarray,
    author50: EffectiveViewIndex | None,
    requests: dict[str, np.ndarray],
) -> None:
    """Write one day's realshow file, truth file and (if `author50`) 50-history pickle."""
    # RecFlow's columns from the canonical ones (names without the leading space), in RecFlow's widths
    arrays = [pa.array(columns[name.strip()].astype(RECFLOW_DTYPES[name], copy=False)) for name in RECFLOW_COLUMNS]
    realshow = pa.Table.from_arrays(arrays, names=list(RECFLOW_COLUMNS))
    feather.write_feather(realshow, str(Path(root) / REALSHOW_DIR / f"{day.isoformat()}.feather"))
    feather.write_feather(pa.table({"true_p": true_p}), str(truth_path(root, day)))
    if author50 is not None:
        write_author50_day(root, day, author50, requests)


def write_author50_day(root: Path, day: dt.date, author50: EffectiveViewIndex, requests: dict[str, np.ndarray],
                       folder: Path | None = None) -> None:
    """Write one day's 50-history pickle: request_id -> int64 [50, 10], for the day's requests.

    `root` is the log folder (the file goes to `seq_effective_50_dict/DAY.pkl` there) unless `folder`
    names the folder that receives `DAY.pkl` directly."""
    arrays = author50.arrays(requests["user_id"], requests["request_timestamp"])
    path = Path(folder) / author50_path(root, day).name if folder is not None else author50_path(root, day)
    with open(path, "wb") as f:
        pickle.dump(dict(zip(requests["request_id"].tolist(), arrays)), f, protocol=pickle.HIGHEST_PROTOCOL)
