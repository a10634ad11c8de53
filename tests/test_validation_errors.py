"""Every validation rule of the RecFlow reader, fed a small broken log.

Each case asserts that the error names the file, the record (where one exists), the field and the
offending value, that `recscale inspect` exits with status 2, and that nothing was written.
"""
from __future__ import annotations

import datetime as dt
import pickle
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest

from cli.main import main
from protocols.errors import DataValidationError
from protocols.recflow import day_start_ms, read_recflow
from protocols.schema import EXPOSURE_COLUMNS

DAYS = [dt.date(2024, 1, 13), dt.date(2024, 1, 14), dt.date(2024, 1, 15)]
DAY_ARG = ",".join(d.isoformat() for d in DAYS)


def valid_day(i: int) -> dict[str, np.ndarray]:
    """Four exposures in two requests on DAYS[i]; request ids unique across days."""
    t = day_start_ms(DAYS[i]) + np.array([3_600_000, 3_600_000, 7_200_000, 7_200_000])
    cols = {name: np.zeros(4, np.int64) for name in EXPOSURE_COLUMNS}
    cols.update(
        request_id=np.array([10 * i, 10 * i, 10 * i + 1, 10 * i + 1]),
        request_timestamp=t,
        user_id=np.array([1, 1, 2, 2]),
        video_id=np.arange(4) + 100 * i,
        upload_timestamp=t // 1000 - 3600,
        duration=np.full(4, 20_000),
        playing_time=np.array([25_000, 1_000, 8_000, 0]),
        effective_view=np.array([1, 0, 1, 0]),
        long_view=np.array([1, 0, 0, 0]),
    )
    return cols


def write_table(path: Path, cols: dict, quirk: bool = True) -> None:
    names = [(" category_level_two" if (quirk and n == "category_level_two") else n) for n in cols]
    table = pa.Table.from_arrays([pa.array(v) for v in cols.values()], names=names)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".parquet":
        pq.write_table(table, str(path))
    else:
        feather.write_feather(table, str(path))


def make_log(root: Path) -> None:
    for i, d in enumerate(DAYS):
        write_table(root / "realshow" / f"{d}.feather", valid_day(i))


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


# ------------------------------------------------------------------------------------------------
# broken inputs: (name, mutate(root), expected file name, field, record, value)
# ------------------------------------------------------------------------------------------------
def _set(i: int, field: str, row: int, value) -> Callable[[Path], None]:
    def mutate(root: Path) -> None:
        cols = valid_day(i)
        arr = cols[field].astype(object) if not isinstance(value, int) else cols[field]
        arr[row] = value
        cols[field] = arr
        if isinstance(value, float):
            cols[field] = np.asarray(arr, dtype=np.float64)
        write_table(root / "realshow" / f"{DAYS[i]}.feather", cols)

    return mutate


def _missing_day(root):
    (root / "realshow" / f"{DAYS[1]}.feather").unlink()


def _duplicate_day(root):
    write_table(root / "realshow" / f"{DAYS[2]}.parquet", valid_day(2))


def _empty_file(root):
    (root / "realshow" / f"{DAYS[0]}.feather").write_bytes(b"")


def _garbage_file(root):
    (root / "realshow" / f"{DAYS[1]}.feather").write_bytes(b"this is not an arrow file" * 10)


def _zero_rows(root):
    write_table(root / "realshow" / f"{DAYS[0]}.feather", {k: v[:0] for k, v in valid_day(0).items()})


def _missing_column(root):
    cols = valid_day(2)
    del cols["playing_time"]
    write_table(root / "realshow" / f"{DAYS[2]}.feather", cols)


def _duplicate_column(root):
    cols = valid_day(0)
    table = pa.Table.from_arrays([pa.array(v) for v in cols.values()] + [pa.array(cols["user_id"])],
                                 names=list(cols) + [" user_id "])
    feather.write_feather(table, str(root / "realshow" / f"{DAYS[0]}.feather"))


def _string_column(root):
    cols = valid_day(1)
    cols["age"] = np.array(["3", "4", "x", "5"])
    write_table(root / "realshow" / f"{DAYS[1]}.feather", cols)


def _null_value(root):
    cols = valid_day(1)
    table = pa.Table.from_arrays(
        [pa.array(v) if n != "duration" else pa.array([20_000, None, 20_000, 20_000], pa.int64()) for n,
         v in cols.items()],
        names=list(cols),
    )
    feather.write_feather(table, str(root / "realshow" / f"{DAYS[1]}.feather"))


def _request_two_users(root):
    cols = valid_day(2)
    cols["request_id"] = np.array([0, 0, 21, 21])  # request 0 also lives on day 0 with user 1
    cols["user_id"] = np.array([5, 5, 2, 2])
    cols["request_timestamp"] = cols["request_timestamp"]
    write_table(root / "realshow" / f"{DAYS[2]}.feather", cols)


def _request_two_timestamps(root):
    cols = valid_day(0)
    cols["request_timestamp"] = cols["request_timestamp"] + np.array([0, 0, 0, 5])
    write_table(root / "realshow" / f"{DAYS[0]}.feather", cols)


def _float_column(root):
    cols = valid_day(0)
    cols["duration"] = np.array([20_000.0, 20_000.0, 1.5, 20_000.0])
    write_table(root / "realshow" / f"{DAYS[0]}.feather", cols)


