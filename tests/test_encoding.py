"""Vocabularies fit on training inputs only, UNK for unseen ids, numeric features from training stats."""
from __future__ import annotations

import datetime as dt
import math
from zoneinfo import ZoneInfo

import numpy as np
import pytest
from tiny_logs import random_log, reference_availability, reference_history

from protocols.artifact import PreparedDataset
from protocols.encoding import (
    NumericStats,
    encode,
    encode_feedback,
    fit_numeric_stats,
    fit_vocabulary,
    numeric_features,
)
from protocols.prepare import PrepareConfig, prepare_log
from protocols.schema import CAT_FIELDS, HIST_CAT_FIELDS, NUM_FEATURES, PAD, UNK

DAYS_37 = 37 * 86_400_000


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    # videos drawn from a growing catalogue, so valid/test hold ids never seen in training
    log = random_log(11, n_users=12, n_requests=900, span_ms=DAYS_37, grid_ms=60_000, n_videos=400)
    day = (log["request_timestamp"] - log["request_timestamp"].min()) // 86_400_000
    log.columns["video_id"] = log["video_id"] + day * 20
    log.columns["author_id"] = log["video_id"] // 3 + 1000
    cfg = PrepareConfig.of(source="synthetic", root="unused", n_train=300, n_valid=60, n_test=80, history_len=8,
                        out=str(tmp_path_factory.mktemp("enc")))
    return log, PreparedDataset.open(prepare_log(log, cfg))


def test_encode_known_unseen_and_feedback():
    vocab = fit_vocabulary(np.array([50, 7, 7, 3, 900]))
    assert vocab.tolist() == [3, 7, 50, 900]
    assert encode(np.array([3, 7, 50, 900, 4, -1, 10**12]), vocab).tolist() == [2, 3, 4, 5, UNK, UNK, UNK]
    assert encode(np.array([1, 2]), fit_vocabulary(np.array([], dtype=np.int64))).tolist() == [UNK, UNK]
    assert encode_feedback(np.array([0, 1, 1])).tolist() == [2, 3, 3]


def test_vocabularies_come_from_training_inputs_only(prepared):
    log, ds = prepared
    train_rows = ds.targets("train").column("row").to_numpy()
    event_row = {int(e): i for i, e in enumerate(log["event_id"])}
    # brute force: training targets plus every event of their legal histories
    item_rows = set(train_rows.tolist())
    avail = reference_availability(log, 60_000)
    for r in train_rows:
        item_rows |= {event_row[e] for e in reference_history(log, int(r), 60_000, 8, avail)}
    item_rows = np.array(sorted(item_rows))
    for f in CAT_FIELDS:
        fit_on = item_rows if f in HIST_CAT_FIELDS else train_rows
        seen = set(log[f][fit_on].tolist())
        assert ds.spec.vocab_sizes[f] == len(seen) + 2, f
        for split in ("train", "valid", "test"):
            rows = ds.targets(split).column("row").to_numpy()
            codes = np.load(ds.path / f"{split}_cat.npy")[:, CAT_FIELDS.index(f)]
            known = np.array([v in seen for v in log[f][rows]])
            assert np.all((codes >= 2) == known), (f, split)
            assert np.all(codes[~known] == UNK)
    # the fixture is built so that the check above is not vacuous: unseen test videos exist
    test_codes = np.load(ds.path / "test_cat.npy")[:, CAT_FIELDS.index("video_id")]
    assert (test_codes == UNK).mean() > 0.3
    assert ds.targets("test").column("video_unseen").to_numpy().tolist() == (test_codes == UNK).tolist()


