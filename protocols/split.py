"""Time split of an exposure log into train / valid / test by request time (docs/protocols.md, "Time split"),
and local calendar parts (day, hour, weekday) of timestamps, used for the training order and the time-cycle
features. `SplitConfig` is a complete split (defaults: the RecFlow seed's dates in Asia/Shanghai);
`SplitSettings` any subset of its keys, the rest from the source's default (`protocols.SourceDefaults`, `tail_split`).
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, fields
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import numpy as np
import pandas as pd

from core.typed_config import ConfigError

SPLITS: tuple[str, ...] = ("train", "valid", "test")


@dataclass(frozen=True)
class SplitConfig:
    """Split boundaries: train = [train_start, valid_start), valid = [valid_start, test_start),
    test = [test_start, test_end). Values are ISO dates ("2024-02-08") or date-times in `timezone`."""

    train_start: str = "2024-01-13"
    valid_start: str = "2024-02-08"
    test_start: str = "2024-02-12"
    test_end: str = "2024-02-19"
    timezone: str = "Asia/Shanghai"

    def __post_init__(self) -> None:
        _check_timezone(self.timezone)
        bounds = self.boundaries_ms()
        if not all(a < b for a, b in zip(bounds, bounds[1:])):
            raise ConfigError(
                "split boundaries must increase strictly: "
                f"train_start={self.train_start} < valid_start={self.valid_start} "
                f"< test_start={self.test_start} < test_end={self.test_end}"
            )

    def boundaries_ms(self) -> tuple[int, int, int, int]:
        """The four boundaries as epoch milliseconds."""
        return tuple(  # type: ignore[return-value]
            local_to_epoch_ms(v, self.timezone)
            for v in (self.train_start, self.valid_start, self.test_start, self.test_end)
        )

    def interval_ms(self, split: str) -> tuple[int, int]:
        """[start, end) of `split` in epoch milliseconds."""
        b = self.boundaries_ms()
        i = SPLITS.index(split)
        return b[i], b[i + 1]


#: The boundary keys in split order (train = [train_start, valid_start), ...).
BOUNDARY_KEYS: tuple[str, ...] = ("train_start", "valid_start", "test_start", "test_end")


@dataclass(frozen=True)
class SplitSettings:
    """Split keys a config sets; None = the source's default (see `protocols.SourceDefaults`). The given keys
    are checked when loaded, the full split again once resolved."""

    train_start: str | None = None
    valid_start: str | None = None
    test_start: str | None = None
    test_end: str | None = None
    timezone: str | None = None

    def __post_init__(self) -> None:
        zone = self.timezone or "UTC"
        if self.timezone is not None:
            _check_timezone(self.timezone)
        given = [(k, getattr(self, k)) for k in BOUNDARY_KEYS if getattr(self, k) is not None]
        for k, v in given:
            try:
                local_to_epoch_ms(v, zone)
            except ConfigError as e:
                raise ConfigError(f"{k}: {e}") from None
        for (k1, v1), (k2, v2) in zip(given, given[1:]):
            if not local_to_epoch_ms(v1, zone) < local_to_epoch_ms(v2, zone):
                raise ConfigError(f"{k2}: must be later than {k1} ({k1}={v1}, {k2}={v2})")

    def given(self) -> dict[str, str]:
        """The keys this config sets."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    @classmethod
    def of(cls, split: SplitConfig) -> SplitSettings:
        """Every key of a complete split, given."""
        return cls(**{f.name: getattr(split, f.name) for f in fields(split)})

    def resolve(self, default: SplitConfig, source: str = "") -> SplitConfig:
        """The complete split: the given keys over `default` (a ConfigError names the keys if the
        result does not increase)."""
        merged = {**{f.name: getattr(default, f.name) for f in fields(default)}, **self.given()}
        try:
            return SplitConfig(**merged)
        except ConfigError as e:
            whose = f" (unset keys come from the {source} source's default split)" if source else ""
            raise ConfigError(f"split: {e}{whose}") from None


def _check_timezone(timezone: str) -> None:
    try:
        ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError) as e:
        raise ConfigError(f"timezone: unknown time zone {timezone!r}") from e


