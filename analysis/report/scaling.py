"""The scaling part of report.md and analysis.json: the fits and their checks, marginal returns and the family
comparisons, worded by their Holm-corrected p-values, and data as a compute axis (docs/analysis.md, *Scaling fits*,
*Family comparisons*, *Data as a compute axis*)."""
from __future__ import annotations

from typing import Any

import numpy as np

from core.results_layout import RUNS_FILE

from ..fits.axes import HELIX_CTR, HELIX_CVR_SLOPE, UNIT_NAMES
from ..fits.data_scaling import EXPONENT_BOUNDS, FLOPS_PER_PARAM_TARGET, FORM, HUBER_DELTA, DataScaling
from ..fits.family_comparison import FamilyComparison, PairedContrast
from ..fits.forms import ALPHA_BOUNDS, TARGET_STEP, FormCheck, FormResult, interval_text
from ..fits.marginal_returns import STEP_EFFECT, MarginalReturns
from ..fits.reference import slope_range
from ..fits.scaling import FamilyScaling
from ..result import AnalysisResult
from ..stats.paired import ALPHA, BOOTSTRAP_METHOD, Estimate, SeedInterval
from .section import METHOD_POINTER, Section, as_json, bound_text, figures, markdown_table, metric_label, num
from .section import estimate_text as _est
from .section import signed_delta as _delta
from .section import table_block as _block

#: Held-out RMSE beyond this many seed SEs of a size mean is lack of fit (2 SE: about the 95% range of a mean).
HELD_OUT_LIMIT = 2.0


def _seeds(n: float) -> str:
    return "–" if not np.isfinite(n) and n != np.inf else ("> 1000" if n == np.inf else f"{n:.0f}")


# ----------------------------------------------------------------------------------------------
# power law of the gain


def _power_rows(res) -> list[list[str]]:
    rows = []
    for f in res.scaling:
        fit, n_all = f.fit, len(f.points)
        if fit is None:
            rows.append([f.family, f.gain_label, f"0/{n_all} × {f.n_seeds}", "–", "–", "–", "–", "–",
                         "; ".join(f.notes) or "–"])
            continue
        lo, hi = slope_range(f.reference_slopes)
        rng = "–" if not f.reference_slopes else f"{num(lo, '.3f')} … {num(hi, '.3f')} ({len(f.reference_slopes)} refs)"
        pp = fit.slope_ci_per_point
        rows.append([f.family, f.gain_label, f"{fit.n_points}/{n_all} × {fit.n_seeds} ({fit.n_obs} points)",
                     f"{fit.slope:.3f} [{num(fit.slope_ci[0], '.3f')}, {num(fit.slope_ci[1], '.3f')}] (df {fit.df})",
                     ", ".join(f"{v:.3f}" for v in fit.seed_slopes.values()),
                     f"[{num(pp[0], '.3f')}, {num(pp[1], '.3f')}]", num(fit.r2_means, ".3f"), rng,
                     "; ".join(f.notes) or "–"])
    return rows


# ----------------------------------------------------------------------------------------------
# forms


def _interval(i: SeedInterval | None, fmt: str = ".3g") -> str:
    return "" if i is None or np.isnan(i.lo) else " " + interval_text(i.lo, i.hi, fmt)


def _params(r: FormResult) -> str:
    if not r.identified:
        return (f"not identified (exponent at a bound of {ALPHA_BOUNDS[0]:g}-{ALPHA_BOUNDS[1]:g}; "
                "the curve still predicts)")
    return "; ".join(f"{k} {num(v, '.4g')}{_interval(r.intervals.get(k), '.4g')}" for k, v in r.params.items()) or "–"


def _in_se(x: float, se: float) -> str:
    return "–" if not np.isfinite(x) else f"{x:+.4g} ({x / se:+.1f} SE)" if se > 0 else f"{x:+.4g}"


