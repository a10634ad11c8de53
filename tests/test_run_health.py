"""harness.run_health against constructed runs whose health is known, and the null AUC SE against a
permutation distribution."""
from __future__ import annotations

import math

import numpy as np
import pytest

from harness import run_health as H
from harness.metrics import auc

HEALTHY = {"train_loss": 0.45, "weights_finite": True, "valid_ne": 0.90, "valid_auc": 0.72,
           "valid_n": 10_000, "valid_positives": 3_000, "valid_pred_std": 0.08}


def _trend(fall: float, low: float) -> H.Trend:
    return H.Trend(fall, low, fall + (fall - low), "valid/ne", 5, 200, 300)


def test_a_run_that_learned_is_ok_and_every_criterion_checked():
    h = H.classify(HEALTHY, _trend(0.004, -0.001))
    assert h == H.Health(H.OK, (), ())


@pytest.mark.parametrize("change, status, criterion", [
    ({"train_loss": math.nan}, H.DIVERGED, "nonfinite_loss"),
    ({"train_loss": math.inf}, H.DIVERGED, "nonfinite_loss"),
    ({"weights_finite": False}, H.DIVERGED, "nonfinite_weights"),
    ({"valid_ne": 3.2}, H.DIVERGED, "loss_blowup"),
    ({"valid_ne": math.nan}, H.DIVERGED, "loss_blowup"),
    ({"valid_pred_std": 0.0, "valid_auc": 0.70}, H.COLLAPSED, "constant_predictions"),
    ({"valid_auc": 0.5000, "valid_ne": 0.95}, H.COLLAPSED, "auc_noise"),
    ({"valid_ne": 1.002}, H.UNDERTRAINED, "ne_threshold"),
    ({"valid_ne": 0.99}, H.UNDERTRAINED, "ne_threshold"),
])
def test_each_criterion_alone_gives_its_status(change, status, criterion):
    h = H.classify({**HEALTHY, **change})
    assert h.status == status
    assert [r.split(":")[0] for r in h.reasons] == [criterion]


def test_still_falling_fast_at_the_end_is_undertrained():
    h = H.classify(HEALTHY, _trend(0.03, 0.01))  # 3 % per tenth, told apart from noise
    assert h.status == H.UNDERTRAINED
    assert h.reasons == ("still_falling: valid/ne falling 3.0% per tenth of the run over steps 200-300 "
                         "(90 % interval 1.0% to 5.0%; threshold 2%)",)
    assert H.classify(HEALTHY, _trend(0.03, -0.01)).status == H.OK  # as fast, but within noise of flat
    assert H.classify(HEALTHY, _trend(0.01, 0.005)).status == H.OK  # falling, slowly
    assert H.classify(HEALTHY, _trend(-0.03, -0.05)).status == H.OK  # rising: overfitting, not undertrained


def test_diverged_wins_over_collapsed_and_collapsed_over_undertrained():
    # the ml100k HELIX seed 0 pattern: constant predictions, NE just above 1
    h = H.classify({**HEALTHY, "valid_auc": 0.4994, "valid_ne": 1.002, "valid_pred_std": 2e-5})
    assert h.status == H.COLLAPSED and len(h.reasons) == 2
    assert H.classify({**HEALTHY, "train_loss": math.nan, "valid_auc": 0.5}).status == H.DIVERGED


def test_auc_noise_band_scales_with_the_validation_set():
    # AUC 0.52 is noise on 500 targets, a signal on 100,000
    assert H.classify({**HEALTHY, "valid_auc": 0.52, "valid_n": 500, "valid_positives": 150}).status == H.COLLAPSED
    assert H.classify({**HEALTHY, "valid_auc": 0.52, "valid_n": 100_000, "valid_positives": 30_000}).status == H.OK


def test_missing_columns_are_named_unchecked_not_passed():
    old = {"train_loss": 0.45, "valid_ne": 0.9, "valid_auc": 0.7}  # a runs.parquet predating the health columns
    h = H.classify(old)
    assert h.status == H.OK
    assert set(h.unchecked) == {"nonfinite_weights", "constant_predictions", "auc_noise", "still_falling"}
    assert H.classify({**old, "valid_pred_std": None}).unchecked == h.unchecked  # a null cell is missing too
    assert H.classify({}).unchecked == tuple(H.CRITERIA)


def test_null_auc_se_matches_the_permutation_distribution():
    rng = np.random.default_rng(0)
    labels = (rng.random(400) < 0.25).astype(np.float64)
    scores = rng.random(400)
    null = [auc(rng.permutation(labels), scores) for _ in range(4000)]
    pos = labels.sum()
    assert H.null_auc_se(pos, len(labels) - pos) == pytest.approx(np.std(null), rel=0.05)


def test_fields_are_flat_scalars():
    f = H.classify({**HEALTHY, "valid_ne": 1.01}).fields()
    assert f == {"health_status": "undertrained", "health_reasons": "ne_threshold: valid NE 1.0100 >= 0.99",
                 "health_unchecked": "still_falling"}
    assert H.trend_fields(_trend(0.03, 0.01)) == {"loss_fall": 0.03, "loss_fall_low": 0.01,
                                                  "loss_fall_curve": "valid/ne steps 200-300, 5 points"}


# --- recorded by train_run -------------------------------------------------------------------------------

from tests.fixtures_data import tiny_artifact, tiny_log  # noqa: E402,F401


def _train(tiny_artifact, out, **train):
    from harness.config import load_run_config
    from harness.run_folder import read_metrics
    from harness.train import train_run

    cfg = load_run_config(None, {"train": {"device": "cpu", **train}}, arch="deepfm", data=str(tiny_artifact), seed=0)
    train_run(cfg, out, progress=False)
    return read_metrics(out)


def test_train_run_records_health_with_the_scores_it_wrote(tiny_artifact, tmp_path):
    import pyarrow.parquet as pq

    m = _train(tiny_artifact, tmp_path / "run")
    scores = pq.read_table(tmp_path / "run" / "predictions_valid.parquet")["score"].to_numpy()
    assert m["valid_pred_std"] == pytest.approx(float(np.std(scores)), rel=1e-12)
    assert m["weights_finite"] is True
    assert m["health_status"] == H.classify(m).status
    assert m["health_unchecked"] == "still_falling"  # 5 steps, a curve point every 10: nothing to measure
    assert m["loss_fall_curve"] == "not checked: curve too short (0 training-loss points)"
    assert m["loss_fall"] is None


def test_a_run_whose_weights_blow_up_is_recorded_diverged(tiny_artifact, tmp_path):
    m = _train(tiny_artifact, tmp_path / "run", lr=1e30, grad_clip=0.0)
    assert m["health_status"] == H.DIVERGED
    assert m["weights_finite"] is False and m["valid_auc"] is None and m["valid_n"] == 300
    assert "nonfinite_weights" in m["health_reasons"]
