"""The loss surface L(N, D) = E + A / N^alpha + B / D^beta and its fit (Chinchilla's approach 3).

N is a model size (non-embedding parameters), D a data size (training targets). The fit minimises

    sum_i Huber_delta( LSE(a - alpha ln N_i, b - beta ln D_i, e) - ln L_i ),   A = e^a, B = e^b, E = e^e,

the Huber loss of log-space residuals (log of the predicted against log of the observed loss; LSE is the
log-sum-exp, so ln of E + A/N^alpha + B/D^beta), with delta = HUBER_DELTA as in Hoffmann et al. (2022).
N and D are divided by their geometric means first (the conditioning of a and b), and A, B converted back
afterwards. Starts: the objective is evaluated on a grid of (alpha, beta, e, a, b) at once, and the
N_STARTS best grid points each start an L-BFGS-B refinement (scipy.optimize.minimize, analytic gradient,
exponents bounded by EXPONENT_BOUNDS); the lowest objective wins. Each refinement runs until the objective no
longer decreases at float precision (see GTOL): the parameters are then fixed to the square root of that
precision times the fit's conditioning, which is what a re-analysis on another CPU is compared at
(docs/reproducibility.md). An exponent that ends at a bound does not
identify the surface along that axis (the loss does not fall, or falls as a step, over the measured range):
the fit still predicts, but `identified` is False and the report says so.

Compute-optimal allocation for training compute C = FLOPS_PER_PARAM_TARGET * N * D (6 N D: 2 FLOPs per
parameter per target forward, twice that backward; the convention of Kaplan et al. and Hoffmann et al.):
minimising L(N, C / (6 N)) over N gives

    N*(C) = G (C/6)^(beta/(alpha+beta)),   D*(C) = G^-1 (C/6)^(alpha/(alpha+beta)),
    G = (alpha A / (beta B))^(1/(alpha+beta)).
"""
from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import optimize
from scipy.special import logsumexp

#: The fit's name in analysis.json (`form`): an iterative fit (analysis/fits/forms.py ITERATIVE_FORMS), so a
#: re-analysis compares it at the optimiser's precision (docs/reproducibility.md).
FORM = "loss surface L(N, D)"
#: Huber threshold on log-space residuals (Hoffmann et al. 2022, approach 3).
HUBER_DELTA = 1e-3
EXPONENT_BOUNDS = (1e-3, 4.0)
#: A fitted exponent within this relative distance of a bound counts as at the bound.
BOUND_SLACK = 1e-4
N_STARTS = 8
#: Training FLOPs per parameter per target in C = 6 N D.
FLOPS_PER_PARAM_TARGET = 6.0
_EXPONENT_GRID = (0.05, 0.15, 0.3, 0.5, 0.8, 1.2, 2.0)
_E_SHARES = (0.5, 0.8, 0.9, 0.97, 0.995)      # E as a share of the smallest observed loss
_AB_SHARES = (1e-3, 1e-2, 0.05, 0.2, 0.6)     # A (B) at the geometric-mean size, as a share of the mean loss
#: L-BFGS-B stops on a projected gradient below GTOL or when its line search can no longer decrease the
#: objective. Its relative-decrease rule is off (ftol=0): it measures the decrease against max(|f|, 1), and this
#: objective is about 1e-5, so any ftol > 0 stopped it at a relative precision of ftol / 1e-5 (1e-7 at the former
#: 1e-12), which left the parameters fixed to only about 3e-4 relative and moved them with the CPU's kernels.
GTOL = 1e-12


@dataclass(frozen=True)
class Surface:
    """A fitted L(N, D); N and D in their own units (parameters, targets)."""

    E: float
    A: float
    B: float
    alpha: float
    beta: float
    identified: bool = True
    objective: float = float("nan")

    def predict(self, n: np.ndarray | float, d: np.ndarray | float) -> np.ndarray:
        n, d = np.asarray(n, dtype=np.float64), np.asarray(d, dtype=np.float64)
        return self.E + self.A * n ** -self.alpha + self.B * d ** -self.beta

    @property
    def n_exponent(self) -> float:
        """a in N*(C) ~ C^a: beta / (alpha + beta)."""
        return self.beta / (self.alpha + self.beta)

    def n_opt(self, c: np.ndarray | float) -> np.ndarray:
        """Compute-optimal N for training compute C = 6 N D."""
        g = (self.alpha * self.A / (self.beta * self.B)) ** (1.0 / (self.alpha + self.beta))
        return g * (np.asarray(c, dtype=np.float64) / FLOPS_PER_PARAM_TARGET) ** self.n_exponent

    def d_opt(self, c: np.ndarray | float) -> np.ndarray:
        """Compute-optimal D for C = 6 N D (= C / (6 N*(C)))."""
        c = np.asarray(c, dtype=np.float64)
        return c / (FLOPS_PER_PARAM_TARGET * self.n_opt(c))

    def params(self) -> dict[str, float]:
        return {k: v for k, v in asdict(self).items() if k in ("E", "A", "B", "alpha", "beta")}