def lack_of_fit_words(r: FormResult, seed_se: float) -> str:
    """The lack-of-fit verdict of a form (docs/analysis.md, "Three forms, held out and tested")."""
    if not r.params:
        return "; ".join(r.notes)
    if not np.isfinite(r.lof_p):
        stat = "F test not possible: " + ("; ".join(r.notes) or "no pure error")
    else:
        stat = f"F({r.lof_df[0]}, {r.lof_df[1]}) = {r.lof_f:.2f}, p {r.lof_p:.3g}, Holm p {num(r.lof_p_holm)}"
    if np.isfinite(r.lof_p_holm) and r.lof_p_holm < ALPHA:
        return f"**lack of fit** ({stat})"
    if seed_se > 0 and np.isfinite(r.rmse) and r.rmse > HELD_OUT_LIMIT * seed_se:
        return f"**lack of fit on held-out sizes** (RMSE {r.rmse / seed_se:.1f} seed SEs > {HELD_OUT_LIMIT:g}; {stat})"
    return f"no lack of fit detected ({stat})"


def _form_rows(res) -> list[list[str]]:
    rows = []
    for f in res.scaling:
        check = f.forms
        if check is None:
            continue
        for r in check.forms:
            best = " **best**" if r.form == check.best else ""
            rows.append([f.family, metric_label(f.metric), r.form + best, _params(r),
                         "–" if not r.held_out else f"{num(r.rmse, '.4g')} ({r.rmse / check.seed_se:.1f} SE)",
                         "–" if r.largest is None else f"{r.largest.label}: {_in_se(r.largest.error, check.seed_se)}",
                         lack_of_fit_words(r, check.seed_se)])
    return rows


def _best_lines(res) -> list[str]:
    out = []
    for f in res.scaling:
        c: FormCheck | None = f.forms
        if c is None or c.best is None:
            continue
        margin = ("" if not np.isfinite(c.best_margin_se) else
                  f", ahead of the next form by {c.best_margin_se:.1f} seed SEs of a size mean"
                  + (" (not told apart at these seeds)" if c.best_margin_se < 2 else ""))
        out.append(f"- {f.family}, {metric_label(f.metric)}: smallest leave-one-size-out error: **{c.best}** "
                   f"(over {', '.join(c.compared_on)}{margin}; seed SE of a size mean {c.seed_se:.2g})")
    return out


def _extrapolation_rows(res) -> list[list[str]]:
    return [[f.family, metric_label(f.metric), e.form, f"{e.step:+.4g}",
             f"{e.words} {UNIT_NAMES[f.convention.x_unit]}" if e.determined else e.words]
            for f in res.scaling for e in f.extrapolations]


def _reference_rows(res) -> list[list[str]]:
    rows = []
    for f in res.scaling:
        if len(f.reference_slopes) < 2:
            continue
        lo, hi = slope_range(f.reference_slopes)
        each = "; ".join(f"{s.reference}{' (chosen)' if s.is_chosen else ''}: {num(s.slope, '.3f')}"
                         f" [{num(s.ci[0], '.3f')}, {num(s.ci[1], '.3f')}]" for s in f.reference_slopes)
        rows.append([f.family, f.gain_label, each, f"{num(lo, '.3f')} … {num(hi, '.3f')}"])
    return rows


# ----------------------------------------------------------------------------------------------
# points and marginal returns


def _points_section(res) -> list[str]:
    fams = [f for f in res.scaling if f.points]
    base = [f for f in fams if f.metric == "auc"] or fams
    if not base:
        return []
    gains = {(f.family, f.metric, p.label): p.gain for f in fams for p in f.points}
    metrics = list(dict.fromkeys(f.metric for f in fams))
    labels = {f.metric: f.gain_label for f in fams}
    oracle = any(np.isfinite(p.oracle_gap_closed) for f in base for p in f.points)
    header = ["family", "point", "forward MFLOPs / target", "x", "seeds",
              *[f"{labels[m]} (seed mean)" for m in metrics], *(["share of oracle gap closed"] if oracle else [])]
    rows = [[f.family, p.size_label, num(p.flops / 1e6, ".4g"), num(p.x, ".4g"), str(p.n_seeds),
             *[num(gains.get((f.family, m, p.label), float("nan")), "+.4g") for m in metrics],
             *([num(p.oracle_gap_closed, ".1%")] if oracle else [])] for f in base for p in f.points]
    text = "" if oracle else f" No oracle AUC in {RUNS_FILE} (only synthetic logs know it): no share of the oracle gap."
    return _block("### Points of each fit", "Seed-mean gains over the reference (every run, as measured), x on the "
                  "fit's axis." + text, header, rows)


