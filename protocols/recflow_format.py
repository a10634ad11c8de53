"""RecFlow's on-disk layout: folder names, the full realshow column list and realistic integer widths.

The released `realshow/YYYY-MM-DD.feather` files carry 30 integer columns; one of them is spelled
`" category_level_two"` with a leading space (a quirk readers must tolerate: they strip column names).
The synthetic writer reproduces the list, the quirk and these widths so that the reader is exercised
on exactly what the real files look like.
"""
from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np

REALSHOW_DIR = "realshow"
AUTHOR50_DIR = "seq_effective_50_dict"
TRUTH_DIR = "synthetic_truth"
LOG_SUFFIXES: tuple[str, ...] = (".feather", ".parquet")

#: Column names exactly as in the released files (note the leading space of category_level_two).
RECFLOW_COLUMNS: tuple[str, ...] = (
    "request_id",
    "request_timestamp",
    "user_id",
    "device_id",
    "age",
    "gender",
    "province",
    "video_id",
    "author_id",
    "category_level_one",
    " category_level_two",
    "upload_type",
    "upload_timestamp",
    "duration",
    "realshow",
    "rerank_pos",
    "rerank_neg",
    "rank_pos",
    "rank_neg",
    "coarse_neg",
    "prerank_neg",
    "rank_index",
    "rerank_index",
    "playing_time",
    "effective_view",
    "long_view",
    "like",
    "follow",
    "forward",
    "comment",
)

#: Storage widths used by the synthetic writer (the real widths are not published; readers cast to int64).
RECFLOW_DTYPES: dict[str, type] = {
    "request_id": np.int64,
    "request_timestamp": np.int64,
    "user_id": np.int32,
    "device_id": np.int32,
    "age": np.int8,
    "gender": np.int8,
    "province": np.int16,
    "video_id": np.int32,
    "author_id": np.int32,
    "category_level_one": np.int16,
    " category_level_two": np.int16,
    "upload_type": np.int16,
    "upload_timestamp": np.int64,
    "duration": np.int32,
    "realshow": np.int8,
    "rerank_pos": np.int8,
    "rerank_neg": np.int8,
    "rank_pos": np.int8,
    "rank_neg": np.int8,
    "coarse_neg": np.int8,
    "prerank_neg": np.int8,
    "rank_index": np.int16,
    "rerank_index": np.int16,
    "playing_time": np.int32,
    "effective_view": np.int8,
    "long_view": np.int8,
    "like": np.int8,
    "follow": np.int8,
    "forward": np.int8,
    "comment": np.int8,
}

#: Columns of each row of a seq_effective_50_dict array ([50, 10], right-aligned, zero-padded in front).
AUTHOR50_COLUMNS: tuple[str, ...] = (
    "video_id",
    "author_id",
    "category_level_two",
    "category_level_one",
    "upload_type",
    "upload_timestamp",
    "duration",
    "request_timestamp",
    "playing_time",
    "request_id",
)
AUTHOR50_LEN = 50


def day_stem(day: dt.date) -> str:
    return day.isoformat()


def author50_path(root: Path, day: dt.date) -> Path:
    return Path(root) / AUTHOR50_DIR / f"{day_stem(day)}.pkl"


def truth_path(root: Path, day: dt.date) -> Path:
    return Path(root) / TRUTH_DIR / f"{day_stem(day)}.feather"
