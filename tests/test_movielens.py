"""MovieLens-100k mapped onto the canonical exposure table (skips where the internal copy is absent)."""
from __future__ import annotations

import numpy as np
import pandas as pd

import protocols
from protocols.schema import split_event_id


def test_movielens_counts_and_mapping(ml100k_dir):
    log = protocols.SOURCES.get("movielens100k")(ml100k_dir) if "movielens100k" in protocols.source_names() else None
    assert log is not None
    assert len(log) == 100_000
    assert len(np.unique(log["user_id"])) == 943
    assert len(np.unique(log["video_id"])) == 1_682

    raw = pd.read_csv(ml100k_dir / "u.data", sep="\t", names=["user", "item", "rating", "ts"])
    assert log["long_view"].sum() == (raw["rating"] >= 4).sum()
    assert log["effective_view"].sum() == (raw["rating"] >= 3).sum()
    assert len(np.unique(log["request_id"])) == raw.groupby(["user", "ts"]).ngroups
    # each row maps back to a rating: (user, item, ts) triples are identical as sets
    mine = set(zip((log["user_id"] + 1).tolist(), (log["video_id"] + 1).tolist(),
                   (log["request_timestamp"] // 1000).tolist()))
    assert mine == set(zip(raw["user"], raw["item"], raw["ts"]))
    f, r = split_event_id(log["event_id"])
    np.testing.assert_array_equal(f, log["file_index"])
    assert r.min() == 1 and np.all(np.diff(log["request_timestamp"]) >= 0)
    assert len(log.days) == log["file_index"].max() + 1