def _timestamp_outside_day(root):
    cols = valid_day(1)
    cols["request_timestamp"] = cols["request_timestamp"].copy()
    cols["request_timestamp"][2:] = day_start_ms(DAYS[2]) + 1000  # next day's time in this day's file
    write_table(root / "realshow" / f"{DAYS[1]}.feather", cols)


def _timestamp_in_seconds(root):
    cols = valid_day(0)
    cols["request_timestamp"] = cols["request_timestamp"] // 1000  # wrong unit: seconds, not ms
    write_table(root / "realshow" / f"{DAYS[0]}.feather", cols)


CASES = [
    ("missing day", _missing_day, f"{DAYS[1]}.feather", "(file)", None, None),
    ("day twice", _duplicate_day, f"{DAYS[2]}.parquet", "(file)", None, None),
    ("0-byte file", _empty_file, f"{DAYS[0]}.feather", "(file)", None, None),
    ("unreadable file", _garbage_file, f"{DAYS[1]}.feather", "(file)", None, None),
    ("file without rows", _zero_rows, f"{DAYS[0]}.feather", "(file)", None, None),
    ("missing column", _missing_column, f"{DAYS[2]}.feather", "playing_time", None, None),
    ("column twice after strip", _duplicate_column, f"{DAYS[0]}.feather", "user_id", None, None),
    ("float column", _float_column, f"{DAYS[0]}.feather", "duration", 3, 1.5),
    ("string column", _string_column, f"{DAYS[1]}.feather", "age", 3, "x"),
    ("null value", _null_value, f"{DAYS[1]}.feather", "duration", 2, None),
    ("effective_view = 2", _set(1, "effective_view", 3, 2), f"{DAYS[1]}.feather", "effective_view", 4, 2),
    ("long_view = -1", _set(2, "long_view", 0, -1), f"{DAYS[2]}.feather", "long_view", 1, -1),
    ("negative playing_time", _set(0, "playing_time", 2, -40), f"{DAYS[0]}.feather", "playing_time", 3, -40),
    ("request with two users", _request_two_users, f"{DAYS[2]}.feather", "user_id", 1, 5),
    ("request with two timestamps", _request_two_timestamps, f"{DAYS[0]}.feather", "request_timestamp", 4, None),
    ("timestamp outside the day", _timestamp_outside_day, f"{DAYS[1]}.feather", "request_timestamp", 3, None),
    ("timestamp in seconds", _timestamp_in_seconds, f"{DAYS[0]}.feather", "request_timestamp", 1, None),
]


@pytest.mark.fault
@pytest.mark.parametrize("name, mutate, file, field, record, value", CASES, ids=[c[0] for c in CASES])
def test_broken_log_is_refused_with_a_precise_error(tmp_path, capsys, name, mutate, file, field, record, value):
    root = tmp_path / "log"
    make_log(root)
    read_recflow(root, DAYS)  # the unbroken log is valid
    mutate(root)
    before = snapshot(tmp_path)

    with pytest.raises(DataValidationError) as err:
        read_recflow(root, DAYS)
    e = err.value
    assert Path(e.file).name == file, str(e)
    assert e.field == field, str(e)
    assert e.record == record, str(e)
    if value is not None:
        assert e.value == value and repr(value) in str(e)
    text = str(e)
    assert file in text and repr(field) in text
    if record is not None:
        assert f"record {record}" in text

    assert main(["inspect", str(root), "--source", "recflow", "--days", DAY_ARG, "--quiet"]) == 2
    assert file in capsys.readouterr().err
    assert snapshot(tmp_path) == before  # nothing written, nothing touched


def test_valid_log_reads_with_stripped_names_and_int64(tmp_path):
    root = tmp_path / "log"
    make_log(root)
    log = read_recflow(root, DAYS)
    assert len(log) == 12 and log.days == tuple(DAYS)
    assert all(log[c].dtype == np.int64 for c in EXPOSURE_COLUMNS)
    np.testing.assert_array_equal(log["record_index"], np.tile(np.arange(1, 5), 3))


@pytest.mark.fault
def test_truth_file_misaligned_is_refused(tmp_path):
    from protocols.recflow import load_synthetic

    root = tmp_path / "log"
    make_log(root)
    for i, d in enumerate(DAYS):
        (root / "synthetic_truth").mkdir(exist_ok=True)
        n = 4 if i != 1 else 3
        feather.write_feather(pa.table({"true_p": np.full(n, 0.3)}), str(root / "synthetic_truth" / f"{d}.feather"))
    with pytest.raises(DataValidationError, match=f"{DAYS[1]}.feather.*true_p.*3 rows"):
        load_synthetic(root, days=DAYS)


@pytest.mark.fault
def test_author50_array_of_wrong_shape_is_refused(tmp_path):
    root = tmp_path / "log"
    make_log(root)
    folder = root / "seq_effective_50_dict"
    folder.mkdir()
    for d in DAYS:
        (folder / f"{d}.pkl").write_bytes(pickle.dumps({0: np.zeros((50, 10), np.int64),
                                                        1: np.zeros((49, 10), np.int64)}))
    log = read_recflow(root, DAYS)
    with pytest.raises(DataValidationError, match="request_id 1"):
        log.author50_loader(0)
