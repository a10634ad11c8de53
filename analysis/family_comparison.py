"""Family against family: slope difference, gain at matched compute (iso-FLOP), and the crossover.

Two families fitted on the same reference, metric and axes, in the same data setting, are fitted jointly on
their per-seed points (analysis/powerlaw.py):

    ln g = a_B + b_B ln x + D (da + db ln x),    D = 1 for family A's points, 0 for B's,

by ordinary least squares with this interaction term, so db = b_A - b_B is the slope difference and the
residual variance is pooled over both families (df = n_A + n_B - 4; seeds are independent points, as in one
family's fit). It gives db with its t interval and two-sided p-value; at a compute x* inside both measured
ranges (the geometric middle of their overlap) each family's fitted gain with its t interval, the ratio
g_A / g_B (t interval of the log contrast) and the difference g_A - g_B (delta method). Both gains are over
the same reference, so the difference is the metric difference of the two families at matched FLOPs. The
crossover compute, where the two lines meet, is x_c = exp(-da / db); it is reported when it lies inside the
measured range of the two families or within a factor of 10 of it, and as "no crossover in range" otherwise.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from .axes import UNIT_NAMES, Convention
from .config import ScalingConfig
from .powerlaw import LEVEL
from .scaling import FamilyScaling

METHOD = ("OLS on both families' per-seed points with an interaction term (ln g ~ family x ln x), pooled "
          "residual variance, t intervals (df = n - 4); gain difference by the delta method")
#: A crossover this many times outside the measured range is not reported as one.
CROSSOVER_REACH = 10.0


@dataclass(frozen=True)
class Estimate:
    value: float
    lo: float
    hi: float


@dataclass
class FamilyComparison:
    a: str
    b: str
    metric: str
    reference: str
    convention: Convention
    n_obs: tuple[int, int]  # per-seed points of A and B
    df: int
    slope_a: float
    slope_b: float
    slope_diff: Estimate  # slope A - slope B
    p_value: float
    iso_x: float | None  # compute where the gains are read (the fit's axis and unit)
    gain_a: Estimate | None = None
    gain_b: Estimate | None = None
    ratio: Estimate | None = None  # gain A / gain B
    diff: Estimate | None = None  # gain A - gain B
    value_a: float = float("nan")  # the metric itself at iso_x (reference value + gain)
    value_b: float = float("nan")
    crossover_x: float | None = None
    crossover: str = ""
    method: str = METHOD
    notes: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.a} vs {self.b}"


def _context_key(f: FamilyScaling) -> tuple:
    shared = sorted((k, str(v)) for k, v in f.context.items() if k != "arch" and not k.startswith("model."))
    return f.metric, f.reference, f.convention, tuple(shared)


def _named(f: FamilyScaling, name: str) -> bool:
    return name in (f.family, f.arch)


def comparison_pairs(fams: list[FamilyScaling], cfg: ScalingConfig) -> tuple[list[tuple[FamilyScaling, FamilyScaling]], list[str]]:
    """Pairs to compare (configured `compare` entries, else every pair in the same setting), and notes on
    configured pairs that have nothing to compare."""
    fitted = [f for f in fams if f.fit is not None]
    groups: dict[tuple, list[FamilyScaling]] = {}
    for f in fitted:
        groups.setdefault(_context_key(f), []).append(f)
    pairs, notes = [], []
    if not cfg.compare:
        for members in groups.values():
            pairs += list(itertools.combinations(sorted(members, key=lambda f: f.family), 2))
        return pairs, notes
    for name_a, name_b in cfg.compare:
        found = [(fa, fb) for members in groups.values() for fa in members for fb in members
                 if _named(fa, name_a) and _named(fb, name_b)]
        if not found:
            have = sorted({f.family for f in fitted}) or ["none"]
            notes.append(f"analysis.scaling.compare [{name_a}, {name_b}]: no pair of fitted families with these "
                         f"names in the same setting (fitted: {', '.join(have)})")
        pairs += found
    return pairs, notes


def compare_families(fa: FamilyScaling, fb: FamilyScaling, *, level: float = LEVEL) -> FamilyComparison:
    """Slope difference, iso-FLOP gains and crossover of two fitted families (A - B)."""
    A, B = fa.fit, fb.fit
    lx = np.concatenate([A.obs_x, B.obs_x])  # [N]
    y = np.concatenate([A.obs_y, B.obs_y])  # [N]
    d = np.concatenate([np.ones(len(A.obs_x)), np.zeros(len(B.obs_x))])  # [N] 1 = family A
    X = np.column_stack([np.ones_like(lx), lx, d, d * lx])  # [N, 4]
    beta, *_ = np.linalg.lstsq(X, y, rcond=None)  # [4] a_B, b_B, da, db
    df = len(y) - 4
    nan = float("nan")
    resid = y - X @ beta
    s2 = float(resid @ resid / df) if df > 0 else nan
    cov = s2 * np.linalg.pinv(X.T @ X)  # [4, 4]
    t = float(stats.t.ppf(0.5 + level / 2, df)) if df > 0 else nan

    def est(c: np.ndarray, transform=lambda v: v) -> Estimate:
        mu, se = float(c @ beta), float(np.sqrt(max(c @ cov @ c, 0.0)))
        return Estimate(transform(mu), transform(mu - t * se), transform(mu + t * se))

    db = est(np.array([0.0, 0.0, 0.0, 1.0]))
    se_db = float(np.sqrt(max(cov[3, 3], 0.0)))
    with np.errstate(divide="ignore", invalid="ignore"):
        p = float(2 * stats.t.sf(abs(beta[3] / se_db), df)) if df > 0 and (se_db > 0 or beta[3] != 0) else nan
    out = FamilyComparison(fa.family, fb.family, fa.metric, fa.reference, fa.convention,
                           (len(A.obs_x), len(B.obs_x)), df, float(beta[1] + beta[3]), float(beta[1]), db, p, None)
    if df <= 0:
        out.notes.append(f"{len(y)} per-seed points: no intervals (needs 5)")
    _iso(out, fa, fb, A.obs_x, B.obs_x, beta, cov, t, est)
    _crossover(out, lx, beta)
    return out


def _iso(out: FamilyComparison, fa: FamilyScaling, fb: FamilyScaling, xa: np.ndarray, xb: np.ndarray,
         beta: np.ndarray, cov: np.ndarray, t: float, est) -> None:
    lo, hi = max(xa.min(), xb.min()), min(xa.max(), xb.max())
    if lo > hi:
        out.notes.append("the measured compute ranges do not overlap: no iso-FLOP reading")
        return
    mid = (lo + hi) / 2  # geometric middle of the overlap, in ln x
    c_a, c_b = np.array([1.0, mid, 1.0, mid]), np.array([1.0, mid, 0.0, 0.0])
    out.iso_x = float(np.exp(mid))
    out.gain_a, out.gain_b = est(c_a, np.exp), est(c_b, np.exp)
    out.ratio = est(c_a - c_b, np.exp)
    ga, gb = float(np.exp(c_a @ beta)), float(np.exp(c_b @ beta))
    grad = ga * c_a - gb * c_b  # d(g_A - g_B) / d beta
    se = float(np.sqrt(max(grad @ cov @ grad, 0.0)))
    out.diff = Estimate(ga - gb, ga - gb - t * se, ga - gb + t * se)
    out.value_a = float(fa.convention.value_of(fa.metric, ga, fa.ref_value))
    out.value_b = float(fb.convention.value_of(fb.metric, gb, fb.ref_value))


def _crossover(out: FamilyComparison, lx: np.ndarray, beta: np.ndarray) -> None:
    unit = UNIT_NAMES[out.convention.x_unit]
    lo, hi = float(lx.min()), float(lx.max())
    da, db = float(beta[2]), float(beta[3])
    ahead_hi = out.a if da + db * hi > 0 else out.b
    if db == 0.0:
        out.crossover = f"parallel fits: no crossover ({ahead_hi} ahead throughout)"
        return
    xc = -da / db
    if lo <= xc <= hi:
        where = "inside the measured range"
    elif lo - np.log(CROSSOVER_REACH) <= xc <= hi + np.log(CROSSOVER_REACH):
        where = f"outside the measured range, within a factor {CROSSOVER_REACH:g} of it (extrapolated)"
    else:  # the lines meet far outside: one family is ahead at both ends of the range
        out.crossover = f"no crossover in range ({ahead_hi} ahead over the whole measured range)"
        return
    out.crossover_x = float(np.exp(xc))
    leader = out.a if db > 0 else out.b
    other = out.b if leader == out.a else out.a
    out.crossover = f"{leader} overtakes {other} above {out.crossover_x:.3g} {unit}, {where}"
    if not (out.slope_diff.lo > 0 or out.slope_diff.hi < 0):
        out.crossover += "; the slope difference's interval includes 0, so it is not established"


def family_comparisons(fams: list[FamilyScaling], cfg: ScalingConfig) -> tuple[list[FamilyComparison], list[str]]:
    pairs, notes = comparison_pairs(fams, cfg)
    return [compare_families(a, b) for a, b in pairs], notes
