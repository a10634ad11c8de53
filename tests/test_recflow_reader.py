"""The RecFlow reader on a synthetic log: event ids, column quirks, parquet, day lists, fingerprints."""
from __future__ import annotations

import shutil

import numpy as np
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest

import protocols
from protocols.recflow import DEFAULT_DAYS, read_recflow
from protocols.schema import EXPOSURE_COLUMNS, split_event_id
from protocols.synthetic import generate


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return generate("tiny", tmp_path_factory.mktemp("reader") / "log", seed=5, author50=False)


@pytest.fixture(scope="module")
def log(root):
    return read_recflow(root)


def test_event_ids_round_trip_to_file_rows(root, log):
    assert log.days == DEFAULT_DAYS and len(log.days) == 37
    eid = log["event_id"]
    assert len(np.unique(eid)) == len(eid) and np.all(np.diff(eid) > 0)
    file_index, record_index = split_event_id(eid)
    np.testing.assert_array_equal(file_index, log["file_index"])
    np.testing.assert_array_equal(record_index, log["record_index"])
    assert record_index.min() == 1
    rng = np.random.default_rng(0)
    for e in rng.choice(eid, 25, replace=False):
        f, r = int(e >> 32), int(e & 0xFFFFFFFF)
        table = feather.read_table(str(root / "realshow" / f"{DEFAULT_DAYS[f]}.feather"))
        row = np.flatnonzero(eid == e)[0]
        for name in ("request_id", "video_id", "playing_time"):
            assert table.column(name)[r - 1].as_py() == log[name][row]
        assert table.column(" category_level_two")[r - 1].as_py() == log["category_level_two"][row]


def test_columns_are_int64_and_complete(log):
    assert all(log[c].dtype == np.int64 for c in EXPOSURE_COLUMNS + ("event_id", "file_index", "record_index"))
    assert "true_p" not in log.columns  # the recflow source does not read the truth


def test_parquet_files_read_the_same(root, log, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    for d in DEFAULT_DAYS[:3]:
        src = copy / "realshow" / f"{d}.feather"
        pq.write_table(feather.read_table(str(src)), str(src.with_suffix(".parquet")))
        src.unlink()
    other = read_recflow(copy)
    for c in EXPOSURE_COLUMNS + ("event_id",):
        np.testing.assert_array_equal(other[c], log[c])


@pytest.mark.fault
def test_fingerprint_is_stable_across_copies_and_sees_changes(root, log, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    assert read_recflow(copy).fingerprint == log.fingerprint
    path = copy / "realshow" / f"{DEFAULT_DAYS[4]}.feather"
    table = feather.read_table(str(path))
    cols = {n: table.column(n).to_numpy().copy() for n in table.column_names}
    cols["like"][0] = 1 - cols["like"][0]
    import pyarrow as pa

    feather.write_feather(pa.table(cols), str(path))
    assert read_recflow(copy).fingerprint != log.fingerprint


def test_configurable_day_list(root, log):
    days = [d.isoformat() for d in DEFAULT_DAYS[30:]]
    part = read_recflow(root, days)
    assert part.days == DEFAULT_DAYS[30:]
    np.testing.assert_array_equal(part["request_id"], log["request_id"][log["file_index"] >= 30])
    np.testing.assert_array_equal(part["file_index"], log["file_index"][log["file_index"] >= 30] - 30)


def test_registered_sources(root, log):
    assert {"recflow", "synthetic", "movielens100k"} <= set(protocols.source_names())
    syn = protocols.SOURCES.get("synthetic")(root)
    assert syn.has_truth and syn.source == "synthetic" and len(syn) == len(log)
    truth = np.concatenate([feather.read_table(str(root / "synthetic_truth" / f"{d}.feather")).column(0).to_numpy()
                            for d in DEFAULT_DAYS])
    np.testing.assert_array_equal(syn["true_p"], truth)
    assert syn.author50_loader is None
