"""harness.run_health.trend_of and the still-falling health check: the fall per tenth of the run against closed forms
(a straight line exactly, an exponential decay through its derivative), verdicts on noisy curves of known
decay (fixed seeds), the false-alarm rate on flat curves by simulation, the choice of curve; and end to end,
a tiny real run's recorded fall recomputed from its event files by brute force."""
from __future__ import annotations

import math

import numpy as np
import pytest

from harness import run_health as H
from harness.run_health import MIN_POINTS, TAIL, TRAIN_CURVE, VALID_CURVE, Trend, tail_fall, trend_of

HEALTHY = {"train_loss": 0.45, "weights_finite": True, "valid_ne": 0.90, "valid_auc": 0.72,
           "valid_n": 10_000, "valid_positives": 3_000, "valid_pred_std": 0.08}
T, EVERY = 300, 10  # a run of 300 steps logged every 10
STEPS = np.arange(EVERY, T + 1, EVERY)


def _exp(l_inf: float, a: float, tau: float) -> np.ndarray:
    return l_inf + a * np.exp(-STEPS / tau)


def _exp_fall_at(t: float, l_inf: float, a: float, tau: float, level_at: float | None = None) -> float:
    """Closed form: -L'(t) * 0.1 T / L(level_at) of L = l_inf + a exp(-t / tau) (level at `t` by default)."""
    u = t if level_at is None else level_at
    return (a / tau) * math.exp(-t / tau) * 0.1 * T / (l_inf + a * math.exp(-u / tau))


def test_a_straight_line_gives_its_fall_exactly():
    a, b = 0.7, 2e-4
    t = tail_fall(list(zip(STEPS, a - b * STEPS)), T)
    window = STEPS[STEPS >= (1 - TAIL) * T]
    assert t is not None and (t.points, t.first_step, t.last_step) == (len(window), window[0], window[-1])
    assert t.fall == pytest.approx(b * 0.1 * T / (a - b * T), rel=1e-9)
    assert t.fall_low == pytest.approx(t.fall, rel=1e-6) and t.fall_high == pytest.approx(t.fall, rel=1e-6)


def test_an_exponential_decay_gives_its_pace_in_the_window():
    # the median pairwise slope of a smooth decay is its derivative near the window's middle
    l_inf, a, tau = 0.5, 0.3, 150.0
    t = tail_fall(list(zip(STEPS, _exp(l_inf, a, tau))), T)
    assert t is not None
    middle = (t.first_step + t.last_step) / 2
    # the level is the fitted loss at the last point
    assert t.fall == pytest.approx(_exp_fall_at(middle, l_inf, a, tau, level_at=T), rel=0.02)
    assert _exp_fall_at(T, l_inf, a, tau) < t.fall < _exp_fall_at(t.first_step, l_inf, a, tau, level_at=T)


@pytest.mark.parametrize("tau, falling", [(250.0, True),  # 5.7 % per tenth at the end: still falling
                                          (30.0, False)])  # 0.01 %: converged
def test_noisy_decay_of_known_pace_gets_its_verdict(tau, falling):
    l_inf, a = 0.2, 0.6
    rng = np.random.default_rng(0)
    noisy = _exp(l_inf, a, tau) * (1 + 0.03 * rng.standard_normal(len(STEPS)))  # 3 % per window
    trend = tail_fall(list(zip(STEPS, noisy)), T)
    assert (_exp_fall_at(T, l_inf, a, tau) > H.FALLING_FAST) is falling  # the closed form agrees with the label
    h = H.classify(HEALTHY, trend)
    assert (h.status == H.UNDERTRAINED) is falling
    assert h.unchecked == ()
    if falling:
        assert h.reasons[0].startswith("still_falling: train/loss falling ")


def test_flat_noisy_curves_are_rarely_marked():
    """A converged run whose windows vary by 5 %: the 90 % interval (one-sided 95 %) and the threshold keep
    the false-alarm rate below 5 %."""
    rng = np.random.default_rng(1)
    marked = sum(H.classify(HEALTHY, tail_fall(list(zip(STEPS, 0.6 * (1 + 0.05 * rng.standard_normal(len(STEPS))))),
                                               T)).status == H.UNDERTRAINED for _ in range(400))
    assert marked / 400 < 0.05


