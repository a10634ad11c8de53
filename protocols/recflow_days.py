"""RecFlow's calendar: the default 37 days, Asia/Shanghai day boundaries and per-day file names.

RecFlow stores one file per calendar day in China Standard Time; a request belongs to the file of the
day its `request_timestamp` (ms) falls in, judged in Asia/Shanghai (zoneinfo), left-closed right-open.
"""
from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import numpy as np

SHANGHAI = ZoneInfo("Asia/Shanghai")
FIRST_DAY = dt.date(2024, 1, 13)
NUM_DAYS = 37  # 2024-01-13 .. 2024-02-18 inclusive
DEFAULT_DAYS: tuple[dt.date, ...] = tuple(FIRST_DAY + dt.timedelta(days=i) for i in range(NUM_DAYS))
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
