"""DeLong's test of two correlated AUCs on the same test events (DeLong, DeLong & Clarke-Pearson 1988) by Sun & Xu's
(2014) O(n log n) midrank algorithm; ties count 1/2 (docs/analysis.md, *The report, in order*)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats


@dataclass(frozen=True)
class DeLongResult:
    """Paired comparison of AUC_a and AUC_b on the same events (two-sided test of equal AUC)."""

    auc_a: float
    auc_b: float
    var_a: float
    var_b: float
    cov_ab: float
    z: float
    p_value: float
    n_pos: int
    n_neg: int

    @property
    def delta(self) -> float:
        return self.auc_a - self.auc_b

    @property
    def se_delta(self) -> float:
        return float(np.sqrt(max(self.var_a + self.var_b - 2.0 * self.cov_ab, 0.0)))


def structural_components(labels: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """AUCs [K], V10 = (Tz - Tx) / n [K, m] and V01 = 1 - (Tz - Ty) / m [K, n] of K score rows [K, N] against
    binary `labels` [N] (Tx, Ty, Tz: midranks within positives, within negatives, over all events)."""
    labels = np.asarray(labels).astype(bool)
    scores = np.atleast_2d(np.asarray(scores, dtype=np.float64))  # [K, N]
    if scores.shape[1] != labels.shape[0]:
        raise ValueError(f"scores have {scores.shape[1]} events, labels {labels.shape[0]}")
    pos, neg = scores[:, labels], scores[:, ~labels]  # [K, m], [K, n]
    m, n = pos.shape[1], neg.shape[1]
    if m == 0 or n == 0:
        raise ValueError(f"DeLong needs both classes; got {m} positives and {n} negatives")
    tx = stats.rankdata(pos, axis=1)  # midranks within positives
    ty = stats.rankdata(neg, axis=1)  # midranks within negatives
    tz = stats.rankdata(np.concatenate([pos, neg], axis=1), axis=1)  # [K, m + n]
    tz_pos, tz_neg = tz[:, :m], tz[:, m:]
    auc = (tz_pos.sum(axis=1) - m * (m + 1) / 2.0) / (m * n)
    v10 = (tz_pos - tx) / n
    v01 = 1.0 - (tz_neg - ty) / m
    return auc, v10, v01


def delong_covariance(labels: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """AUCs [K] and their DeLong covariance matrix [K, K] for score rows [K, N]."""
    auc, v10, v01 = structural_components(labels, scores)
    m, n = v10.shape[1], v01.shape[1]
    s10 = np.atleast_2d(np.cov(v10)) if m > 1 else np.zeros((len(auc), len(auc)))
    s01 = np.atleast_2d(np.cov(v01)) if n > 1 else np.zeros((len(auc), len(auc)))
    return auc, s10 / m + s01 / n


def delong_paired(labels: np.ndarray, scores_a: np.ndarray, scores_b: np.ndarray) -> DeLongResult:
    """DeLong's two-sided test of AUC_a == AUC_b for two score vectors on the same labelled events."""
    labels = np.asarray(labels).astype(bool)
    auc, cov = delong_covariance(labels, np.stack([scores_a, scores_b]))
    var_delta = cov[0, 0] + cov[1, 1] - 2.0 * cov[0, 1]
    delta = auc[0] - auc[1]
    if var_delta <= 0.0:  # identical rankings: no evidence of a difference
        z, p = 0.0, 1.0
    else:
        z = float(delta / np.sqrt(var_delta))
        p = float(2.0 * stats.norm.sf(abs(z)))
    return DeLongResult(
        auc_a=float(auc[0]), auc_b=float(auc[1]), var_a=float(cov[0, 0]), var_b=float(cov[1, 1]),
        cov_ab=float(cov[0, 1]), z=z, p_value=p, n_pos=int(labels.sum()), n_neg=int((~labels).sum()),
    )