def _step_row(family: str, m: MarginalReturns, k: int) -> list[str]:
    s = m.steps[k]
    better = "yes" if s.improves else ("not testable" if not s.testable else "no")
    lo, hi = s.per_doubling_ci
    per = "–" if not np.isfinite(s.per_doubling) else f"{_delta(s.per_doubling)} [{_delta(lo)}, {_delta(hi)}]"
    return [family, metric_label(m.metric), f"{s.start} → {s.end}", num(s.flops_ratio, ".3g"), str(s.n),
            f"{_delta(s.mean)} ± {num(s.sd, '.5f')}", f"[{_delta(s.ci[0])}, {_delta(s.ci[1])}]", num(s.p_value, ".3g"),
            num(s.p_holm, ".3g"), per, _seeds(s.seeds_for_80), better]


def _marginal_section(res) -> list[str]:
    fams = [f for f in res.scaling if f.marginal is not None]
    if not fams:
        return []
    level = fams[0].marginal.level
    rows = [_step_row(f.family, f.marginal, k) for f in fams for k in range(len(f.marginal.steps))]
    verdicts = [f"- {f.family}, {metric_label(f.metric)}: **{f.marginal.verdict}**"
                + (f" ({'; '.join(f.marginal.notes)})" if f.marginal.notes else "") for f in fams]
    return _block("### Marginal returns",
                  "Each step from one point to the next by FLOPs: Δ = metric(next) − metric(previous), paired by seed; "
                  f"a step improves when its Holm p is below {ALPHA:g} ({METHOD_POINTER}, *Scaling fits*).",
                  ["family", "metric", "step", "FLOPs ratio", "seeds", "Δ mean ± sd", f"{level:.0%} CI", "p (t)",
                   "Holm p", "Δ per doubling [CI]", f"seeds for 80% at {STEP_EFFECT:g}", "improves"], rows,
                  *verdicts, "")


def _helix_lines(res) -> list[str]:
    fits = [f for f in res.scaling if f.helix is not None and f.fit is not None]
    if not fits:
        return []
    lines = [f"HELIX reports ln(dAUC) = {HELIX_CTR['slope']} ln C {HELIX_CTR['intercept']} (R² {HELIX_CTR['r2']}) "
             f"for CTR and slope {HELIX_CVR_SLOPE} for CVR: compare slopes, not heights (docs/analysis.md, "
             "*Comparing with the papers*).", ""]
    lines += [f"- {f.family} ({f.gain_label}): {f.helix.reason}" for f in fits if f.helix.comparable]
    by_reason: dict[str, list[str]] = {}
    for f in fits:
        if not f.helix.comparable:
            by_reason.setdefault(f.helix.reason, []).append(f"{f.family} ({f.gain_label})")
    lines += [f"- {', '.join(names)}: {reason}" for reason, names in by_reason.items()]
    return lines + [""]


def scaling_section(res: AnalysisResult) -> list[str]:
    out = ["## Scaling fits", ""]
    if not res.scaling:
        return out + (res.notes or [f"No `flops_per_target` in {RUNS_FILE}: no scaling fit."]) + [""]
    out += _block("### Power law of the gain, the seed as the unit",
                  f"Gain of each family over the reference **{res.scaling[0].reference}**, x on each family's axis "
                  f"({res.scaling[0].convention.x_label}): gain = e^intercept · x^slope ({METHOD_POINTER}, *Scaling "
                  "fits*).", ["family", "gain", "sizes fitted × seeds", "slope [95% CI, seeds]", "per-seed slopes",
                              "per-point interval (pseudo-replicated, not used)", "R² (means)", "slope over references",
                              "notes"], _power_rows(res))
    not_learned = sorted({f"- {n}" for f in res.scaling for n in f.not_learned})
    if not_learned:
        out += ["**Runs that did not learn** (left out of every fit, the marginal returns and the held-out checks):",
                "", *not_learned, ""]
    out += _block("### Which form? Three fits, held out and tested",
                  "Each family's metric against compute C: power law of the gain, log-linear and saturating; each "
                  f"size held out in turn, and a lack-of-fit F test ({METHOD_POINTER}, *Scaling fits*).",
                  ["family", "metric", "form", "parameters [seed-bootstrap 95%]", "leave-one-size-out RMSE",
                   "largest size held out", "lack of fit"], _form_rows(res), *_best_lines(res), "")
    out += _block("### Reference sensitivity",
                  "The power-law slope against every setting of the reference architecture that the sweep contains.",
                  ["family", "gain", "slope [95% CI] per reference", "range"], _reference_rows(res))
    out += _block("### Compute for a further gain",
                  f"Compute at which each fitted form reaches its value at the largest size plus {TARGET_STEP:.1%} "
                  f"of that size's mean metric, with a seed-bootstrap interval ({METHOD_POINTER}).",
                  ["family", "metric", "form", "further gain", "compute (x of the largest size) [95%]"],
                  _extrapolation_rows(res))
    out += _points_section(res) + _marginal_section(res) + _helix_lines(res)
    return out + figures(res, "scaling_auc", "scaling_logloss", "forms_auc", "forms_logloss")


