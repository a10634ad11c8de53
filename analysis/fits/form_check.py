"""Does a form of analysis/fits/forms.py hold on this ladder? Bootstrap intervals, leave-one-size-out errors in
seed SEs, the lack-of-fit F test (Holm-corrected in family_comparison.py), the best form (docs/analysis.md)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from ..stats.bootstrap import SeedInterval
from .forms import FORMS, N_PARAMS, POWER_LAW, Ladder, open_seed_interval


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
    response = ladder.gains() if form == POWER_LAW else ladder.values  # [P, S]
    if form == POWER_LAW:
        ref = float(np.mean(ladder.ref))
        fitted = np.array([ladder.convention.gain_of(ladder.metric, curve.predict(lx), ref) for lx in ladder.lx])
    else:
        fitted = np.array([curve.predict(lx) for lx in ladder.lx])
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
    everything = range(len(ladder.x))
    for i in everything:
        if not np.isfinite(means[i]):
            continue
        rest = tuple(j for j in everything if j != i)
        predicted = ladder.predict(form, ladder.lx[i], sizes=rest)
        if np.isfinite(predicted):
            out.append(HeldOutError(ladder.labels[i], float(means[i]), predicted))
    return out


def _intervals(ladder: Ladder, form: str, names: list[str]) -> dict[str, SeedInterval]:
    def statistic(name):
        def of(idx: np.ndarray) -> float:
            curve = ladder.fit(form, seeds=tuple(idx))
            return float("nan") if curve is None or not curve.identified else curve.params[name]
        return of
    return {name: open_seed_interval(ladder.n_seeds, statistic(name)) for name in names}


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
