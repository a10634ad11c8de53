"""harness.metrics and evaluate.split_metrics against independent computations: brute-force pairwise
AUC with ties, scikit-learn, a hand-checked GAUC case and closed-form NE."""
from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.metrics import log_loss, roc_auc_score

from harness import evaluate, metrics


def brute_force_auc(y: np.ndarray, s: np.ndarray) -> float:
    """Enumerate every (positive, negative) pair; a tie counts half."""
    pos, neg = s[y == 1], s[y == 0]
    diff = pos[:, None] - neg[None, :]
    return float(((diff > 0).sum() + 0.5 * (diff == 0).sum()) / (pos.size * neg.size))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_auc_equals_brute_force_with_many_ties(seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, 400).astype(np.float64)
    s = rng.integers(0, 12, 400) / 11.0  # only 12 distinct scores: many ties inside and across classes
    assert metrics.auc(y, s) == pytest.approx(brute_force_auc(y, s), abs=1e-9)
    assert metrics.auc(y, s) == pytest.approx(roc_auc_score(y, s), abs=1e-9)


def test_auc_edge_cases():
    y = np.array([0, 1, 0, 1])
    assert metrics.auc(y, np.array([0.1, 0.9, 0.2, 0.8])) == 1.0
    assert metrics.auc(y, np.array([0.9, 0.1, 0.8, 0.2])) == 0.0
    assert metrics.auc(y, np.full(4, 0.3)) == 0.5  # all tied
    assert math.isnan(metrics.auc(np.ones(3), np.array([0.1, 0.2, 0.3])))
    with pytest.raises(ValueError, match="row 1"):
        metrics.auc(np.array([0, 2]), np.array([0.1, 0.2]))


def test_logloss_and_ne_equal_sklearn_and_closed_form():
    rng = np.random.default_rng(3)
    y = rng.integers(0, 2, 1000).astype(np.float64)
    p = rng.uniform(0.01, 0.99, 1000)
    assert metrics.logloss(y, p) == pytest.approx(log_loss(y, p), abs=1e-9)
    rate = y.mean()
    h = -rate * math.log(rate) - (1 - rate) * math.log(1 - rate)
    assert metrics.normalized_entropy(y, p) == pytest.approx(log_loss(y, p) / h, abs=1e-9)
    # predicting the set's own positive rate everywhere has NE exactly 1
    assert metrics.normalized_entropy(y, np.full(y.size, rate)) == pytest.approx(1.0, abs=1e-12)


def test_logloss_saturated_probability_is_finite():
    assert math.isfinite(metrics.logloss(np.array([1.0, 0.0]), np.array([0.0, 1.0])))


def test_gauc_hand_checked():
    # user 7: labels 1,0,0 scores .9,.5,.95 -> pairs (pos .9 vs .5 win, vs .95 lose) -> AUC 1/2, 3 impressions
    # user 8: labels 1,1,0,0 scores .2,.6,.6,.1 -> pos .2: beats .1, loses .6 -> 1; pos .6: tie .6 (1/2), beats .1
    #         -> 1.5; total 2.5 / 4 = 0.625, 4 impressions
    # user 9: only positives -> excluded
    users = np.array([7, 7, 7, 8, 8, 8, 8, 9, 9])
    y = np.array([1, 0, 0, 1, 1, 0, 0, 1, 1])
    s = np.array([0.9, 0.5, 0.95, 0.2, 0.6, 0.6, 0.1, 0.3, 0.4])
    expected = (0.5 * 3 + 0.625 * 4) / 7
    assert metrics.gauc(y, s, users) == pytest.approx(expected, abs=1e-12)
    # shuffling the rows changes nothing
    perm = np.random.default_rng(0).permutation(y.size)
    assert metrics.gauc(y[perm], s[perm], users[perm]) == pytest.approx(expected, abs=1e-12)