def test_rising_loss_is_not_still_falling():
    t = tail_fall(list(zip(STEPS, 0.5 + 1e-4 * STEPS)), T)
    assert t is not None and t.fall < 0
    assert H.classify(HEALTHY, t).status == H.OK


def test_the_curve_is_chosen_by_what_is_held_out():
    train = list(zip(STEPS.tolist(), (0.7 - 5e-4 * STEPS).tolist()))  # falling fast
    flat_valid = [(100, 0.9), (200, 0.9), (300, 0.9)]
    assert trend_of({}, total_steps=T, epochs=1) == "no curve"
    one_epoch = trend_of({TRAIN_CURVE: train}, total_steps=T, epochs=1)
    assert isinstance(one_epoch, Trend) and one_epoch.source == TRAIN_CURVE
    # validation evaluations, when there are enough of them, win over the training loss
    chosen = trend_of({TRAIN_CURVE: train, VALID_CURVE: flat_valid}, total_steps=T, epochs=1)
    assert isinstance(chosen, Trend) and chosen.source == VALID_CURVE and chosen.fall == 0.0
    # after epoch 1 the training loss is in-sample: no verdict from it
    why = trend_of({TRAIN_CURVE: train, VALID_CURVE: flat_valid[:2]}, total_steps=T, epochs=2)
    assert isinstance(why, str) and "not held out" in why
    assert trend_of({TRAIN_CURVE: train[:MIN_POINTS - 1]}, total_steps=T, epochs=1) == \
        f"curve too short ({MIN_POINTS - 1} training-loss points)"
    # without the recorded step count, the last logged step stands for the run's end
    assert trend_of({TRAIN_CURVE: train}, total_steps=None, epochs=1) == one_epoch


def test_an_unmeasured_curve_is_unchecked_with_its_reason():
    h = H.classify(HEALTHY, "no curve")
    assert h.status == H.OK and h.unchecked == ("still_falling",)
    assert H.trend_fields("no curve") == {"loss_fall": None, "loss_fall_low": None,
                                          "loss_fall_curve": "not checked: no curve"}


# --- end to end ----------------------------------------------------------------------------------------------

from tests.fixtures_data import TINY_SPLITS, tiny_artifact, tiny_log  # noqa: E402,F401


def _brute_force_fall(points: list[tuple[int, float]], total: int) -> float:
    """Theil-Sen by hand: the median of every pairwise slope over the window, level at the last point by the
    median intercept."""
    s = np.array([p[0] for p in points], dtype=np.float64)
    v = np.array([p[1] for p in points], dtype=np.float64)
    k = max(int(np.count_nonzero(s >= (1 - TAIL) * total)), MIN_POINTS)
    s, v = s[-k:], v[-k:]
    i, j = np.triu_indices(k, 1)
    slope = float(np.median((v[j] - v[i]) / (s[j] - s[i])))
    level = float(np.median(v) - slope * np.median(s)) + slope * s[-1]
    return -slope * 0.1 * total / level


def test_a_tiny_run_records_the_fall_of_its_training_loss(tiny_artifact, tmp_path):
    from harness.config import load_run_config
    from harness.run_folder import read_curves
    from harness.train import train_run

    cfg = load_run_config(None, {"train": {"device": "cpu", "num_threads": 1, "batch_size": 32, "log_every_steps": 1}},
                          arch="deepfm", data=str(tiny_artifact), seed=0)
    m = train_run(cfg, tmp_path / "run", progress=False)
    assert m["train_steps"] == math.ceil(TINY_SPLITS["n_train"] / 32)
    curve = read_curves(tmp_path / "run")[TRAIN_CURVE]
    assert m["loss_fall"] == pytest.approx(_brute_force_fall(curve, m["train_steps"]), rel=1e-9)
    assert m["loss_fall_curve"].startswith(f"{TRAIN_CURVE} steps ")
    assert "still_falling" not in m["health_unchecked"]
    falling = m["loss_fall"] > H.FALLING_FAST and m["loss_fall_low"] > 0
    assert (m["health_status"] == H.UNDERTRAINED) is falling
    assert ("still_falling:" in m["health_reasons"]) is falling