def _objective(theta: np.ndarray, ln_n: np.ndarray, ln_d: np.ndarray, ln_l: np.ndarray) -> tuple[float, np.ndarray]:
    """Huber loss of log residuals and its gradient in theta = (a, b, e, alpha, beta)."""
    a, b, e, alpha, beta = theta
    terms = np.stack([a - alpha * ln_n, b - beta * ln_d, np.full_like(ln_n, e)])
    lse = logsumexp(terms, axis=0)
    r = lse - ln_l
    huber = np.where(np.abs(r) <= HUBER_DELTA, 0.5 * r ** 2, HUBER_DELTA * (np.abs(r) - 0.5 * HUBER_DELTA))
    dr = np.clip(r, -HUBER_DELTA, HUBER_DELTA)  # d huber / d r
    w = np.exp(terms - lse)  # softmax weights: d lse / d term
    grad = np.array([np.sum(dr * w[0]), np.sum(dr * w[1]), np.sum(dr * w[2]),
                     np.sum(dr * w[0] * -ln_n), np.sum(dr * w[1] * -ln_d)])
    return float(huber.sum()), grad


def _grid_starts(ln_n: np.ndarray, ln_d: np.ndarray, ln_l: np.ndarray) -> np.ndarray:
    """The N_STARTS grid points with the lowest objective, as rows (a, b, e, alpha, beta)."""
    low, mean = float(np.exp(ln_l.min())), float(np.exp(ln_l).mean())
    grid = np.array(list(itertools.product(
        np.log(np.array(_AB_SHARES) * mean), np.log(np.array(_AB_SHARES) * mean), np.log(np.array(_E_SHARES) * low),
        _EXPONENT_GRID, _EXPONENT_GRID)))
    a, b, e, alpha, beta = (grid[:, i:i + 1] for i in range(5))
    lse = np.logaddexp(np.logaddexp(a - alpha * ln_n, b - beta * ln_d), e)
    r = np.abs(lse - ln_l)
    cost = np.where(r <= HUBER_DELTA, 0.5 * r ** 2, HUBER_DELTA * (r - 0.5 * HUBER_DELTA)).sum(axis=1)
    return grid[np.argsort(cost, kind="stable")[:N_STARTS]]


def fit_surface(n: np.ndarray, d: np.ndarray, loss: np.ndarray) -> Surface | None:
    """Fit L(N, D) to every point (N_i, D_i, L_i); None with fewer than 2 distinct N or D or < 6 points."""
    n, d, loss = (np.asarray(v, dtype=np.float64) for v in (n, d, loss))
    if len(loss) < 6 or len(np.unique(n)) < 2 or len(np.unique(d)) < 2:
        return None
    n0, d0 = float(np.exp(np.log(n).mean())), float(np.exp(np.log(d).mean()))
    ln_n, ln_d, ln_l = np.log(n / n0), np.log(d / d0), np.log(loss)
    bounds = [(None, None)] * 3 + [EXPONENT_BOUNDS] * 2
    best: Any = None  # scipy OptimizeResult; _grid_starts yields at least one start
    for start in _grid_starts(ln_n, ln_d, ln_l):
        res = optimize.minimize(_objective, start, args=(ln_n, ln_d, ln_l), jac=True, method="L-BFGS-B",
                                bounds=bounds, options={"ftol": 0.0, "gtol": GTOL, "maxiter": 20000})
        if best is None or res.fun < best.fun:
            best = res
    a, b, e, alpha, beta = (float(v) for v in best.x)
    lo, hi = EXPONENT_BOUNDS
    inside = all(lo * (1 + BOUND_SLACK) < x < hi * (1 - BOUND_SLACK) for x in (alpha, beta))
    return Surface(E=float(np.exp(e)), A=float(np.exp(a) * n0 ** alpha), B=float(np.exp(b) * d0 ** beta),
                   alpha=alpha, beta=beta, identified=inside, objective=float(best.fun))