def test_history_items_use_the_same_vocabulary(prepared):
    log, ds = prepared
    vocab = np.load(ds.path / "vocab" / "video_id.npy")
    batch = next(ds.batches("test", 80, seed=0, id_mask_prob=0.0))
    codes = batch["hist_cat"][..., 0].numpy()
    mask = batch["hist_mask"].numpy()
    assert np.all(codes[~mask] == PAD) and np.all(codes[mask] >= UNK)
    ts = batch["hist_ts"].numpy()
    rows_of_ts = {}
    for i in range(len(log)):
        rows_of_ts.setdefault(int(log["request_timestamp"][i]), set()).add(int(log["video_id"][i]))
    known = codes[mask] >= 2
    raw = vocab[codes[mask][known] - 2]
    assert all(v in rows_of_ts[t] for v, t in zip(raw, ts[mask][known]))


def _reference_numeric(duration, upload, ts, train_mask):
    """Plain-Python reference of the two log features and their training statistics."""
    def log_dur(d):
        return math.log1p(d / 1000) if d > 0 else None

    def log_age(u, t):
        days = (t / 1000 - u) / 86_400
        return math.log1p(days) if u > 0 and days >= 0 else None

    def moments(xs):
        xs = [x for x in xs if x is not None]
        mean = sum(xs) / len(xs)
        return mean, math.sqrt(sum((x - mean) ** 2 for x in xs) / len(xs))

    d = [log_dur(x) for x in duration]
    a = [log_age(u, t) for u, t in zip(upload, ts)]
    return d, a, moments([x for x, m in zip(d, train_mask) if m]), moments([x for x, m in zip(a, train_mask) if m])


def test_numeric_statistics_from_training_targets_only(prepared):
    log, ds = prepared
    train_rows = ds.targets("train").column("row").to_numpy()
    train_mask = np.zeros(len(log), dtype=bool)
    train_mask[train_rows] = True
    d, a, (dm, ds_), (am, as_) = _reference_numeric(log["duration"], log["upload_timestamp"],
                                                    log["request_timestamp"], train_mask)
    st = ds.manifest["numeric_stats"]
    assert st["log_duration_mean"] == pytest.approx(dm) and st["log_duration_std"] == pytest.approx(ds_)
    assert st["log_video_age_mean"] == pytest.approx(am) and st["log_video_age_std"] == pytest.approx(as_)
    # the statistics would differ if valid/test targets had been used
    all_mean = np.mean([x for x in d if x is not None])
    assert all_mean != pytest.approx(dm, abs=1e-9)
    tz = ZoneInfo("Asia/Shanghai")
    for split in ("valid", "test"):
        rows = ds.targets(split).column("row").to_numpy()
        num = np.load(ds.path / f"{split}_num.npy")
        for k, r in enumerate(rows):
            when = dt.datetime.fromtimestamp(int(log["request_timestamp"][r]) / 1000, tz=tz)
            expect = [
                ((d[r] if d[r] is not None else dm) - dm) / ds_, float(d[r] is None),
                math.sin(2 * math.pi * when.hour / 24), math.cos(2 * math.pi * when.hour / 24),
                math.sin(2 * math.pi * when.weekday() / 7), math.cos(2 * math.pi * when.weekday() / 7),
                ((a[r] if a[r] is not None else am) - am) / as_, float(a[r] is None),
            ]
            assert num[k] == pytest.approx(np.array(expect, dtype=np.float32), abs=1e-5)


def test_zero_std_only_centres():
    duration = np.array([5000, 5000, 0])
    upload = np.array([0, 0, 0])  # every age missing
    ts = np.full(3, 1_707_000_000_000)
    stats = fit_numeric_stats(duration, upload, ts)
    assert stats == NumericStats(math.log1p(5.0), 0.0, 0.0, 0.0)
    num = numeric_features(np.array([6000, 0]), np.array([0, 0]), ts[:2], stats)
    col = {f: i for i, f in enumerate(NUM_FEATURES)}
    assert num[0, col["log_duration"]] == pytest.approx(math.log1p(6.0) - math.log1p(5.0))  # centred, not scaled
    assert num[1, col["log_duration"]] == 0.0 and num[1, col["duration_missing"]] == 1.0
    assert np.all(num[:, col["age_missing"]] == 1.0) and np.all(num[:, col["log_video_age"]] == 0.0)
