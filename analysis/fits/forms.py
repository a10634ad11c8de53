"""The three forms of a scaling ladder fitted on a `Ladder` that caches every fit, their checks (`check_forms`) and the
compute each needs for a further gain (docs/analysis.md, *Scaling fits*)."""
from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial

import numpy as np
from scipy import optimize, stats

from ..stats.paired import LEVEL, SeedInterval, seed_interval
from .axes import Convention
from .data_scaling import FORM as LOSS_SURFACE
from .powerlaw import PARAMETERS, seed_lines

POWER_LAW = "power law of the gain"
LOG_LINEAR = "log-linear"
SATURATING = "saturating"
#: Forms fitted by an iterative optimiser (the L(N, D) surface of data_scaling.py too): a re-analysis on another CPU
#: kind compares them at the optimiser's precision (docs/reproducibility.md).
ITERATIVE_FORMS = (SATURATING, LOSS_SURFACE)
FORMS = (POWER_LAW, LOG_LINEAR, SATURATING)
N_PARAMS = {POWER_LAW: PARAMETERS, LOG_LINEAR: 2, SATURATING: 3}
ALPHA_BOUNDS = (1e-3, 5.0)
ALPHA_GRID = np.geomspace(ALPHA_BOUNDS[0], ALPHA_BOUNDS[1], 40)
N_STARTS = 3
LOSS = "soft_l1"


#: Where the seed bootstrap puts a draw whose statistic is out of reach (inf) or undefined (NaN): far enough that
#: a percentile interpolated towards it is beyond UNBOUNDED, which no statistic here reaches.
BEYOND = 1e150
UNBOUNDED = 1e148


def open_seed_interval(n_seeds: int, statistic: Callable[[np.ndarray], float]) -> SeedInterval:
    """The seed bootstrap's percentile interval, an end the draws do not bound as -inf / +inf (docs/analysis.md)."""
    ci = seed_interval(n_seeds, statistic, clip=(-BEYOND, BEYOND))
    lo, hi = (float(np.copysign(np.inf, v)) if abs(v) >= UNBOUNDED else v for v in (ci.lo, ci.hi))
    return replace(ci, lo=lo, hi=hi)


def interval_text(lo: float, hi: float, fmt: str = ".3g") -> str:
    """"[lo, hi]", an infinite end as "unbounded below" / "unbounded above" (NaN as an en dash)."""
    def end(v: float) -> str:
        return f"unbounded {'above' if v > 0 else 'below'}" if np.isinf(v) else "–" if np.isnan(v) else format(v, fmt)
    return f"[{end(lo)}, {end(hi)}]"


@dataclass
class Curve:
    form: str
    params: dict[str, float]  # NaN where the fit does not identify them
    predict: Callable[[np.ndarray], np.ndarray]  # ln C -> y
    identified: bool = True  # False: a saturating fit whose exponent sits at a bound (see fit_saturating)


#: least_squares' stopping tolerances, far below the default 1e-8 (docs/reproducibility.md).
FIT_TOL = 1e-14
#: A saturating exponent within this relative distance of ALPHA_BOUNDS counts as at the bound.
BOUND_SLACK = 1e-6


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
    best = min((optimize.least_squares(lambda p: _saturating(p, q, sign) - y, start,
                                       jac=lambda p: _jacobian(p, q, sign), loss=LOSS, f_scale=f_scale, ftol=FIT_TOL,
                                       xtol=FIT_TOL, gtol=FIT_TOL,
                                       bounds=([-np.inf, 0.0, ALPHA_BOUNDS[0]], [np.inf, np.inf, ALPHA_BOUNDS[1]]))
                for start, _ in projected[:N_STARTS]), key=lambda res: res.cost)  # the first of the lowest cost
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


