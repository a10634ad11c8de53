"""RecFlow's on-disk layout (folders, the 30 realshow columns with the integer widths the synthetic writer uses,
the 37 default days and their Asia/Shanghai bounds) and its reader: realshow files -> validated `ExposureLog`,
every rule checked on the whole log first, a broken log refused with a `DataValidationError` naming the file,
record, field and value; the author-50 pickles read lazily per day, only through `protocols.safe_pickle`.
Registers the `recflow` and `synthetic` (plus `true_p`) sources. The layout, rules, event ids and fingerprint:
docs/data.md, "RecFlow files and validation"; the defaults: docs/protocols.md, "Sources declare their defaults".
"""
from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Iterable
from functools import partial
from pathlib import Path
from zoneinfo import ZoneInfo

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
from tqdm import tqdm

from . import SourceDefaults, register_source
from .errors import DataValidationError, check_rows, plain
from .log import ExposureLog
from .safe_pickle import load_int_array_dict
from .schema import EXPOSURE_COLUMNS, TRUE_P_COLUMN, make_event_id
from .split import SplitConfig

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


RECFLOW_DEFAULTS = SourceDefaults(
    split=lambda log: SplitConfig(), sizes="scaled",
    split_doc="the RecFlow seed's dates 2024-01-13 / 2024-02-08 / 2024-02-12 / 2024-02-19 (Asia/Shanghai)")

BINARY_COLUMNS: tuple[str, ...] = ("effective_view", "long_view")
NON_NEGATIVE_COLUMNS: tuple[str, ...] = ("playing_time",)
AUTHOR50_SHAPE = (AUTHOR50_LEN, len(AUTHOR50_COLUMNS))


def find_day_files(root: Path, days: Iterable[dt.date]) -> list[Path]:
    """The single realshow file of each day, in the given order; errors name what is missing or doubled."""
    folder = Path(root) / REALSHOW_DIR
    if not folder.is_dir():
        raise DataValidationError(str(folder), "(folder)", "realshow folder not found")
    files = []
    for day in days:
        found = [folder / f"{day.isoformat()}{s}" for s in LOG_SUFFIXES if (folder / f"{day.isoformat()}{s}").exists()]
        if not found:
            raise DataValidationError(str(folder / f"{day.isoformat()}.feather"), "(file)", f"no file for day {day}")
        if len(found) > 1:
            raise DataValidationError(str(found[1]), "(file)",
                                      f"day {day} has more than one file: {[p.name for p in found]}")
        files.append(found[0])
    return files


