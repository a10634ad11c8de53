"""Run health: whether one trial learned, from what it recorded; the one place the thresholds live.

Statuses, checked in this order (the first that applies wins):

- `diverged`: a non-finite training loss (`train_loss`, the sum over every step, is non-finite as soon as
  one step's loss was), non-finite final weights (`weights_finite`: AdamW turns any non-finite gradient,
  clipped or not, into non-finite weights, so this catches non-finite gradients of every step without a
  per-step check), or a loss that blew up: validation NE above `NE_BLOWUP` (LogLoss 1.5 times that of
  predicting the base rate).
- `collapsed`: the validation predictions are (nearly) constant, their standard deviation
  (`valid_pred_std`, of the probabilities) below `PRED_STD_MIN`; or the validation AUC is within noise of
  0.5: |AUC - 0.5| < `AUC_NOISE_Z` standard errors of the AUC of an uninformative score (Hanley & McNeil
  1982 at AUC = 0.5, which is the Mann-Whitney null: SE^2 = (n_pos + n_neg + 1) / (12 n_pos n_neg)).
- `undertrained`: validation NE not below `NE_MAX` (no better than the base rate), or still falling fast
  at the last evaluation: validation NE dropped by more than `FALLING_FAST` (relative) between the last two
  evaluations (checkable only when the run evaluated validation at least twice, `valid_ne_history`).
- `ok`: none of the above.

A criterion whose inputs are missing (a runs.parquet written before a column existed) is not checked; the
result names it in `unchecked`, so a report can say what it could not verify.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

OK, DIVERGED, COLLAPSED, UNDERTRAINED = "ok", "diverged", "collapsed", "undertrained"
#: Every status, in the order they are checked.
STATUSES: tuple[str, ...] = (OK, DIVERGED, COLLAPSED, UNDERTRAINED)

#: Standard deviation of the validation probabilities below which predictions count as constant.
PRED_STD_MIN = 1e-4
#: |AUC - 0.5| below this many null standard errors counts as "within noise of 0.5".
AUC_NOISE_Z = 2.0
#: Validation NE must be below this for a run to have learned more than the base rate.
NE_MAX = 0.99
#: Validation NE above this counts as a loss that blew up.
NE_BLOWUP = 1.5
#: Relative drop of validation NE between the last two evaluations above which a run is still falling fast.
FALLING_FAST = 0.01

#: Criterion names, as `Health.reasons` / `Health.unchecked` name them.
CRITERIA: dict[str, str] = {
    "nonfinite_loss": "non-finite training loss",
    "nonfinite_weights": "non-finite final weights (a non-finite gradient)",
    "loss_blowup": f"validation NE > {NE_BLOWUP:g}",
    "constant_predictions": f"validation prediction sd < {PRED_STD_MIN:g}",
    "auc_noise": f"validation AUC within {AUC_NOISE_Z:g} null SE of 0.5",
    "ne_threshold": f"validation NE >= {NE_MAX:g}",
    "still_falling": f"validation NE still falling > {FALLING_FAST:.0%} between the last two evaluations",
}

#: metrics.json keys `health_fields` writes (flat scalars, so runs.parquet columns).
STATUS_KEY, REASONS_KEY, UNCHECKED_KEY = "health_status", "health_reasons", "health_unchecked"


@dataclass(frozen=True)
class Health:
    status: str
    reasons: tuple[str, ...] = ()  # why it is not ok: criterion name and the value that failed it
    unchecked: tuple[str, ...] = field(default_factory=tuple)  # criteria whose inputs were missing

    def fields(self) -> dict[str, Any]:
        """The metrics.json / runs.parquet keys."""
        return {STATUS_KEY: self.status, REASONS_KEY: "; ".join(self.reasons),
                UNCHECKED_KEY: ", ".join(self.unchecked)}


def null_auc_se(n_pos: float, n_neg: float) -> float:
    """Standard error of the AUC of a score unrelated to the label (Hanley-McNeil at AUC = 0.5)."""
    if not (n_pos > 0 and n_neg > 0):
        return math.nan
    return math.sqrt((n_pos + n_neg + 1.0) / (12.0 * n_pos * n_neg))


def _num(m: Mapping[str, Any], key: str) -> float | None:
    """`m[key]` as a float, None when absent or null (a missing runs.parquet cell); NaN stays NaN."""
    v = m.get(key)
    if v is None:
        return None
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return v


def _missing(v: float | None) -> bool:
    return v is None or math.isnan(v)


def classify(m: Mapping[str, Any], ne_history: Sequence[float] | None = None) -> Health:
    """Health of one run from its flat metrics (`train_loss`, `weights_finite`, `valid_ne`, `valid_auc`,
    `valid_n`, `valid_positives`, `valid_pred_std`) and its validation NE at each evaluation, in order."""
    # per criterion: None = not checked (inputs missing), "" = passed, else why it failed
    found: dict[str, str | None] = {}
    loss, ne, auc, sd = _num(m, "train_loss"), _num(m, "valid_ne"), _num(m, "valid_auc"), _num(m, "valid_pred_std")
    found["nonfinite_loss"] = None if loss is None else ("" if math.isfinite(loss) else f"train_loss {loss}")
    finite = _num(m, "weights_finite")
    found["nonfinite_weights"] = None if _missing(finite) else ("" if finite else "final weights not finite")
    found["loss_blowup"] = None if ne is None else (f"valid NE {ne:.4g}" if math.isnan(ne) or ne > NE_BLOWUP else "")
    found["constant_predictions"] = None if sd is None else (
        f"valid prediction sd {sd:.3g}" if math.isnan(sd) or sd < PRED_STD_MIN else "")
    n, pos = _num(m, "valid_n"), _num(m, "valid_positives")
    se = math.nan if n is None or pos is None or _missing(n) or _missing(pos) else null_auc_se(pos, n - pos)
    found["auc_noise"] = None if auc is None or math.isnan(se) else (
        f"valid AUC {auc:.4f} (0.5 ± {AUC_NOISE_Z:g}×{se:.4f})" if math.isnan(auc) or abs(auc - 0.5) < AUC_NOISE_Z * se
        else "")
    found["ne_threshold"] = None if ne is None else (
        f"valid NE {ne:.4f} >= {NE_MAX:g}" if math.isnan(ne) or ne >= NE_MAX else "")
    hist = [float(x) for x in (ne_history or []) if x is not None and math.isfinite(float(x))]
    if len(hist) >= 2:
        drop = (hist[-2] - hist[-1]) / abs(hist[-2]) if hist[-2] else 0.0
        found["still_falling"] = f"valid NE fell {drop:.1%} at the last evaluation" if drop > FALLING_FAST else ""
    else:
        found["still_falling"] = None
    unchecked = tuple(name for name in CRITERIA if found[name] is None)
    for status in (DIVERGED, COLLAPSED, UNDERTRAINED):
        reasons = tuple(f"{name}: {found[name]}" for name in _OF[status] if found[name])
        if reasons:
            return Health(status, reasons, unchecked)
    return Health(OK, (), unchecked)


#: The criteria behind each unhealthy status.
_OF: dict[str, tuple[str, ...]] = {
    DIVERGED: ("nonfinite_loss", "nonfinite_weights", "loss_blowup"),
    COLLAPSED: ("constant_predictions", "auc_noise"),
    UNDERTRAINED: ("ne_threshold", "still_falling"),
}


def ne_history(epoch_history: Sequence[Mapping[str, Any]] | None) -> list[float]:
    """Validation NE at each evaluation recorded in a run's `epoch_history` (entries without one skipped)."""
    return [float(e["valid_ne"]) for e in (epoch_history or []) if isinstance(e, Mapping) and "valid_ne" in e]


