"""Write a generated log in RecFlow's on-disk layout (plus the truth side files) into a folder.

Per day: `realshow/DAY.feather` with RecFlow's 30 columns (leading-space ` category_level_two`
included, realistic integer widths), `synthetic_truth/DAY.feather` with `true_p` (float64) aligned row by
row with the realshow file, and optionally `seq_effective_50_dict/DAY.pkl`.
"""
from __future__ import annotations

import datetime as dt
import pickle
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather

from ..recflow_format import REALSHOW_DIR, RECFLOW_COLUMNS, RECFLOW_DTYPES, author50_path, truth_path
from .history50 import EffectiveViewIndex


def realshow_table(columns: dict[str, np.ndarray]) -> pa.Table:
    """The RecFlow realshow table from canonical columns (names without the leading space)."""
    arrays = []
    for name in RECFLOW_COLUMNS:
        arrays.append(pa.array(columns[name.strip()].astype(RECFLOW_DTYPES[name], copy=False)))
    return pa.Table.from_arrays(arrays, names=list(RECFLOW_COLUMNS))


def write_day(
    root: Path,
    day: dt.date,
    columns: dict[str, np.ndarray],
    true_p: np.ndarray,
    author50: EffectiveViewIndex | None,
    requests: dict[str, np.ndarray],
) -> None:
    """Write one day's realshow file, truth file and (if `author50`) 50-history pickle."""
    feather.write_feather(realshow_table(columns), str(Path(root) / REALSHOW_DIR / f"{day.isoformat()}.feather"))
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