def tail_split(first_ms: int, last_ms: int, *, valid_days: int, test_days: int, timezone: str) -> SplitConfig:
    """A split from a log's own date range: test = the last `test_days` calendar days (ending the day
    after the last event), valid = the `valid_days` before, train = every earlier day from the first."""
    first = _local_date(first_ms, timezone)
    end = _local_date(last_ms, timezone) + dt.timedelta(days=1)
    test_start = end - dt.timedelta(days=test_days)
    valid_start = test_start - dt.timedelta(days=valid_days)
    if not first < valid_start:
        raise ConfigError(
            f"split: the log covers only {first} to {end - dt.timedelta(days=1)} ({timezone}), too short for a "
            f"{valid_days}-day valid and {test_days}-day test split plus training days; set split.train_start, "
            "split.valid_start, split.test_start and split.test_end")
    return SplitConfig(first.isoformat(), valid_start.isoformat(), test_start.isoformat(), end.isoformat(), timezone)


def _local_date(ts_ms: int, timezone: str) -> dt.date:
    return dt.datetime.fromtimestamp(ts_ms / 1000, tz=ZoneInfo(timezone)).date()


def format_ms(ts_ms: int, timezone: str) -> str:
    """An epoch-millisecond time as a local date (or date-time when not midnight) in `timezone`."""
    local = dt.datetime.fromtimestamp(ts_ms / 1000, tz=ZoneInfo(timezone))
    return local.date().isoformat() if local.time() == dt.time(0) else local.strftime("%Y-%m-%d %H:%M")


def local_to_epoch_ms(value: str, timezone: str) -> int:
    """Epoch milliseconds of an ISO date or date-time read as local time in `timezone`."""
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError as e:
        raise ConfigError(f"split boundary {value!r} is not an ISO date (YYYY-MM-DD[THH:MM])") from e
    if parsed.tzinfo is not None:
        raise ConfigError(f"split boundary {value!r} must not carry its own offset; set `timezone` instead")
    return int(parsed.replace(tzinfo=ZoneInfo(timezone)).timestamp() * 1000)


def split_codes(request_ts: np.ndarray, cfg: SplitConfig) -> np.ndarray:
    """int8 [N]: 0 train, 1 valid, 2 test, -1 outside every interval."""
    bounds = np.asarray(cfg.boundaries_ms(), dtype=np.int64)
    # searchsorted(side="right") - 1 gives the interval whose start <= t; the last bound closes test.
    code = np.searchsorted(bounds, request_ts, side="right").astype(np.int8) - 1
    code[(request_ts < bounds[0]) | (request_ts >= bounds[-1])] = -1
    return code


def split_rows(request_ts: np.ndarray, cfg: SplitConfig) -> dict[str, np.ndarray]:
    """Row indices (ascending, int64) of each split."""
    code = split_codes(request_ts, cfg)
    return {name: np.flatnonzero(code == i) for i, name in enumerate(SPLITS)}


@dataclass(frozen=True)
class LocalTimeParts:
    """Calendar parts of timestamps in a time zone (all int arrays of the input's length)."""

    day: np.ndarray  # days since 1970-01-01 of the local calendar date
    hour: np.ndarray  # 0..23
    weekday: np.ndarray  # Monday = 0 .. Sunday = 6


def local_time_parts(ts_ms: np.ndarray, timezone: str = "Asia/Shanghai") -> LocalTimeParts:
    """Local day / hour / weekday of epoch-millisecond timestamps (vectorised, zoneinfo-aware)."""
    local = pd.DatetimeIndex(pd.to_datetime(np.asarray(ts_ms, dtype=np.int64), unit="ms", utc=True)).tz_convert(
        ZoneInfo(timezone)
    )
    # wall-clock time as naive datetime64, truncated to the calendar day (unit-agnostic)
    day = local.tz_localize(None).values.astype("datetime64[D]").astype(np.int64)
    return LocalTimeParts(
        day=day.astype(np.int32),
        hour=np.asarray(local.hour, dtype=np.int8),
        weekday=np.asarray(local.day_of_week, dtype=np.int8),
    )