@dataclass
class Ladder:
    metric: str
    labels: list[str]  # [P] ordered by compute
    x: np.ndarray  # [P] compute on the fit's axis
    values: np.ndarray  # [P, S] the metric per size and seed, NaN where missing
    ref: np.ndarray  # [S] the reference metric per seed
    seeds: np.ndarray  # [S]
    higher_is_better: bool
    convention: Convention
    _cache: dict = field(default_factory=dict, repr=False)

    @property
    def lx(self) -> np.ndarray:
        return np.log(self.x)

    @property
    def n_seeds(self) -> int:
        return len(self.seeds)

    def gains(self) -> np.ndarray:
        return self.convention.gain_of(self.metric, self.values, self.ref[None, :])  # [P, S]

    def size_means(self) -> np.ndarray:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return np.nanmean(self.values, axis=1)  # [P]

    def seed_sd(self) -> float:
        """Pooled within-size sample sd of the metric over seeds (the seed noise of one run)."""
        dev, df = 0.0, 0
        for row in self.values:
            ok = row[np.isfinite(row)]
            if len(ok) >= 2:
                dev += float(((ok - ok.mean()) ** 2).sum())
                df += len(ok) - 1
        return float(np.sqrt(dev / df)) if df else float("nan")

    def points(self, sizes: tuple[int, ...], seeds: tuple[int, ...]):
        """(ln x, metric, gain, seed position) of the finite points of `sizes` x `seeds` (seeds may repeat;
        a repeated seed gets its own position so that per-seed lines stay separate)."""
        who, p = np.meshgrid(np.arange(len(seeds)), np.array(sizes, dtype=np.int64), indexing="ij")  # seed-major
        j = np.array(seeds, dtype=np.int64)[who]
        ok = np.isfinite(self.values[p, j])
        return np.log(self.x[p[ok]]), self.values[p, j][ok], self.gains()[p, j][ok], who[ok]

    def unfitted(self, form: str) -> str:
        """Why `form` is not fitted on the whole ladder ("" when it is)."""
        n = int(np.isfinite(self.size_means()).sum())
        return f"not fitted: {N_PARAMS[form]} parameters on {n} size{'s' * (n != 1)}" if N_PARAMS[form] >= n else ""

    def fit(self, form: str, sizes: tuple[int, ...] | None = None,
            seeds: tuple[int, ...] | None = None) -> Curve | None:
        """`form` on `sizes` (default: every size, None when `unfitted`) and `seeds` (default: every seed)."""
        if sizes is None and self.unfitted(form):
            return None
        sizes = tuple(range(len(self.x))) if sizes is None else tuple(sizes)
        seeds = tuple(range(self.n_seeds)) if seeds is None else tuple(sorted(int(s) for s in seeds))
        key = (form, sizes, seeds)
        if key not in self._cache:
            self._cache[key] = self._fit(form, sizes, seeds)
        return self._cache[key]

    def _fit(self, form: str, sizes: tuple[int, ...], seeds: tuple[int, ...]) -> Curve | None:
        lx, y, g, who = self.points(sizes, seeds)
        if len(lx) == 0:
            return None
        if form == LOG_LINEAR:
            if len(np.unique(lx)) < 2:
                return None
            b, a = np.polyfit(lx, y, 1)
            return Curve(LOG_LINEAR, {"a": float(a), "b": float(b)}, lambda q: a + b * np.asarray(q))
        if form == SATURATING:
            return fit_saturating(lx, y, higher_is_better=self.higher_is_better, scale=self.seed_sd())
        ok = np.isfinite(g)  # the mean of the per-seed power laws of the gain (analysis/fits/powerlaw.py)
        lines = seed_lines(lx[ok], g[ok], who[ok])
        if not lines:
            return None
        b, a = (float(np.mean(v)) for v in zip(*lines.values()))
        ref_mean = float(np.mean(self.ref[list(seeds)]))
        return Curve(POWER_LAW, {"intercept": a, "slope": b},
                     lambda q: self.convention.value_of(self.metric, np.exp(a + b * np.asarray(q)), ref_mean))


@dataclass(frozen=True)
class HeldOutError:
    label: str
    observed: float  # seed-mean metric of the left-out size
    predicted: float  # from the fit without it

    @property
    def error(self) -> float:
        return self.predicted - self.observed


