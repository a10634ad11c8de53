"""The three functional forms a scaling ladder is fitted with, each as a plain function of per-seed points.

Points are (ln C, y, seed) with C the compute on the fit's axis. Every form returns a `Curve` that predicts y
at any C, so held-out checks and extrapolations treat them alike.

  power law of the gain  ln g = a + b ln C on the positive per-seed gains over the reference (the papers'
                         convention): the mean of the per-seed OLS lines (analysis/powerlaw.py's estimate);
                         y = the metric at reference value + gain (`to_value`).
  log-linear             y = a + b ln C, ordinary least squares. b is the metric per e-fold of compute and
                         needs no reference run.
  saturating             y = y_inf + s A C^(-alpha), A >= 0, s = -1 when higher is better (AUC rises to
                         AUC_inf), +1 when lower is better (a loss falls to E). Robust non-linear least squares
                         (scipy.optimize.least_squares, soft-L1 loss with its scale set to the seed noise,
                         analytic Jacobian). Starts: on a grid of exponents the linear parameters are solved
                         exactly for each exponent (variable projection); the N_STARTS exponents with the
                         smallest squared error start a joint refinement each, and the lowest robust cost wins.
                         A fit whose exponent ends at a bound of ALPHA_BOUNDS does not identify its parameters
                         (at the lower bound y_inf and A trade off along a flat valley; at the upper one the
                         curve is a step): it still predicts, but its parameters are NaN and the report says
                         "not identified".
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import optimize

from .loss_surface import FORM as LOSS_SURFACE
from .powerlaw import seed_lines

POWER_LAW = "power law of the gain"
LOG_LINEAR = "log-linear"
SATURATING = "saturating"
#: Forms fitted by an iterative optimiser: their parameters, and what is computed from them, are fixed only
#: to the optimiser's precision and the fit's conditioning, so a re-analysis on another CPU kind compares
#: them looser (docs/reproducibility.md).
#: The L(N, D) surface of analysis/loss_surface.py is one too (L-BFGS-B on a piecewise-smooth Huber loss).
ITERATIVE_FORMS = (SATURATING, LOSS_SURFACE)
FORMS = (POWER_LAW, LOG_LINEAR, SATURATING)
N_PARAMS = {POWER_LAW: 2, LOG_LINEAR: 2, SATURATING: 3}
ALPHA_BOUNDS = (1e-3, 5.0)
ALPHA_GRID = np.geomspace(ALPHA_BOUNDS[0], ALPHA_BOUNDS[1], 40)
N_STARTS = 3
LOSS = "soft_l1"


@dataclass
class Curve:
    form: str
    params: dict[str, float]  # NaN where the fit does not identify them
    predict: Callable[[np.ndarray], np.ndarray]  # ln C -> y
    identified: bool = True  # False: a saturating fit whose exponent sits at a bound (see fit_saturating)


#: least_squares' stopping tolerances, far below the default 1e-8: the cost is fixed to 1e-14 relative, so the
#: parameters to about its square root (1e-7) times the fit's conditioning (docs/reproducibility.md).
FIT_TOL = 1e-14
#: A saturating exponent within this relative distance of ALPHA_BOUNDS counts as at the bound.
BOUND_SLACK = 1e-6


def fit_log_linear(lx: np.ndarray, y: np.ndarray) -> Curve | None:
    if len(np.unique(lx)) < 2:
        return None
    b, a = np.polyfit(lx, y, 1)
    return Curve(LOG_LINEAR, {"a": float(a), "b": float(b)}, lambda q: a + b * np.asarray(q))


def fit_power_law_gain(lx: np.ndarray, gain: np.ndarray, seed: np.ndarray,
                       to_value: Callable[[np.ndarray], np.ndarray]) -> Curve | None:
    """Mean of the per-seed lines of ln gain on ln C over the positive gains; None without a seed line."""
    ok = np.isfinite(gain) & (gain > 0)
    lines = seed_lines(lx[ok], np.log(gain[ok]), seed[ok])
    if not lines:
        return None
    b = float(np.mean([v[0] for v in lines.values()]))
    a = float(np.mean([v[1] for v in lines.values()]))
    return Curve(POWER_LAW, {"intercept": a, "slope": b},
                 lambda q: to_value(np.exp(a + b * np.asarray(q))))


def _saturating(params: np.ndarray, lx: np.ndarray, sign: float) -> np.ndarray:
    y_inf, amp, alpha = params
    return y_inf + sign * amp * np.exp(-alpha * lx)


def _jacobian(params: np.ndarray, lx: np.ndarray, sign: float) -> np.ndarray:
    _, amp, alpha = params
    e = np.exp(-alpha * lx)
    return np.column_stack([np.ones_like(lx), sign * e, -sign * amp * lx * e])


def _projected(alpha: float, lx: np.ndarray, y: np.ndarray, sign: float) -> tuple[np.ndarray, float]:
    """Exact least-squares (y_inf, A) for a fixed exponent (A clipped at 0) and its squared error."""
    basis = np.column_stack([np.ones_like(lx), sign * np.exp(-alpha * lx)])
    (y_inf, amp), *_ = np.linalg.lstsq(basis, y, rcond=None)
    if amp < 0:
        y_inf, amp = float(y.mean()), 0.0
    start = np.array([y_inf, amp, alpha])
    return start, float(((_saturating(start, lx, sign) - y) ** 2).sum())


def fit_saturating(lx: np.ndarray, y: np.ndarray, *, higher_is_better: bool, scale: float) -> Curve | None:
    """Robust fit of y = y_inf + s A C^-alpha; `scale` is the residual size treated as noise (soft-L1)."""
    if len(np.unique(lx)) < 3:
        return None
    sign = -1.0 if higher_is_better else 1.0
    shift = float(lx.mean())  # centre ln C so that A is of the order of the metric's spread
    q = lx - shift
    f_scale = scale if np.isfinite(scale) and scale > 0 else max(float(np.std(y)), 1e-9)
    projected = sorted((_projected(alpha, q, y, sign) for alpha in ALPHA_GRID), key=lambda v: v[1])
    best: Any = None  # scipy OptimizeResult; N_STARTS >= 1 starts
    for start, _ in projected[:N_STARTS]:
        res = optimize.least_squares(lambda p: _saturating(p, q, sign) - y, start, jac=lambda p: _jacobian(p, q, sign),
                                     loss=LOSS, f_scale=f_scale, ftol=FIT_TOL, xtol=FIT_TOL, gtol=FIT_TOL,
                                     bounds=([-np.inf, 0.0, ALPHA_BOUNDS[0]], [np.inf, np.inf, ALPHA_BOUNDS[1]]))
        if best is None or res.cost < best.cost:
            best = res
    y_inf, amp_c, alpha = (float(v) for v in best.x)
    amp = amp_c * float(np.exp(alpha * shift))  # A at C = 1 in the axis unit
    curve = Curve(SATURATING, {"y_inf": y_inf, "A": amp, "alpha": alpha},
                  lambda v: y_inf + sign * amp * np.exp(-alpha * np.asarray(v)))
    if not ALPHA_BOUNDS[0] * (1 + BOUND_SLACK) < alpha < ALPHA_BOUNDS[1] * (1 - BOUND_SLACK):
        # At the lower bound the curve is y_inf + s A (1 - alpha ln C) over the range: y_inf and A trade off
        # along a flat valley (A at 1e-14 or 1e+6 fits alike); at the upper bound it is a step. The
        # predictions are determined, the parameters are not.
        curve.identified = False
        curve.params = {k: float("nan") for k in curve.params}
    return curve