def _family_json(f: FamilyScaling) -> dict[str, Any]:
    return {
        "family": f.family, "arch": f.arch, "metric": f.metric, "reference": f.reference,
        "reference_value": f.ref_value, "n_seeds": f.n_seeds, **as_json(f.convention), "notes": f.notes,
        "points": [{"label": p.label, "setting": p.setting, "flops_per_target": p.flops, "x": p.x, "gain": p.gain,
                    "gain_per_seed": dict(zip(map(int, p.seeds), p.gain_per_seed.tolist())),
                    "value_per_seed": None if p.value_per_seed is None else
                    dict(zip(map(int, p.seeds), p.value_per_seed.tolist())),
                    "n_seeds": p.n_seeds, "oracle_gap_closed": p.oracle_gap_closed} for p in f.points],
        "not_learned": f.not_learned, "marginal_returns": as_json(f.marginal),
        "excluded_sizes": [p.label for p in f.excluded], "helix_ctr": as_json(f.helix),
        "fit": None if f.fit is None else as_json(f.fit, x_axis=f.convention.x_axis, x_unit=f.convention.x_unit),
        "reference_sensitivity": as_json(f.reference_slopes),
        "reference_slope_range": list(slope_range(f.reference_slopes)) if f.reference_slopes else None,
        "forms": None if f.forms is None else as_json(f.forms, forms=[
            as_json(r, lack_of_fit={"F": r.lof_f, "df": list(r.lof_df), "p": r.lof_p, "p_holm": r.lof_p_holm,
                                    "words": lack_of_fit_words(r, f.forms.seed_se)}) for r in f.forms.forms]),
        "compute_for_further_gain": as_json(f.extrapolations),
    }


SCALING = Section("scaling", scaling_section,
                  lambda res: {"scaling": [_family_json(f) for f in res.scaling], "scaling_notes": res.notes})


# ----------------------------------------------------------------------------------------------
# family comparisons


def contrast_words(c: PairedContrast | None, what: str) -> str:
    if c is None or not np.isfinite(c.p_value):
        return f"{what}: not testable"
    if np.isfinite(c.p_holm) and c.p_holm < ALPHA:
        return f"{what} differs (Holm p {c.p_holm:.3g})"
    return (f"no significant {what} difference (Holm p {num(c.p_holm)}; not evidence of equality: "
            f"{_seeds(c.seeds_for_80)} seeds for 80% power at {c.effect:g})")


def _contrast(c: PairedContrast | None, fmt: str) -> str:
    return "–" if c is None else f"{_est(c.estimate, fmt)}, p {num(c.p_value)}, Holm {num(c.p_holm)}"


def _comparison_rows(res) -> list[list[str]]:
    rows = []
    for c in res.comparisons:
        unit = UNIT_NAMES[c.convention.x_unit]
        iso = "–" if c.iso_x is None else f"{c.iso_x:.4g} {unit}"
        value = (f"{num(c.value_a, '.4f')} vs {num(c.value_b, '.4f')}" if c.iso_x is not None and np.isfinite(c.value_a)
                 else "–")
        rows.append([c.label, c.convention.gain_label(c.metric), str(c.n_seeds),
                     f"{c.slope_a:.3f} − {c.slope_b:.3f} = {_contrast(c.slope_diff, '+.3f')}",
                     _contrast(c.log_linear_diff, "+.4f"), iso, _est(c.gain_a, ".4g"), _est(c.gain_b, ".4g"),
                     _contrast(c.diff, "+.4g"), _est(c.ratio, ".3g"), value,
                     c.crossover + ("; " + "; ".join(c.notes) if c.notes else "")])
    return rows


