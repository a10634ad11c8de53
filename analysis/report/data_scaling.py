"""The report's "Data as a compute axis" section and terminal lines (analysis/fits/data_scaling.py); an exponent
whose interval reaches its bound or spans more than a factor 10 reads "not determined"."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..fits.data_scaling import EXPONENT_BOUNDS, FLOPS_PER_PARAM_TARGET, FORM, HUBER_DELTA, DataScaling
from ..result import AnalysisResult
from ..stats.paired import BOOTSTRAP_METHOD, Estimate
from .section import METHOD_POINTER, Section, as_json, bound_text, markdown_table, metric_label, num
from .section import estimate_text as _est

#: Computes shown in the frontier table: every FRONTIER_STEP-th row of the frontier grid.
FRONTIER_STEP = 4


def _determined(lo: float, hi: float) -> bool:
    return (np.isfinite(lo) and np.isfinite(hi) and lo > EXPONENT_BOUNDS[0] * 1.01
            and hi < EXPONENT_BOUNDS[1] * 0.99 and hi < 10 * lo)


def _section(res: AnalysisResult) -> list[str]:
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


def _json(res: AnalysisResult) -> dict[str, Any]:
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


DATA_SCALING = Section("data scaling", _section, _json)


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
