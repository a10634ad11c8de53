"""DeLong's paired AUC test: the fast midrank implementation against (1) a brute-force O(m n) computation of
DeLong's structural components, (2) scikit-learn's AUC, and (3) a published worked example.

Published example: the aSAH data (113 patients with aneurysmal subarachnoid haemorrhage; Turck et al. 2010,
Intensive Care Med 36:107) shipped with the R package pROC (Robin et al. 2011, BMC Bioinformatics 12:77).
pROC's own test suite (tests/testthat/test-cov.R, test-var.R, test-roc.test.R) pins DeLong values for it:
var(AUC_wfns) = 0.00146991470882363, var(AUC_s100b) = 0.00266868245717244,
cov(AUC_s100b, AUC_wfns) = 0.00119615567376754, and roc.test(wfns, s100b) Z = 2.20898359144091,
p = 0.0271757822291882; AUC_wfns = 0.823678861788618 (AUC_s100b = 0.731368563685637 is pROC's aSAH example).
"""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from sklearn.metrics import roc_auc_score

from analysis.compare.delong_seeds import delong_covariance, delong_paired

ASAH_POOR = (  # 1 = poor outcome (the case class in pROC), one character per patient
    "000011010010110010111010000000001001101100000000011000100"
    "01010011101101111000110100000010000000000001111110001000"
)
ASAH_WFNS = (  # WFNS grade 1-5, one character per patient
    "111132541252551252252111121211342145414255112411255212512"
    "22151125214524414121421232421451154221113125225552445111"
)
ASAH_S100B = (  # S100B (ug/L), space separated
    "0.13 0.14 0.1 0.04 0.13 0.1 0.47 0.16 0.18 0.1 0.12 0.1 0.44 0.71 0.04 0.08 0.49 0.04 0.07 "
    "0.33 0.09 0.09 0.07 0.11 0.07 0.17 0.07 0.11 0.13 0.19 0.05 0.16 0.41 0.14 0.34 0.35 0.48 0.09 "
    "0.96 0.25 0.5 0.46 0.16 0.07 0.43 0.45 0.11 0.08 0.09 0.86 0.52 0.08 0.06 0.13 2.07 0.1 0.14 "
    "0.15 0.07 0.06 0.77 0.05 0.09 0.3 0.03 0.09 0.04 0.23 0.7 0.09 0.27 0.71 0.08 0.26 0.08 0.16 "
    "0.09 0.13 0.1 0.08 0.11 0.33 0.11 0.28 0.07 0.1 0.32 0.22 0.07 0.05 0.24 0.38 0.1 0.15 0.08 "
    "0.14 0.1 0.07 0.04 0.19 0.56 0.14 0.58 0.32 0.82 0.74 0.15 0.47 0.17 0.44 0.15 0.5 0.48 "
)


def _asah() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    poor = np.array([int(c) for c in ASAH_POOR])
    wfns = np.array([float(c) for c in ASAH_WFNS])
    s100b = np.array(ASAH_S100B.split(), dtype=np.float64)
    assert len(poor) == len(wfns) == len(s100b) == 113 and poor.sum() == 41
    return poor, wfns, s100b


def brute_force_delong(labels: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """DeLong et al. (1988) directly: psi over every (positive, negative) pair, then the component covariances."""
    pos, neg = scores[:, labels == 1], scores[:, labels == 0]  # [K, m], [K, n]
    psi = (pos[:, :, None] > neg[:, None, :]) + 0.5 * (pos[:, :, None] == neg[:, None, :])  # [K, m, n]
    v10, v01 = psi.mean(axis=2), psi.mean(axis=1)  # [K, m], [K, n]
    auc = psi.mean(axis=(1, 2))
    k, m, n = len(scores), pos.shape[1], neg.shape[1]
    s10 = np.array([[np.sum((v10[r] - auc[r]) * (v10[s] - auc[s])) / (m - 1) for s in range(k)] for r in range(k)])
    s01 = np.array([[np.sum((v01[r] - auc[r]) * (v01[s] - auc[s])) / (n - 1) for s in range(k)] for r in range(k)])
    return auc, s10 / m + s01 / n


def test_matches_published_proc_values_on_asah():
    poor, wfns, s100b = _asah()
    res = delong_paired(poor, wfns, s100b)
    assert res.auc_a == pytest.approx(0.823678861788618, rel=1e-12)
    assert res.auc_b == pytest.approx(0.731368563685637, rel=1e-12)
    assert res.var_a == pytest.approx(0.00146991470882363, rel=1e-10)
    assert res.var_b == pytest.approx(0.00266868245717244, rel=1e-10)
    assert res.cov_ab == pytest.approx(0.00119615567376754, rel=1e-10)
    assert res.z == pytest.approx(2.20898359144091, rel=1e-10)
    assert res.p_value == pytest.approx(0.0271757822291882, rel=1e-10)


@pytest.mark.parametrize("ties", [False, True])
def test_equals_brute_force_structural_components(ties):
    rng = np.random.default_rng(7)
    labels = (rng.random(90) < 0.35).astype(int)
    a = labels * 0.8 + rng.normal(0, 1, 90)
    b = 0.6 * a + rng.normal(0, 0.8, 90)
    if ties:  # coarse scores create many ties within and across classes
        a, b = np.round(a), np.round(b * 2) / 2
    auc, cov = delong_covariance(labels, np.stack([a, b]))
    auc_ref, cov_ref = brute_force_delong(labels, np.stack([a, b]))
    np.testing.assert_allclose(auc, auc_ref, rtol=1e-12)
    np.testing.assert_allclose(cov, cov_ref, rtol=1e-10, atol=1e-16)
    res = delong_paired(labels, a, b)
    z_ref = (auc_ref[0] - auc_ref[1]) / np.sqrt(cov_ref[0, 0] + cov_ref[1, 1] - 2 * cov_ref[0, 1])
    assert res.z == pytest.approx(z_ref, rel=1e-10)
    assert res.p_value == pytest.approx(2 * stats.norm.sf(abs(z_ref)), rel=1e-10)
    assert res.auc_a == pytest.approx(roc_auc_score(labels, a), rel=1e-12)
    assert res.auc_b == pytest.approx(roc_auc_score(labels, b), rel=1e-12)


def test_identical_scores_give_no_difference_and_swapping_flips_z():
    poor, wfns, s100b = _asah()
    same = delong_paired(poor, wfns, wfns)
    assert same.z == 0.0 and same.p_value == 1.0
    assert delong_paired(poor, s100b, wfns).z == pytest.approx(-delong_paired(poor, wfns, s100b).z)


def test_one_class_is_an_error():
    with pytest.raises(ValueError, match="both classes"):
        delong_paired(np.ones(5), np.arange(5.0), np.arange(5.0))