def weights_finite(model: Any) -> bool:
    """Whether every parameter of a torch module is finite (one pass over the weights, after training)."""
    import torch

    with torch.no_grad():
        return all(bool(torch.isfinite(p).all()) for p in model.parameters())


def record(metrics: Mapping[str, Any], model: Any, valid_scores: Any, epoch_history: Sequence[Any]) -> dict[str, Any]:
    """The health keys `train_run` adds to metrics.json: `weights_finite`, `valid_pred_std` (of the validation
    probabilities) and the status fields. Reads the trained model and scores only; uses no random state."""
    import numpy as np

    out: dict[str, Any] = {"weights_finite": weights_finite(model),
                           "valid_pred_std": float(np.std(np.asarray(valid_scores, dtype=np.float64)))}
    return {**out, **classify({**metrics, **out}, ne_history(epoch_history)).fields()}


def undefined_metrics(split: str, labels: Any) -> dict[str, float]:
    """Flat metrics of a split whose scores are not finite (a diverged run): the counts, and NaN for every
    registered metric, so the run still gets a metrics.json that records it as `diverged`."""
    import numpy as np

    from .metric_registry import all_metrics

    y = np.asarray(labels, dtype=np.float64)
    return {f"{split}_n": int(y.size), f"{split}_positives": int(y.sum()),
            **{f"{split}_{m.name}": math.nan for m in all_metrics()}}
