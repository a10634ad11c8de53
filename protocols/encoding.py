"""Categorical vocabularies and numeric features, fit on training inputs only; valid and test only apply them.
The codes (PAD 0, UNK 1, known ids from 2), which exposures each vocabulary is fit on, the 8 numeric features
(groups: protocols.schema.NUM_GROUPS) and their standardisation: docs/protocols.md, "Encoding".
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .schema import CAT_FIELDS, FEEDBACK_OFFSET, HIST_CAT_FIELDS, NUM_FEATURES, UNK
from .split import local_time_parts

USER_CONTEXT_FIELDS: tuple[str, ...] = tuple(f for f in CAT_FIELDS if f not in HIST_CAT_FIELDS)
FIRST_KNOWN = 2


#: Largest raw id for which vocabularies use a dense lookup table instead of sorting/searching.
DENSE_ID_LIMIT = 1 << 27


def _dense_range(values: np.ndarray) -> int | None:
    """max + 1 when every value lies in [0, DENSE_ID_LIMIT), else None."""
    if len(values) == 0:
        return None
    lo, hi = int(values.min()), int(values.max())
    return hi + 1 if lo >= 0 and hi < DENSE_ID_LIMIT else None


def fit_vocabulary(values: np.ndarray) -> np.ndarray:
    """Sorted distinct raw ids; raw id vocab[i] encodes to i + 2."""
    values = np.asarray(values, dtype=np.int64)
    size = _dense_range(values)
    if size is None:
        return np.unique(values)
    present = np.zeros(size, dtype=bool)
    present[values] = True
    return np.flatnonzero(present).astype(np.int64)


def encode(values: np.ndarray, vocab: np.ndarray) -> np.ndarray:
    """int32 codes of raw ids: known -> index + 2, unseen -> UNK."""
    values = np.asarray(values, dtype=np.int64)
    if len(vocab) == 0:
        return np.full(values.shape, UNK, dtype=np.int32)
    size = _dense_range(vocab)
    if size is not None:  # lookup table over [0, max vocab id]
        table = np.full(size, UNK, dtype=np.int32)
        table[vocab] = np.arange(FIRST_KNOWN, len(vocab) + FIRST_KNOWN, dtype=np.int32)
        inside = (values >= 0) & (values < size)
        return np.where(inside, table[np.where(inside, values, 0)], UNK).astype(np.int32)
    at = np.clip(np.searchsorted(vocab, values), 0, len(vocab) - 1)
    return np.where(vocab[at] == values, at + FIRST_KNOWN, UNK).astype(np.int32)


def encode_feedback(values: np.ndarray) -> np.ndarray:
    """0/1 -> 2/3 (int8)."""
    return (np.asarray(values) + FEEDBACK_OFFSET).astype(np.int8)


def vocab_size(vocab: np.ndarray) -> int:
    """Rows of the embedding table: PAD + UNK + known ids."""
    return len(vocab) + FIRST_KNOWN


# --------------------------------------------------------------------------------------------------
# numeric features
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class NumericStats:
    """Training-target statistics of the two log features (over valid observations)."""

    log_duration_mean: float
    log_duration_std: float
    log_video_age_mean: float
    log_video_age_std: float


def raw_log_features(duration_ms: np.ndarray, upload_ts_s: np.ndarray, request_ts_ms: np.ndarray):
    """(log_duration, duration_missing, log_video_age, age_missing) before filling; NaN where missing."""
    duration_missing = duration_ms <= 0
    log_duration = np.where(duration_missing, np.nan, np.log1p(np.maximum(duration_ms, 0) / 1000.0))
    age_days = (request_ts_ms / 1000.0 - upload_ts_s) / 86_400.0
    age_missing = (upload_ts_s <= 0) | (age_days < 0)
    log_age = np.where(age_missing, np.nan, np.log1p(np.maximum(age_days, 0.0)))
    return log_duration, duration_missing, log_age, age_missing


def fit_numeric_stats(duration_ms: np.ndarray, upload_ts_s: np.ndarray, request_ts_ms: np.ndarray) -> NumericStats:
    """Means and standard deviations of the valid log features of the training targets."""
    log_duration, _, log_age, _ = raw_log_features(duration_ms, upload_ts_s, request_ts_ms)

    def moments(x: np.ndarray) -> tuple[float, float]:
        x = x[~np.isnan(x)]
        return (float(x.mean()), float(x.std())) if len(x) else (0.0, 0.0)

    return NumericStats(*moments(log_duration), *moments(log_age))


def _standardise(x: np.ndarray, mean: float, std: float) -> np.ndarray:
    filled = np.where(np.isnan(x), mean, x)
    centred = filled - mean
    return centred / std if std > 0 else centred


def numeric_features(
    duration_ms: np.ndarray,
    upload_ts_s: np.ndarray,
    request_ts_ms: np.ndarray,
    stats: NumericStats,
    timezone: str = "Asia/Shanghai",
) -> np.ndarray:
    """float32 [n, 8] in the order of protocols.schema.NUM_FEATURES."""
    log_duration, duration_missing, log_age, age_missing = raw_log_features(duration_ms, upload_ts_s, request_ts_ms)
    parts = local_time_parts(request_ts_ms, timezone)
    hour_angle = 2 * np.pi * parts.hour / 24.0
    weekday_angle = 2 * np.pi * parts.weekday / 7.0
    columns = {
        "log_duration": _standardise(log_duration, stats.log_duration_mean, stats.log_duration_std),
        "duration_missing": duration_missing,
        "hour_sin": np.sin(hour_angle),
        "hour_cos": np.cos(hour_angle),
        "weekday_sin": np.sin(weekday_angle),
        "weekday_cos": np.cos(weekday_angle),
        "log_video_age": _standardise(log_age, stats.log_video_age_mean, stats.log_video_age_std),
        "age_missing": age_missing,
    }
    return np.stack([np.asarray(columns[f], dtype=np.float32) for f in NUM_FEATURES], axis=1)