@dataclass
class FormResult:
    form: str
    params: dict[str, float]
    intervals: dict[str, SeedInterval]
    held_out: list[HeldOutError]  # leave-one-size-out, every size the form could predict
    largest: HeldOutError | None  # the largest-compute size left out
    lof_f: float = float("nan")
    lof_df: tuple[int, int] = (0, 0)
    lof_p: float = float("nan")
    lof_p_holm: float = float("nan")  # set by the report over every form test
    notes: list[str] = field(default_factory=list)
    identified: bool = True  # False: the fit predicts but does not determine its parameters (analysis/fits/forms.py)

    @property
    def rmse(self) -> float:
        e = np.array([h.error for h in self.held_out if np.isfinite(h.error)])
        return float(np.sqrt((e**2).mean())) if len(e) else float("nan")


@dataclass
class FormCheck:
    metric: str
    seed_sd: float  # pooled within-size sd of the metric over seeds
    seed_se: float  # seed_sd / sqrt(seeds): the noise of a size mean
    forms: list[FormResult]
    best: str | None = None
    best_margin_se: float = float("nan")  # (next RMSE - best RMSE) / seed SE
    compared_on: list[str] = field(default_factory=list)  # sizes every compared form predicted

    def form(self, name: str) -> FormResult | None:
        return next((f for f in self.forms if f.form == name), None)


def _lack_of_fit(ladder: Ladder, form: str) -> tuple[float, tuple[int, int], float]:
    curve = ladder.fit(form)
    nan = float("nan")
    if curve is None:
        return nan, (0, 0), nan
    if form == POWER_LAW:  # the response the form is fitted to, [P, S], and its fitted value per size
        ref = float(np.mean(ladder.ref))
        response = ladder.gains()
        fitted = np.array([ladder.convention.gain_of(ladder.metric, curve.predict(lx), ref) for lx in ladder.lx])
    else:
        response, fitted = ladder.values, np.array([curve.predict(lx) for lx in ladder.lx])
    ss_lof = ss_pe = 0.0
    n = p = 0
    for i, row in enumerate(response):
        ok = row[np.isfinite(row)]
        if not len(ok):
            continue
        p += 1
        n += len(ok)
        ss_lof += len(ok) * float(ok.mean() - fitted[i]) ** 2
        ss_pe += float(((ok - ok.mean()) ** 2).sum())
    df = (p - N_PARAMS[form], n - p)
    if df[0] <= 0 or df[1] <= 0 or ss_pe <= 0:
        return nan, df, nan
    f = (ss_lof / df[0]) / (ss_pe / df[1])
    return float(f), df, float(stats.f.sf(f, *df))


def _held_out(ladder: Ladder, form: str, means: np.ndarray) -> list[HeldOutError]:
    out = []
    for i in np.flatnonzero(np.isfinite(means)):
        curve = ladder.fit(form, sizes=tuple(j for j in range(len(ladder.x)) if j != i))
        predicted = float("nan") if curve is None else float(curve.predict(np.array(ladder.lx[i])))
        if np.isfinite(predicted):
            out.append(HeldOutError(ladder.labels[i], float(means[i]), predicted))
    return out


def _intervals(ladder: Ladder, form: str, names: list[str]) -> dict[str, SeedInterval]:
    def param(idx: np.ndarray, name: str) -> float:
        curve = ladder.fit(form, seeds=tuple(idx))
        return float("nan") if curve is None or not curve.identified else curve.params[name]
    return {name: open_seed_interval(ladder.n_seeds, partial(param, name=name)) for name in names}


def check_forms(ladder: Ladder) -> FormCheck:
    """Fit every form on the ladder and check it on held-out sizes and for lack of fit."""
    means = ladder.size_means()
    seed_sd = ladder.seed_sd()
    results = []
    for form in FORMS:
        curve = ladder.fit(form)
        if curve is None:
            results.append(FormResult(form, {}, {}, [], None,
                                      notes=[ladder.unfitted(form) or "cannot be fitted on these points"]))
            continue
        held = _held_out(ladder, form, means)
        top = int(np.nanargmax(np.where(np.isfinite(means), ladder.x, np.nan)))
        largest = next((h for h in held if h.label == ladder.labels[top]), None)
        f, df, p = _lack_of_fit(ladder, form)
        intervals = _intervals(ladder, form, list(curve.params)) if curve.identified else {}
        results.append(FormResult(form, dict(curve.params), intervals, held, largest, f, df, p,
                                  identified=curve.identified))
    check = FormCheck(ladder.metric, seed_sd, seed_sd / np.sqrt(ladder.n_seeds), results)
    _best(check)
    return check