def _comparison_words(c: FamilyComparison) -> list[str]:
    return [contrast_words(c.slope_diff, "power-law slope"), contrast_words(c.log_linear_diff, "log-linear slope"),
            contrast_words(c.diff, "gain at x*")]


def family_comparison_section(res: AnalysisResult) -> list[str]:
    return _block("## Family comparisons",
                  "A vs B for two families fitted against the same reference, metric and axes; x* is the geometric "
                  f"middle of the two measured ranges' overlap ({METHOD_POINTER}, *Family comparisons*).",
                  ["A vs B", "gain", "seeds", "slope A − B [95% CI]", "log-linear b A − B [95% CI]", "x* (iso-FLOP)",
                   "gain A at x*", "gain B at x*", "A − B at x*", "A / B at x*", "metric A vs B at x*", "crossover"],
                  _comparison_rows(res),
                  *[f"- {c.label} ({metric_label(c.metric)}): " + "; ".join(_comparison_words(c))
                    for c in res.comparisons], "")


FAMILY_COMPARISONS = Section("family comparisons", family_comparison_section, lambda res: {"family_comparisons": [
    as_json(c, **as_json(c.convention), words=_comparison_words(c)) for c in res.comparisons]})


# ----------------------------------------------------------------------------------------------
# data as a compute axis: L(N, D) (analysis/fits/data_scaling.py); an exponent whose interval reaches its bound or
# spans more than a factor 10 reads "not determined"


#: Computes shown in the frontier table: every FRONTIER_STEP-th row of the frontier grid.
FRONTIER_STEP = 4


def _determined(lo: float, hi: float) -> bool:
    return (np.isfinite(lo) and np.isfinite(hi) and lo > EXPONENT_BOUNDS[0] * 1.01
            and hi < EXPONENT_BOUNDS[1] * 0.99 and hi < 10 * lo)


