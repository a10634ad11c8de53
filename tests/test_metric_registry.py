"""The metric registry (harness/metric_registry.py) is the one declaration of a metric: a toy metric registered
in a fixture, with no other edit, is computed by the harness, accepted by the analysis and sweep configs and by
early stopping, and its direction ("lower is better", the opposite of AUC) is honoured by the ablation verdicts,
the marginal returns and the scaling gain. Values are checked against scikit-learn, not the registry's own code."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import brier_score_loss, log_loss, roc_auc_score

from analysis.config import analysis_config
from analysis.fits.axes import Convention
from analysis.fits.marginal_returns import marginal_returns
from analysis.pipeline import analyze
from core.typed_config import ConfigError, from_dict
from harness import evaluate, metric_registry
from harness.config import TrainConfig
from harness.metric_registry import MetricSpec
from harness.sweep.schema import parse_sweep
from harness.train import _is_better
from tests.test_analyze_cli import make_results
from tests.test_sweep_schema import BASE, _error, _with

BUILTINS = ("auc", "logloss", "ne", "gauc", "uauc")


def _brier(labels: np.ndarray, scores: np.ndarray) -> float:
    """Mean squared error of the probability: a loss (lower is better) the built-ins do not cover."""
    if len(labels) == 0:
        return math.nan
    return float(np.mean((np.asarray(scores, np.float64) - np.asarray(labels, np.float64)) ** 2))


@pytest.fixture
def brier():
    """Registers the toy metric `brier` for one test and removes it afterwards."""
    spec = metric_registry.register(MetricSpec("brier", _brier, higher_is_better=False, label="Brier",
                                               gain="relative_reduction"))
    try:
        yield spec
    finally:
        metric_registry.unregister("brier")
    assert metric_registry.names() == BUILTINS


def _columns(n: int, rng: np.random.Generator, y: np.ndarray) -> dict[str, np.ndarray]:
    return {"user_id": rng.integers(0, 5, n), "video_unseen": rng.random(n) < 0.4,
            "author_unseen": rng.random(n) < 0.3, "duration_ms": rng.integers(0, 300_000, n),
            "true_p": np.clip(0.2 + 0.6 * y + rng.normal(0, 0.15, n), 0.01, 0.99)}


def _split_metrics(y: np.ndarray, p: np.ndarray, columns: dict[str, np.ndarray]) -> tuple[dict, dict]:
    """`evaluate.split_metrics` of the validation split: its flat metrics and its groups."""
    event_id = np.arange(len(y), dtype=np.int64)
    flat, groups = evaluate.split_metrics("valid", event_id, y, p, {**columns, "event_id": event_id, "label": y})
    return flat, groups["valid"]


def test_builtins_are_declared_once():
    assert metric_registry.names() == BUILTINS
    specs = {m.name: m for m in metric_registry.all_metrics()}
    assert {n: s.higher_is_better for n, s in specs.items()} == {"auc": True, "logloss": False, "ne": False,
                                                                 "gauc": True, "uauc": True}
    assert {n: s.label for n, s in specs.items()} == {"auc": "AUC", "logloss": "LogLoss", "ne": "NE", "gauc": "GAUC",
                                                     "uauc": "UAUC"}
    assert {n: s.gain for n, s in specs.items()} == {"auc": "difference", "logloss": "relative_reduction",
                                                     "ne": "relative_reduction", "gauc": "difference",
                                                     "uauc": "difference"}
    assert [n for n, s in specs.items() if s.needs_users] == ["gauc", "uauc"]
    assert metric_registry.search_modes() == {"valid_auc": "max", "valid_logloss": "min", "valid_ne": "min",
                                              "valid_gauc": "max", "valid_uauc": "max"}
    assert metric_registry.scaling_metrics() == ("auc", "logloss")
    with pytest.raises(ValueError, match="already registered"):
        metric_registry.register(MetricSpec("auc", _brier, higher_is_better=True, label="AUC"))
    with pytest.raises(KeyError, match="registered: auc, logloss, ne, gauc, uauc"):
        metric_registry.get("brier")


def test_builtin_values_match_sklearn():
    rng = np.random.default_rng(0)
    y = (rng.random(200) < 0.3).astype(np.float64)
    p = np.clip(0.3 + 0.3 * (y - 0.3) + rng.normal(0, 0.2, 200), 0.01, 0.99)
    flat, _ = _split_metrics(y, p, _columns(200, rng, y))
    assert flat["valid_auc"] == pytest.approx(roc_auc_score(y, p), abs=1e-12)
    assert flat["valid_logloss"] == pytest.approx(log_loss(y, p), abs=1e-12)
    # registration order = metrics.json order
    assert list(flat)[:7] == [f"valid_{m}" for m in ("n", "positives", *BUILTINS)]


def test_toy_metric_is_computed_by_the_harness(brier):
    rng = np.random.default_rng(1)
    n = 300
    y = (rng.random(n) < 0.35).astype(np.float64)
    p = np.clip(0.35 + 0.25 * (y - 0.35) + rng.normal(0, 0.2, n), 0.01, 0.99)
    columns = _columns(n, rng, y)
    flat, groups = _split_metrics(y, p, columns)
    # named as every other metric: <split>_<name>, oracle_<split>_<name>
    assert list(flat) == [f"valid_{m}" for m in ("n", "positives", *BUILTINS, "brier")] + \
        [f"oracle_valid_{m}" for m in (*BUILTINS, "brier")]
    assert flat["valid_brier"] == pytest.approx(brier_score_loss(y, p), abs=1e-12)
    assert flat["oracle_valid_brier"] == pytest.approx(brier_score_loss(y, columns["true_p"]), abs=1e-12)
    unseen = columns["video_unseen"]
    assert groups["video_unseen"]["brier"] == pytest.approx(brier_score_loss(y[unseen], p[unseen]), abs=1e-12)
    assert "oracle_brier" not in groups["video_unseen"]  # the oracle per group: headline metrics only


def test_toy_metric_is_accepted_by_configs(brier):
    cfg = analysis_config({"metrics": ["auc", "brier"]})
    assert cfg.metrics == ["auc", "brier"]
    assert analysis_config(None).metrics == [*BUILTINS, "brier"]  # the default: every registered metric
    with pytest.raises(ConfigError, match=r"analysis.metrics\[1\]: unknown metric 'bier'; "
                                          r"registered: auc, logloss, ne, gauc, uauc, brier"):
        analysis_config({"metrics": ["auc", "bier"]})

    search = {"space": {"train.lr": {"loguniform": [1e-4, 1e-2]}}, "metric": "valid_brier", "mode": "min"}
    assert parse_sweep(_with(search=search)).config.search.metric == "valid_brier"
    assert "search.mode: valid_brier is optimised with mode 'min'" in _error(_with(search={**search, "mode": "max"}))
    assert "valid_brier" in _error(_with(search={**search, "metric": "test_brier"}))  # test never searched

    assert from_dict(TrainConfig, {"early_stopping_metric": "valid_brier"}).early_stopping_metric == "valid_brier"
    assert _is_better("valid_brier", 0.10, 0.11) and not _is_better("valid_brier", 0.12, 0.11)
    assert _is_better("valid_auc", 0.71, 0.70) and _is_better("valid_ne", 0.90, 0.91)


def test_unregistered_toy_metric_is_refused_everywhere():
    assert parse_sweep(BASE).config.search is None
    with pytest.raises(ConfigError, match="registered: auc, logloss, ne, gauc, uauc$"):
        analysis_config({"metrics": ["brier"]})
    search = {"space": {"train.lr": {"loguniform": [1e-4, 1e-2]}}, "metric": "valid_brier", "mode": "min"}
    msg = _error(_with(search=search))
    assert "search.metric" in msg and "valid_auc, valid_logloss, valid_ne, valid_gauc, valid_uauc" in msg
    with pytest.raises(ConfigError, match="train.early_stopping_metric"):
        from_dict(TrainConfig, {"early_stopping_metric": "valid_brier"}, prefix="train.")


@pytest.mark.filterwarnings("ignore:.*left out of the log fit")
def test_toy_metric_direction_in_ablations_marginal_returns_and_gain(brier, tmp_path):
    comparison = {"name": "WHALE vs MeanPool", "a": {"arch": "whale"}, "b": {"arch": "whale_meanpool"},
                  "where": {"model.dim": 64}, "metric": "brier"}
    root = make_results(tmp_path / "sweep", analysis={"questions": [comparison], "metrics": ["auc", "brier"],
                                                      "n_resamples": 999, "delong": False})
    runs = pd.read_parquet(root / "runs.parquet")
    rng = np.random.default_rng(2)
    # WHALE's Brier score is 0.01 lower (better) than MeanPool's; seed noise 1e-4
    runs["test_brier"] = 0.20 - 0.01 * (runs["arch"] == "whale") + rng.normal(0, 1e-4, len(runs))
    runs.to_parquet(root / "runs.parquet")
    res = analyze(root, progress=False, plots=False)
    (ablation,) = res.ablations
    auc, score = ablation.metrics["auc"], ablation.metrics["brier"]
    assert score.stats.mean < 0 and score.verdict == "decided" and auc.verdict == ""
    assert score.favours_a and auc.favours_a  # a lower Brier and a higher AUC both favour WHALE
    assert "### test Brier (lower is better)" in (root / "report.md").read_text()
    assert {f.metric for f in res.scaling} == {"auc", "logloss"}  # not a headline metric: not fitted by default

    seeds = np.arange(3)
    falling = np.array([[0.20, 0.20, 0.20], [0.19, 0.19, 0.19], [0.18, 0.18, 0.18]]) + rng.normal(0, 1e-4, (3, 3))
    steps = marginal_returns(["s", "m", "l"], np.array([1.0, 2.0, 4.0]), falling, seeds, "brier")
    assert all(s.improves for s in steps.steps)  # a falling loss improves
    rising = marginal_returns(["s", "m", "l"], np.array([1.0, 2.0, 4.0]), falling[::-1], seeds, "brier")
    assert not any(s.improves for s in rising.steps)

    conv = Convention(gain="absolute")
    assert conv.gain_of("brier", np.array(0.18), np.array(0.20)) == pytest.approx(0.1)  # (0.20 - 0.18) / 0.20
    assert conv.value_of("brier", 0.1, 0.20) == pytest.approx(0.18)
    assert conv.gain_label("brier") == "relative Brier gain"


def test_a_metric_without_gain_cannot_be_a_scaling_gain():
    spec = metric_registry.register(MetricSpec("hits", _brier, higher_is_better=True, label="Hits"))
    try:
        with pytest.raises(ValueError, match="declares no scaling gain"):
            Convention().gain_of("hits", np.array(1.0), np.array(0.5))
        assert "hits" not in metric_registry.scaling_metrics() and spec.mode == "max"
    finally:
        metric_registry.unregister("hits")
    assert not math.isnan(Convention().gain_of("auc", np.array(0.72), np.array(0.70)))
