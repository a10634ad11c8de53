"""Evaluation metrics of a full prediction set (AUC, LogLoss, NE, GAUC, UAUC; registered with their direction and
label in harness/metric_registry.py) and the masks of the reported groups, as docs/training.md ("Metrics") defines
them. Undefined values are NaN; numpy arrays in, float64, vectorised (one sort per call).
"""
from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

#: Probabilities are clipped to [EPS, 1 - EPS] before taking logs, so a saturated score costs a
#: large but finite loss.
EPS = 1e-15

#: Duration bucket edges in seconds: [0, 15), [15, 30), [30, 60), [60, 180], > 180; duration <= 0 is
#: "missing" (the same rule as the numeric features).
DURATION_EDGES_S: tuple[float, ...] = (15.0, 30.0, 60.0, 180.0)
DURATION_BUCKETS: tuple[str, ...] = (
    "duration_missing",
    "duration_lt_15s",
    "duration_15_30s",
    "duration_30_60s",
    "duration_60_180s",
    "duration_gt_180s",
)


def as_labels(labels: np.ndarray) -> np.ndarray:
    """`labels` as a flat float64 array; ValueError naming the first row that is not 0 or 1."""
    y = np.asarray(labels, dtype=np.float64).ravel()
    if y.size and not np.all((y == 0.0) | (y == 1.0)):
        bad = np.flatnonzero((y != 0.0) & (y != 1.0))[0]
        raise ValueError(f"labels must be 0 or 1; row {bad} has {y[bad]!r}")
    return y


def _grouped_auc(
    labels: np.ndarray, scores: np.ndarray, groups: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """AUC within each group (ties count half). Returns (auc [G], positives [G], size [G]);
    auc is NaN for groups lacking a positive or a negative."""
    y = as_labels(labels)
    s = np.asarray(scores, dtype=np.float64).ravel()
    g = np.asarray(groups).ravel()
    if not (y.size == s.size == g.size):
        raise ValueError(f"length mismatch: labels {y.size}, scores {s.size}, groups {g.size}")
    if np.isnan(s).any():
        raise ValueError(f"scores contain NaN at row {int(np.flatnonzero(np.isnan(s))[0])}")
    if y.size == 0:
        return np.empty(0), np.empty(0), np.empty(0)
    order = np.lexsort((s, g))  # by group, then ascending score
    y, s, g = y[order], s[order], g[order]
    n = y.size
    new_group = np.r_[True, g[1:] != g[:-1]]
    group_id = np.cumsum(new_group) - 1
    rank_in_group = np.arange(1, n + 1, dtype=np.float64) - np.flatnonzero(new_group)[group_id]  # 1-based
    new_tie_run = new_group | np.r_[True, s[1:] != s[:-1]]
    run_id = np.cumsum(new_tie_run) - 1
    avg_rank = (np.bincount(run_id, weights=rank_in_group) / np.bincount(run_id))[run_id]
    size = np.bincount(group_id).astype(np.float64)
    pos = np.bincount(group_id, weights=y)
    neg = size - pos
    pos_rank_sum = np.bincount(group_id, weights=avg_rank * y)
    with np.errstate(invalid="ignore", divide="ignore"):
        auc_g = (pos_rank_sum - pos * (pos + 1.0) / 2.0) / (pos * neg)
    auc_g[(pos == 0) | (neg == 0)] = np.nan
    return auc_g, pos, size


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """ROC AUC with ties counted as half a correct pair; NaN when one class is absent."""
    y = np.asarray(labels)
    auc_g, _, _ = _grouped_auc(y, scores, np.zeros(y.size, dtype=np.int8))
    return float(auc_g[0]) if auc_g.size else math.nan


def gauc(labels: np.ndarray, scores: np.ndarray, users: np.ndarray) -> float:
    """Impression-weighted mean of per-user AUC over users with both a positive and a negative."""
    auc_g, _, size = _grouped_auc(labels, scores, users)
    valid = ~np.isnan(auc_g)
    return float(np.sum(auc_g[valid] * size[valid]) / np.sum(size[valid])) if valid.any() else math.nan


def uauc(labels: np.ndarray, scores: np.ndarray, users: np.ndarray) -> float:
    """Unweighted mean of per-user AUC over users with both a positive and a negative."""
    auc_g, _, _ = _grouped_auc(labels, scores, users)
    valid = ~np.isnan(auc_g)
    return float(auc_g[valid].mean()) if valid.any() else math.nan


def logloss(labels: np.ndarray, probs: np.ndarray) -> float:
    """Mean binary cross-entropy of probabilities (clipped to [EPS, 1 - EPS])."""
    y = as_labels(labels)
    p = np.clip(np.asarray(probs, dtype=np.float64).ravel(), EPS, 1.0 - EPS)
    if y.size != p.size:
        raise ValueError(f"length mismatch: labels {y.size}, probabilities {p.size}")
    if y.size == 0:
        return math.nan
    return float(-np.mean(y * np.log(p) + (1.0 - y) * np.log1p(-p)))


def normalized_entropy(labels: np.ndarray, probs: np.ndarray) -> float:
    """LogLoss / H(positive rate p of this same set), H(p) = -p log p - (1 - p) log(1 - p); NaN when p is 0 or 1
    (no reference entropy)."""
    y = as_labels(labels)
    if y.size == 0:
        return math.nan
    rate = float(np.mean(y))
    entropy = -rate * math.log(rate) - (1.0 - rate) * math.log1p(-rate) if 0.0 < rate < 1.0 else math.nan
    return logloss(y, probs) / entropy


def duration_bucket(duration_ms: np.ndarray) -> np.ndarray:
    """Index into DURATION_BUCKETS for each duration (ms); <= 0 is missing, > 180 s the last bucket."""
    d_s = np.asarray(duration_ms, dtype=np.float64) / 1000.0
    bucket = 1 + np.digitize(d_s, DURATION_EDGES_S)  # [a, b) intervals
    # exactly 180 s belongs to the 60-180 s bucket, so the last bucket is strictly > 180 s
    bucket = np.where(d_s == DURATION_EDGES_S[-1], len(DURATION_EDGES_S), bucket)
    return np.where(d_s <= 0.0, 0, bucket)


def group_masks(columns: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Boolean row masks of every reported group, from the targets' columns."""
    video_unseen = np.asarray(columns["video_unseen"]).astype(bool)
    author_unseen = np.asarray(columns["author_unseen"]).astype(bool)
    masks = {
        "video_seen": ~video_unseen,
        "video_unseen": video_unseen,
        "author_seen": ~author_unseen,
        "author_unseen": author_unseen,
    }
    bucket = duration_bucket(columns["duration_ms"])
    return masks | {name: bucket == i for i, name in enumerate(DURATION_BUCKETS)}
