"""core.atomic_write: a failed or aborted write leaves the previous file and no temporary behind."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from core import atomic_write as AW


class Boom(Exception):
    pass


def _fails_after_writing(data: bytes, error: BaseException):
    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            f.write(data)  # half of the new content is on disk when the write fails
            f.flush()
            raise error
    return write


@pytest.mark.parametrize("error", [Boom("disk full"), KeyboardInterrupt()], ids=["error", "abort"])
def test_a_write_that_fails_midway_keeps_the_previous_content_and_leaves_no_temporary(tmp_path, error):
    path = tmp_path / "metrics.json"
    AW.write_json(path, {"auc": 0.75})
    with pytest.raises(type(error)):
        AW.atomic_write(path, _fails_after_writing(b'{"auc": 0.8', error))
    assert json.loads(path.read_text()) == {"auc": 0.75}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.json"]


def test_a_first_write_that_fails_leaves_nothing(tmp_path):
    with pytest.raises(Boom):
        AW.atomic_write(tmp_path / "new.bin", _fails_after_writing(b"partial", Boom()))
    assert list(tmp_path.iterdir()) == []


def test_the_temporary_is_beside_the_target_and_matches_the_leftover_pattern(tmp_path):
    seen: list[Path] = []

    def write(tmp: Path) -> None:
        seen.append(tmp)
        tmp.write_text("x")
        assert not (tmp_path / "a.txt").exists()  # the target appears only by the rename

    AW.atomic_write(tmp_path / "a.txt", write)
    assert seen[0].parent == tmp_path and seen[0].match(AW.temporary_glob("a.txt"))
    assert (tmp_path / "a.txt").read_text() == "x"


def test_each_writer_round_trips_and_replaces(tmp_path):
    AW.atomic_write(tmp_path / "b", lambda tmp: tmp.write_bytes(b"old"))
    AW.atomic_write(tmp_path / "b", lambda tmp: tmp.write_bytes(b"\x00\x01"))
    assert (tmp_path / "b").read_bytes() == b"\x00\x01"

    AW.write_text(tmp_path / "t.yaml", "a: 1\n")
    assert (tmp_path / "t.yaml").read_text() == "a: 1\n"

    AW.write_json(tmp_path / "j.json", {"b": [1, 2], "a": None}, indent=1, sort_keys=True)
    assert (tmp_path / "j.json").read_text() == json.dumps({"a": None, "b": [1, 2]}, indent=1)

    arrow = pa.table({"event_id": pa.array([3, 1], pa.int64()), "score": pa.array([0.5, 0.25])})
    AW.write_parquet(tmp_path / "p.parquet", arrow, compression="zstd")
    assert pq.read_table(tmp_path / "p.parquet").equals(arrow)

    frame = pd.DataFrame({"arch": ["whale", "din"], "seed": [0, 1]})
    AW.write_parquet(tmp_path / "runs.parquet", frame, index=False)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "runs.parquet"), frame)

    array = np.arange(6, dtype=np.int32).reshape(2, 3)
    def save_npy(tmp):  # through a file object: np.save would append .npy to the temporary name
        with open(tmp, "wb") as f:
            np.save(f, array)

    AW.atomic_write(tmp_path / "h.npy", save_npy)
    np.testing.assert_array_equal(np.load(tmp_path / "h.npy"), array)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b", "h.npy", "j.json", "p.parquet", "runs.parquet",
                                                          "t.yaml"]


def test_a_value_that_cannot_be_serialised_leaves_the_previous_file(tmp_path):
    path = tmp_path / "runs.parquet"
    AW.write_parquet(path, pd.DataFrame({"a": [1]}), index=False)
    with pytest.raises((pa.ArrowException, TypeError, ValueError)):
        AW.write_parquet(path, pd.DataFrame({"a": [object()]}), index=False)
    with pytest.raises(TypeError):
        AW.write_json(path, {"a": object()})
    assert pd.read_parquet(path)["a"].tolist() == [1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs.parquet"]