def test_gauc_equals_per_user_sklearn_on_random_data():
    rng = np.random.default_rng(5)
    users = rng.integers(0, 30, 600)
    y = rng.integers(0, 2, 600)
    s = rng.integers(0, 20, 600) / 19.0
    num = den = 0.0
    for u in np.unique(users):
        m = users == u
        if 0 < y[m].sum() < m.sum():
            num += roc_auc_score(y[m], s[m]) * m.sum()
            den += m.sum()
    assert metrics.gauc(y, s, users) == pytest.approx(num / den, abs=1e-9)


def test_uauc_is_the_unweighted_mean_of_per_user_sklearn_aucs():
    rng = np.random.default_rng(6)
    users = rng.integers(0, 120, 800)
    y = (rng.random(800) < 0.2).astype(int)
    s = rng.integers(0, 25, 800) / 24.0  # ties
    per_user = [roc_auc_score(y[users == u], s[users == u]) for u in np.unique(users)
                if 0 < y[users == u].sum() < (users == u).sum()]
    assert len(per_user) < len(np.unique(users))  # some users have one label only and are left out
    assert metrics.uauc(y, s, users) == pytest.approx(float(np.mean(per_user)), abs=1e-12)
    assert metrics.uauc(y, s, users) != pytest.approx(metrics.gauc(y, s, users), abs=1e-6)
    assert np.isnan(metrics.uauc(np.ones(4), s[:4], users[:4]))


def test_duration_buckets_boundaries():
    ms = np.array([-1, 0, 1, 14_999, 15_000, 59_999, 60_000, 180_000, 180_001])
    names = [metrics.DURATION_BUCKETS[i] for i in metrics.duration_bucket(ms)]
    assert names == [
        "duration_missing",
        "duration_missing",
        "duration_lt_15s",
        "duration_lt_15s",
        "duration_15_30s",
        "duration_30_60s",
        "duration_60_180s",
        "duration_60_180s",
        "duration_gt_180s",
    ]


def test_split_metrics_groups_and_oracle():
    rng = np.random.default_rng(7)
    n = 500
    cols = {
        "user_id": rng.integers(0, 20, n),
        "video_unseen": rng.integers(0, 2, n).astype(bool),
        "author_unseen": rng.integers(0, 2, n).astype(bool),
        "duration_ms": rng.integers(-1000, 300_000, n),
        "true_p": rng.uniform(0.05, 0.95, n),
    }
    y = (rng.uniform(size=n) < cols["true_p"]).astype(np.float64)
    p = rng.uniform(0.05, 0.95, n)
    event_id = np.arange(n, dtype=np.int64)
    flat, named_groups = evaluate.split_metrics("valid", event_id, y, p, {**cols, "event_id": event_id, "label": y})
    groups = named_groups["valid"]
    assert flat["valid_auc"] == pytest.approx(roc_auc_score(y, p), abs=1e-9)
    assert flat["oracle_valid_auc"] == pytest.approx(roc_auc_score(y, cols["true_p"]), abs=1e-9)
    assert flat["oracle_valid_logloss"] == pytest.approx(log_loss(y, cols["true_p"]), abs=1e-9)
    unseen = cols["video_unseen"]
    assert groups["video_unseen"]["n"] == int(unseen.sum())
    assert groups["video_unseen"]["auc"] == pytest.approx(roc_auc_score(y[unseen], p[unseen]), abs=1e-9)
    assert groups["author_seen"]["logloss"] == pytest.approx(
        log_loss(y[~cols["author_unseen"]], p[~cols["author_unseen"]]), abs=1e-9
    )
    assert sum(groups[b]["n"] for b in metrics.DURATION_BUCKETS) == n
    long = cols["duration_ms"] > 180_000
    assert groups["duration_gt_180s"]["n"] == int(long.sum())
    assert groups["duration_gt_180s"]["auc"] == pytest.approx(roc_auc_score(y[long], p[long]), abs=1e-9)