def _int64_column(path: Path, name: str, col: pa.ChunkedArray) -> np.ndarray:
    """Validated int64 copy of one column (integer type, no nulls, fits int64)."""
    if col.null_count:
        nulls = col.is_null().to_numpy(zero_copy_only=False)
        check_rows(path, name, nulls, None, "missing value (null)", count=True)
    if not pa.types.is_integer(col.type):
        raw = col.to_numpy(zero_copy_only=False)
        # the first value that is not a whole number (0 when the values are not numbers at all)
        as_float = pd.to_numeric(pd.Series(raw), errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        bad = np.flatnonzero(~np.isfinite(as_float) | (as_float != np.round(as_float)))
        first = int(bad[0]) if len(bad) else 0
        raise DataValidationError(
            str(path), name, f"must have an integer type, found {col.type}", record=first + 1, value=plain(raw[first])
        )
    values = col.to_numpy()
    if values.dtype == np.uint64:
        check_rows(path, name, values > np.iinfo(np.int64).max, values, "does not fit int64", count=True)
    return values.astype(np.int64)


def read_day(path: Path, data: bytes, day_start: int, day_end: int) -> dict[str, np.ndarray]:
    """Read and validate one day's file (every per-file rule); returns canonical int64 columns."""
    try:
        reader = pa.BufferReader(pa.py_buffer(data))
        table = pq.read_table(reader) if path.suffix == ".parquet" else feather.read_table(reader)
    except (pa.ArrowException, OSError, ValueError) as e:
        raise DataValidationError(str(path), "(file)", f"unreadable: {e}") from None
    stripped = [n.strip() for n in table.column_names]
    for name in sorted(set(stripped)):
        if stripped.count(name) > 1:
            raise DataValidationError(str(path), name, "column appears more than once after stripping whitespace")
    if table.num_rows == 0:
        raise DataValidationError(str(path), "(file)", "file has no rows")
    by_name = dict(zip(stripped, table.columns))
    out = {}
    for name in EXPOSURE_COLUMNS:
        if name not in by_name:
            raise DataValidationError(str(path), name, f"required column missing; found {sorted(stripped)}")
        out[name] = _int64_column(path, name, by_name[name])
    for name in BINARY_COLUMNS:
        check_rows(path, name, (out[name] != 0) & (out[name] != 1), out[name], "must be 0 or 1", count=True)
    for name in NON_NEGATIVE_COLUMNS:
        check_rows(path, name, out[name] < 0, out[name], "must be >= 0", count=True)
    ts = out["request_timestamp"]
    check_rows(path, "request_timestamp", (ts < day_start) | (ts >= day_end), ts,
               "outside the file's day (Asia/Shanghai)", count=True)
    return out


def check_requests(files: list[Path], columns: dict[str, np.ndarray]) -> None:
    """Each request_id has one user_id and one request_timestamp across the whole log."""
    rid = columns["request_id"]
    order = np.argsort(rid, kind="stable")
    same = rid[order][1:] == rid[order][:-1]
    for field in ("user_id", "request_timestamp"):
        v = columns[field][order]
        clash = np.flatnonzero(same & (v[1:] != v[:-1]))
        if len(clash):
            row = int(order[clash[0] + 1])
            first = int(order[clash[0]])
            f_idx, rec = int(columns["file_index"][row]), int(columns["record_index"][row])
            raise DataValidationError(
                str(files[f_idx]), field,
                f"request_id {int(rid[row])} already has {field} {int(columns[field][first])} "
                f"(file {files[int(columns['file_index'][first])].name}, record {int(columns['record_index'][first])})",
                record=rec, value=int(columns[field][row]),
            )


def read_recflow(
    root: Path | str,
    days: Iterable[str | dt.date] | None = None,
    *,
    source: str = "recflow",
    progress: bool = False,
) -> ExposureLog:
    """Read and validate a RecFlow-layout log; see the module docstring for the rules."""
    root = Path(root)
    day_list = tuple(parse_day(d) for d in days) if days is not None else DEFAULT_DAYS
    if len(set(day_list)) != len(day_list):
        raise DataValidationError(str(root), "(days)", "the configured day list repeats a day")
    day_list = tuple(sorted(day_list))
    files = find_day_files(root, day_list)
    starts, ends = day_bounds_ms(day_list)
    digest = hashlib.sha256(b"recflow-v1")
    parts: list[dict[str, np.ndarray]] = []
    for i, path in enumerate(tqdm(files, desc="read", unit="file", disable=not progress)):
        try:
            data = path.read_bytes()
        except OSError as e:
            raise DataValidationError(str(path), "(file)", f"unreadable: {e}") from None
        if not data:
            raise DataValidationError(str(path), "(file)", "file is empty (0 bytes)")
        digest.update(f"{day_list[i].isoformat()}:{len(data)}:".encode())
        digest.update(data)
        parts.append(read_day(path, data, int(starts[i]), int(ends[i])))
        del data
    lengths = np.array([len(p["request_id"]) for p in parts], dtype=np.int64)
    columns: dict[str, np.ndarray] = {name: np.concatenate([p.pop(name) for p in parts]) for name in EXPOSURE_COLUMNS}
    del parts
    file_index = np.repeat(np.arange(len(files), dtype=np.int64), lengths)
    record_index = np.arange(int(lengths.sum()), dtype=np.int64) - np.repeat(np.cumsum(lengths) - lengths, lengths) + 1
    columns["file_index"], columns["record_index"] = file_index, record_index
    columns["event_id"] = make_event_id(file_index, record_index)
    check_requests(files, columns)
    loader = None
    if (root / AUTHOR50_DIR).is_dir():
        loader = partial(read_author50, root, day_list)
    return ExposureLog(
        columns=columns, days=day_list, source=source, root=root, fingerprint=digest.hexdigest(), author50_loader=loader
    )


def read_author50(root: Path, days: tuple[dt.date, ...], file_index: int) -> dict[int, np.ndarray]:
    """{request_id: int64 [50, 10]} of day `days[file_index]`; a log's `author50_loader` binds `root` and `days`."""
    path = author50_path(root, days[file_index])
    if not path.exists():
        raise DataValidationError(str(path), "(file)", f"no author-50 file for day {days[file_index]}")
    arrays = load_int_array_dict(path)
    for request_id, arr in arrays.items():
        if arr.shape != AUTHOR50_SHAPE:
            raise DataValidationError(str(path), "(array shape)",
                                      f"array of request_id {request_id} must be {AUTHOR50_SHAPE}",
                                      value=str(arr.shape))
    return {k: v.astype(np.int64, copy=False) for k, v in arrays.items()}


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
