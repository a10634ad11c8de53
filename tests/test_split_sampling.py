"""Time split (Asia/Shanghai, [start, end)) and nested, uniform target sampling."""
from __future__ import annotations

import datetime as dt

import numpy as np
import pytest
from scipy import stats

from core.errors import RecscaleError
from core.typed_config import ConfigError, from_dict
from protocols.prepare import REFERENCE_LOG_SIZE, default_size, resolve_size, sample_rows
from protocols.split import SplitConfig, local_time_parts, split_codes, split_rows

UTC8 = dt.timezone(dt.timedelta(hours=8))  # Shanghai has had no DST since 1991: an independent reference


def _ms(y, m, d, hh=0, mm=0) -> int:
    return int(dt.datetime(y, m, d, hh, mm, tzinfo=UTC8).timestamp() * 1000)


def test_default_boundaries_are_shanghai_midnights():
    assert SplitConfig().boundaries_ms() == (
        _ms(2024, 1, 13), _ms(2024, 2, 8), _ms(2024, 2, 12), _ms(2024, 2, 19))


def test_intervals_are_left_closed_right_open():
    cfg = SplitConfig()
    b = cfg.boundaries_ms()
    ts = np.array([b[0] - 1, b[0], b[1] - 1, b[1], b[2] - 1, b[2], b[3] - 1, b[3]], dtype=np.int64)
    assert split_codes(ts, cfg).tolist() == [-1, 0, 0, 1, 1, 2, 2, -1]


def test_split_matches_plain_datetime_classification():
    rng = np.random.default_rng(0)
    cfg = SplitConfig(train_start="2024-01-20", valid_start="2024-01-25T06:30", test_start="2024-02-01",
                      test_end="2024-02-03")
    ts = rng.integers(_ms(2024, 1, 18), _ms(2024, 2, 5), 3000)
    bounds = [dt.datetime(2024, 1, 20, tzinfo=UTC8), dt.datetime(2024, 1, 25, 6, 30, tzinfo=UTC8),
              dt.datetime(2024, 2, 1, tzinfo=UTC8), dt.datetime(2024, 2, 3, tzinfo=UTC8)]
    expected = []
    for t in ts:
        when = dt.datetime.fromtimestamp(int(t) / 1000, tz=UTC8)
        code = -1
        for i in range(3):
            if bounds[i] <= when < bounds[i + 1]:
                code = i
        expected.append(code)
    assert split_codes(ts, cfg).tolist() == expected
    rows = split_rows(ts, cfg)
    assert sorted(np.concatenate(list(rows.values())).tolist()) == [i for i, c in enumerate(expected) if c >= 0]


def test_local_time_parts_match_datetime():
    rng = np.random.default_rng(1)
    ts = rng.integers(_ms(2024, 1, 1), _ms(2024, 3, 1), 500)
    parts = local_time_parts(ts)
    for i, t in enumerate(ts):
        when = dt.datetime.fromtimestamp(int(t) / 1000, tz=UTC8)
        assert parts.hour[i] == when.hour and parts.weekday[i] == when.weekday()
        assert parts.day[i] == (when.date() - dt.date(1970, 1, 1)).days


def test_split_config_validation():
    with pytest.raises(ConfigError, match="increase strictly"):
        SplitConfig(valid_start="2024-01-01")
    with pytest.raises(ConfigError, match="time zone"):
        SplitConfig(timezone="Mars/Olympus")
    with pytest.raises(ConfigError, match="ISO date"):
        SplitConfig(test_end="next tuesday")
    cfg = from_dict(SplitConfig, {"test_end": "2024-02-18"})
    assert cfg.interval_ms("test") == (_ms(2024, 2, 12), _ms(2024, 2, 18))


def test_sampling_is_without_replacement_and_nested():
    rows = np.sort(np.random.default_rng(2).choice(10_000, 4_000, replace=False))
    small = sample_rows(rows, 300, seed=42, split="train")
    large = sample_rows(rows, 1_000, seed=42, split="train")
    assert len(np.unique(large)) == 1_000 and np.all(np.isin(large, rows))
    assert np.all(np.diff(large) > 0)  # returned ascending
    assert set(small) <= set(large)  # the smaller sample is kept inside the larger one
    for n1, n2 in [(1, 2), (17, 3999), (3999, 4000)]:
        assert set(sample_rows(rows, n1, seed=7, split="valid")) <= set(sample_rows(rows, n2, seed=7, split="valid"))
    assert np.array_equal(sample_rows(rows, 500, seed=42, split="train"),
                          sample_rows(rows, 500, seed=42, split="train"))
    assert not np.array_equal(sample_rows(rows, 500, seed=42, split="train"),
                              sample_rows(rows, 500, seed=43, split="train"))
    assert not np.array_equal(sample_rows(rows, 500, seed=42, split="train"),
                              sample_rows(rows, 500, seed=42, split="test"))
    with pytest.raises(RecscaleError, match="cannot draw"):
        sample_rows(rows, 4_001, seed=42, split="train")


def test_sampling_is_uniform():
    rows = np.arange(40)
    counts = np.zeros(40)
    for seed in range(400):
        counts[sample_rows(rows, 10, seed=seed, split="train")] += 1
    assert counts.sum() == 4000
    assert stats.chisquare(counts).pvalue > 1e-3  # expected 100 per row


def test_default_sizes_scale_with_the_log_and_cap():
    assert default_size("train", REFERENCE_LOG_SIZE, 10**9) == 3_000_000
    assert default_size("valid", REFERENCE_LOG_SIZE, 10**9) == 100_000
    assert default_size("test", REFERENCE_LOG_SIZE, 10**9) == 200_000
    assert default_size("train", REFERENCE_LOG_SIZE // 100, 10**9) == 30_000
    assert default_size("test", 1000, 10**9) == 5  # round(200000 * 1000 / 38245315)
    assert default_size("train", REFERENCE_LOG_SIZE, 1234) == 1234
    assert default_size("valid", 10, 10**9) == 1  # never zero while the split has exposures
    assert resolve_size("train", 50, 10**6, 60) == 50
    with pytest.raises(RecscaleError, match="only 60"):
        resolve_size("train", 61, 10**6, 60)