def data_scaling_section(res: AnalysisResult) -> list[str]:
    ds, plots = res.data_scaling, res.plots
    if ds is None:
        return []
    label = f"{ds.split} {metric_label(ds.metric)}"
    out = ["## Data as a compute axis: L(N, D)", "",
           f"L(N, D) = E + A / N^alpha + B / D^beta fitted to {label} of every run ({len(ds.points)} runs, "
           f"{ds.n_seeds} seeds; N = non-embedding parameters, D = training targets seen), 95% seed-bootstrap "
           f"intervals ({METHOD_POINTER}, *Data as a compute axis*).", ""]
    out += [f"- left out: {d}" for d in ds.dropped] + [f"- note: {n}" for n in ds.notes]
    if ds.dropped or ds.notes:
        out.append("")
    if ds.surface is None:
        return out
    if ds.intervals:
        rows = [[k, _est(ds.intervals[k])] for k in ("E", "A", "B", "alpha", "beta")]
        rows.append(["beta / (alpha + beta) (N* ~ C^this)", _est(ds.intervals["n_exponent"])])
        out += markdown_table(["parameter", "estimate [95% seed-bootstrap interval]"], rows) + [""]
        words = []
        for k, axis in (("alpha", "model size"), ("beta", "data")):
            e = ds.intervals[k]
            words.append(f"the {axis} exponent {k} is {num(e.value)}" if _determined(e.lo, e.hi) else
                         f"the {axis} exponent {k} is not determined by these sizes (interval "
                         f"{bound_text(e.lo)} to {bound_text(e.hi)})")
        out += ["Reading: " + "; ".join(words) + ".", ""]
    if ds.held_out:
        rows = [[h.left_out, f"{h.n:,.0f}", f"{h.d:,.0f}", num(h.observed, ".4f"), num(h.predicted, ".4f"),
                 num(h.error, "+.4f"), num(h.error / h.se if h.se > 0 else float("nan"), "+.1f")]
                for h in ds.held_out]
        out += ["Form check on held-out sizes (refit without the largest D, then without the largest N):", ""]
        out += markdown_table(["left out", "N", "D", "observed", "predicted", "error", "error / seed SE"], rows)
        far = sum(abs(h.error) > 2 * h.se for h in ds.held_out)
        out += ["", f"{far} of {len(ds.held_out)} held-out cells miss by more than 2 seed SEs of their mean.", ""]
    if not ds.frontier.empty:
        f = ds.frontier.iloc[::FRONTIER_STEP]
        rows = [[f"{r.c:.3g}", _est(Estimate(r.n_opt, r.n_lo, r.n_hi)), _est(Estimate(r.d_opt, r.d_lo, r.d_hi)),
                 num(r.loss_opt, ".4f"), "yes" if r.measured else "no: extrapolated"] for r in f.itertuples()]
        out += [f"Compute-optimal allocation for C = {FLOPS_PER_PARAM_TARGET:g} N D (measured C: "
                f"{ds.measured_c[0]:.3g} to {ds.measured_c[1]:.3g} FLOPs):", ""]
        out += markdown_table(["C (FLOPs)", "N*(C) [95%]", "D*(C) [95%]", f"fitted {metric_label(ds.metric)}",
                               "N*, D* within the measured sizes?"], rows) + [""]
    if ds.counted_ratio:
        ratios = ", ".join(f"N = {n:,.0f}: {r:.2f}" for n, r in sorted(ds.counted_ratio.items()))
        out += [f"FLOP convention: C = 6 N D. The project's counted training FLOPs over 6 N D, per model size: "
                f"{ratios}.", ""]
    if np.isfinite(ds.detectable):
        out += [f"Detectable effect: the seeds' paired differences in {label} between neighbouring training-set "
                f"sizes have a median SD of {ds.seed_sd:.2g}; with {ds.n_seeds} seeds a paired t-test detects "
                f"a difference of {ds.detectable:.2g} at {ds.power:.0%} power ({ds.level:.0%} level).", ""]
    out += [f"![{n}]({plots[n]})" for n in ("isoflop", "frontier") if n in plots]
    return out + [""]


def _data_scaling_json(res: AnalysisResult) -> dict[str, Any]:
    ds = res.data_scaling
    if ds is None:
        return {}
    return {"data_scaling": {
        "form": FORM, "metric": ds.metric, "split": ds.split, "n_points": len(ds.points), "n_seeds": ds.n_seeds,
        "dropped": ds.dropped, "notes": ds.notes,
        "method": {"fit": f"Huber (delta {HUBER_DELTA:g}) on log residuals, grid of starts, L-BFGS-B",
                   "intervals": BOOTSTRAP_METHOD, "compute": f"C = {FLOPS_PER_PARAM_TARGET:g} N D"},
        "surface": as_json(ds.surface),
        "intervals": as_json(ds.intervals), "frontier": ds.frontier.to_dict(orient="records"),
        "measured_compute": list(ds.measured_c), "held_out": as_json(ds.held_out),
        "counted_training_flops_over_6nd": {str(int(n)): r for n, r in ds.counted_ratio.items()},
        "seed_sd_neighbouring_d": ds.seed_sd, "detectable_difference": ds.detectable,
    }}


DATA_SCALING = Section("data scaling", data_scaling_section, _data_scaling_json)


def data_scaling_lines(ds: DataScaling | None) -> list[str]:
    """The terminal summary's lines: the exponents with their intervals and the frontier's exponent."""
    if ds is None or ds.surface is None:
        return []
    head = f"data scaling  L(N, D) = E + A/N^alpha + B/D^beta on {ds.split} {metric_label(ds.metric)}"
    if not ds.intervals:
        return [head, "  an exponent ends at its bound: not determined by these sizes"]
    i = ds.intervals
    return [head, f"  E {_est(i['E'])}  alpha {_est(i['alpha'])}  beta {_est(i['beta'])}  (seed bootstrap)",
            f"  C = 6 N D: N* ~ C^{_est(i['n_exponent'])}; frontier table and figures in the report"]
