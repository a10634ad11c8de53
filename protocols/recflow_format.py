"""RecFlow's on-disk layout and calendar: folder names, the full realshow column list (30 integer columns, one
spelled `" category_level_two"`) with the realistic integer widths the synthetic writer uses, the default 37 days
and their Asia/Shanghai boundaries (a request belongs to the file of the day its `request_timestamp` falls in,
left-closed right-open). The layout and its quirks: docs/data.md, "RecFlow files and validation".
"""
from __future__ import annotations

import datetime as dt
from pathlib import Path
from zoneinfo import ZoneInfo

import numpy as np

REALSHOW_DIR = "realshow"
AUTHOR50_DIR = "seq_effective_50_dict"
TRUTH_DIR = "synthetic_truth"
LOG_SUFFIXES: tuple[str, ...] = (".feather", ".parquet")

#: Column names exactly as in the released files, in their order (note the leading space of category_level_two),
#: and the storage widths the synthetic writer uses (the real widths are not published; readers cast to int64).
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
RECFLOW_COLUMNS: tuple[str, ...] = tuple(RECFLOW_DTYPES)

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


def author50_path(root: Path, day: dt.date) -> Path:
    return Path(root) / AUTHOR50_DIR / f"{day.isoformat()}.pkl"


def truth_path(root: Path, day: dt.date) -> Path:
    return Path(root) / TRUTH_DIR / f"{day.isoformat()}.feather"


SHANGHAI = ZoneInfo("Asia/Shanghai")
#: The 37 released days, 2024-01-13 .. 2024-02-18 inclusive.
DEFAULT_DAYS: tuple[dt.date, ...] = tuple(dt.date(2024, 1, 13) + dt.timedelta(days=i) for i in range(37))
MS_PER_DAY = 86_400_000


def parse_day(text: str | dt.date) -> dt.date:
    """'2024-01-13' -> date(2024, 1, 13); dates pass through."""
    if isinstance(text, dt.date):
        return text
    return dt.date.fromisoformat(str(text).strip())


def day_start_ms(day: dt.date) -> int:
    """Epoch milliseconds of 00:00 Asia/Shanghai on `day`."""
    return int(dt.datetime(day.year, day.month, day.day, tzinfo=SHANGHAI).timestamp() * 1000)


def day_bounds_ms(days: tuple[dt.date, ...]) -> tuple[np.ndarray, np.ndarray]:
    """[start, end) epoch-ms bounds of each day, as two int64 arrays."""
    starts = np.array([day_start_ms(d) for d in days], dtype=np.int64)
    ends = np.array([day_start_ms(d + dt.timedelta(days=1)) for d in days], dtype=np.int64)
    return starts, ends


def local_hour(ts_ms: np.ndarray) -> np.ndarray:
    """Fractional hour of day in Asia/Shanghai (UTC+8 all year, no DST) of epoch-ms timestamps."""
    return ((np.asarray(ts_ms, dtype=np.int64) // 1000 + 8 * 3600) % 86_400) / 3600.0