def _best(check: FormCheck) -> None:
    candidates = [f for f in check.forms if f.held_out]
    if not candidates:
        return
    common = set.intersection(*({h.label for h in f.held_out} for f in candidates))
    if len(common) < 2:  # compare the forms that predict most sizes
        most = max(len(f.held_out) for f in candidates)
        candidates = [f for f in candidates if len(f.held_out) == most]
        common = set.intersection(*({h.label for h in f.held_out} for f in candidates))

    def rmse(f: FormResult) -> float:
        e = np.array([h.error for h in f.held_out if h.label in common])
        return float(np.sqrt((e**2).mean()))

    ranked = sorted(candidates, key=rmse)
    check.best = ranked[0].form
    check.compared_on = [h.label for h in ranked[0].held_out if h.label in common]
    if len(ranked) > 1 and check.seed_se > 0:
        check.best_margin_se = (rmse(ranked[1]) - rmse(ranked[0])) / check.seed_se


TARGET_STEP = 0.001
REACH = 10.0
SEARCH_REACH = 1e6
GRID = 400


@dataclass(frozen=True)
class ComputeForGain:
    form: str
    step: float  # the further gain asked for, in metric units (signed: + for AUC, - for LogLoss)
    x: float  # compute on the fit's axis where the fitted curve reaches it (inf: never)
    interval: SeedInterval  # on x
    determined: bool
    words: str


def _further(curve: Curve | None, step: float, start_lx: float, higher_is_better: bool) -> float:
    """ln C >= start_lx where `curve` first gains `step` over its value at start_lx; +inf if it does not within
    SEARCH_REACH."""
    if curve is None:
        return float("nan")
    target = float(curve.predict(np.array(start_lx))) + step
    sign = 1.0 if higher_is_better else -1.0
    grid = np.linspace(start_lx, start_lx + np.log(SEARCH_REACH), GRID)
    short = sign * (np.asarray(curve.predict(grid), dtype=np.float64) - target)  # >= 0 once reached
    reached = np.flatnonzero(short >= 0)
    if not len(reached):
        return float("inf")
    k = int(reached[0])
    if k == 0:
        return float(grid[0])
    return float(optimize.brentq(lambda q: sign * (float(curve.predict(np.array(q))) - target), grid[k - 1], grid[k]))


def compute_for_gain(ladder: Ladder, form: str) -> ComputeForGain | None:
    means = ladder.size_means()
    finite = np.flatnonzero(np.isfinite(means))
    if not len(finite):
        return None
    top = int(finite[np.argmax(ladder.x[finite])])
    step = TARGET_STEP * abs(means[top]) * (1.0 if ladder.higher_is_better else -1.0)
    start = float(ladder.lx[top])
    central = _further(ladder.fit(form), step, start, ladder.higher_is_better)
    if np.isnan(central):
        return None
    ci = open_seed_interval(ladder.n_seeds, lambda idx: _further(ladder.fit(form, seeds=tuple(idx)), step, start,
                                                                 ladder.higher_is_better))
    interval = replace(ci, lo=float(np.exp(ci.lo)), hi=float(np.exp(ci.hi)))
    x_top = float(ladder.x[top])
    determined = bool(np.isfinite(central) and np.isfinite(ci.hi) and ci.hi <= start + np.log(REACH)
                      and ci.undefined_share <= (1 - LEVEL) / 2)
    x = float(np.exp(central))
    shown = interval_text(interval.lo, interval.hi)
    if determined:
        words = f"{x:.3g} ({x / x_top:.3g}x the largest size) {shown}"
    elif not np.isfinite(central):
        words = "not determined: the fitted curve does not reach it (unbounded above)"
    else:
        words = (f"not determined: {x:.3g} ({x / x_top:.3g}x the largest size) but the interval {shown} leaves the "
                 f"measured range by more than a factor {REACH:g}")
    return ComputeForGain(form, step, x, interval, determined, words)


def extrapolations(ladder: Ladder) -> list[ComputeForGain]:
    return [e for e in (compute_for_gain(ladder, form) for form in FORMS) if e is not None]

