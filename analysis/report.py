"""report.md (tables + plot links), the machine-readable summary, and the one-screen terminal summary."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .ablations import AblationResult
from .collect import SweepResults
from .config import HIGHER_IS_BETTER
from .plots import METRIC_NAMES
from .scaling import GAIN_LABELS, HELIX_CTR, HELIX_CVR_SLOPE, FamilyScaling


@dataclass
class AnalysisResult:
    results: SweepResults
    scaling: list[FamilyScaling]
    ablations: list[AblationResult]
    plots: dict[str, str] = field(default_factory=dict)  # name -> path relative to the sweep folder
    warnings: list[str] = field(default_factory=list)


def _f(x: float, fmt: str = ".3g") -> str:
    return "–" if x is None or not np.isfinite(x) else format(x, fmt)


def _delta(x: float) -> str:
    return "–" if not np.isfinite(x) else f"{x:+.5f}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def _overview(res: AnalysisResult) -> list[str]:
    runs = res.results.runs
    per_arch = runs.groupby("arch")["seed"].agg(["size", "nunique"])
    rows = [[a, str(int(r["size"])), str(int(r["nunique"]))] for a, r in per_arch.iterrows()]
    cfg = res.results.config
    return [
        f"# Analysis of sweep `{res.results.name}`", "",
        f"{len(runs)} finished runs. Baseline architecture: **{res.results.baseline}**. Metrics are on the "
        f"**{cfg.split}** split; significance level {cfg.alpha:g}, power {cfg.power:g} for the minimum detectable "
        f"effect, {cfg.n_resamples} bootstrap / permutation resamples (seed {cfg.seed}).", "",
        *_table(["architecture", "runs", "seeds"], rows), "",
    ]


def _scaling_section(res: AnalysisResult) -> list[str]:
    if not res.scaling:
        return ["## Scaling", "", "No FLOPs per target in runs.parquet: no scaling fit.", ""]
    out = ["## Scaling", "",
           "Fit: ln(gain) = intercept + slope · ln(FLOPs per target), scipy.stats.linregress over seed-mean "
           "points with a positive gain; slope interval: 2.5–97.5% over seed resamples; held-out: refit without "
           "the largest-compute point and predict it (ln error = ln(predicted / observed)).", ""]
    rows, excluded = [], []
    for f in res.scaling:
        fit = f.fit
        n_all = len(f.points)
        if fit is None:
            rows.append([f.family, GAIN_LABELS[f.metric], f"0/{n_all}", "–", "–", "–", "–", "–", "; ".join(f.notes)])
        else:
            ho = fit.held_out
            held = "–" if ho is None else (f"{ho.label}: observed {ho.observed:.3g}, predicted {ho.predicted:.3g}, "
                                           f"ln error {_f(ho.log_error, '+.2f')}")
            rows.append([f.family, GAIN_LABELS[f.metric], f"{fit.n_points}/{n_all}",
                         f"{fit.slope:.3f} ± {_f(fit.slope_se, '.3f')}",
                         f"[{_f(fit.slope_ci[0], '.3f')}, {_f(fit.slope_ci[1], '.3f')}]",
                         f"{fit.intercept:.3f} ± {_f(fit.intercept_se, '.3f')}", f"{fit.r2:.3f}", held,
                         "; ".join(f.notes) or "–"])
        excluded += [f"- {p.label} at {p.flops / 1e6:.4g} MFLOPs: {GAIN_LABELS[f.metric]} = {_f(p.gain, '+.3g')} "
                     f"(vs {f.reference}) — left out of the log fit" for p in f.excluded]
    out += _table(["family", "gain", "points fitted", "slope ± SE", "slope 95% CI", "intercept ± SE", "R²",
                   "held-out check", "notes"], rows)
    out += [""]
    if excluded:
        out += ["**Points with a gain ≤ 0** (no logarithm; listed, not fitted):", "", *excluded, ""]
    out += [f"Reference: HELIX reports ln(dAUC) = {HELIX_CTR['slope']} ln C {HELIX_CTR['intercept']} "
            f"(R² {HELIX_CTR['r2']}) for CTR and slope {HELIX_CVR_SLOPE} for CVR, with a different reference "
            "model, FLOP accounting (C read here as GFLOPs per sample) and data; compare slopes, not heights.", ""]
    for name in ("scaling_auc", "scaling_logloss"):
        if name in res.plots:
            out += [f"![{name}]({res.plots[name]})", ""]
    return out


def _ablation_rows(res: AnalysisResult, metric: str) -> list[list[str]]:
    rows = []
    for r in res.ablations:
        mc = r.metrics.get(metric)
        if mc is None:
            continue
        s = mc.stats
        rows.append([r.label, str(s.n), _delta(s.mean), _f(s.std, ".2g"),
                     f"[{_delta(s.ci_low)}, {_delta(s.ci_high)}]", _f(s.p_t), _f(s.p_wilcoxon), _f(s.p_permutation),
                     _f(mc.p_holm), _f(s.mde, ".2g"), f"**{mc.verdict}**" if mc.verdict else "–"])
    return rows


def _ablation_section(res: AnalysisResult) -> list[str]:
    if not res.ablations:
        return ["## Ablations", "", "No comparisons (a single architecture and no `analysis.comparisons`).", ""]
    alpha = res.results.config.alpha
    out = ["## Ablations: seed variance and significance", "",
           "Delta = A − B per seed, runs paired by seed and every shared setting. p (t): paired t-test; "
           "p (W): Wilcoxon signed-rank; p (flip): sign-flip permutation; p Holm: paired t p-value after Holm's "
           "correction across the comparisons of this report (per metric), which gives the verdict. "
           f"MDE: smallest true delta a paired t-test detects with power {res.results.config.power:g} "
           "at this seed spread and count.", ""]
    header = ["comparison", "seeds", "mean Δ", "sd", "95% BCa", "p (t)", "p (W)", "p (flip)", "p Holm", "MDE",
              "verdict"]
    for m in res.results.config.metrics:
        rows = _ablation_rows(res, m)
        if rows:
            better = "higher" if HIGHER_IS_BETTER[m] else "lower"
            out += [f"### {res.results.config.split} {METRIC_NAMES[m]} ({better} is better)", "",
                    *_table(header, rows), ""]
    if res.results.config.delong:
        rows = [[r.label, r.delong_summary(alpha),
                 ", ".join(f"{d.seed}: Δ {d.result.delta:+.4f}, z {d.result.z:+.2f}" for d in r.delong
                           if d.result is not None) or "–"] for r in res.ablations]
        out += ["### DeLong's paired AUC test per seed", "",
                "Test-set sampling noise for one trained pair; seed noise above is a separate, usually larger, "
                "source of variation.", "", *_table(["comparison", "DeLong", "per seed"], rows), ""]
    notes = sorted({f"- {r.label}: {n}" for r in res.ablations for m in r.metrics.values() for n in m.stats.notes}
                   | {f"- {r.label}: {n}" for r in res.ablations for n in r.paired.notes})
    if notes:
        out += ["Notes:", "", *notes, ""]
    for name in ("forest", "seed_strip"):
        if name in res.plots:
            out += [f"![{name}]({res.plots[name]})", ""]
    return out


def render_report(res: AnalysisResult) -> str:
    lines = _overview(res) + _scaling_section(res) + _ablation_section(res)
    extra = [n for n in ("groups", "settings") if n in res.plots]
    if extra:
        lines += ["## Grouped metrics and data settings", ""]
        lines += [f"![{n}]({res.plots[n]})" for n in extra] + [""]
    if res.warnings:
        lines += ["## Warnings", "", *[f"- {w}" for w in res.warnings], ""]
    return "\n".join(lines)


def terminal_summary(res: AnalysisResult, report_path: str) -> str:
    """A one-screen text summary (at most ~30 lines)."""
    out = [f"sweep {res.results.name}: {len(res.results.runs)} runs, baseline {res.results.baseline}"]
    fitted = [f for f in res.scaling if f.fit is not None and f.metric == "auc"]
    if fitted:
        out.append("scaling  ln(dAUC) = slope * ln(FLOPs) + b")
        for f in fitted[:8]:
            lo, hi = f.fit.slope_ci
            out.append(f"  {f.family[:34]:<34} slope {f.fit.slope:+.3f} [{_f(lo, '+.3f')}, {_f(hi, '+.3f')}]"
                       f"  R2 {f.fit.r2:.2f}  n={f.fit.n_points}")
    n_excluded = sum(len(f.excluded) for f in res.scaling)
    if n_excluded:
        out.append(f"  {n_excluded} point(s) with gain <= 0 left out of log fits (listed in the report)")
    if res.ablations:
        out.append("ablations  (test AUC, delta = A - B, Holm-adjusted paired t)")
        for r in res.ablations[:14]:
            mc = r.metrics.get("auc")
            if mc is None:
                continue
            out.append(f"  {r.label[:40]:<40} {_delta(mc.stats.mean)}  n={mc.stats.n}  p={_f(mc.p_holm, '.2g'):<6}"
                       f" {mc.verdict}")
        if len(res.ablations) > 14:
            out.append(f"  ... {len(res.ablations) - 14} more in the report")
    for w in res.warnings[:3]:
        out.append(f"warning: {w}")
    out.append(f"report: {report_path}")
    return "\n".join(out)


def summary_dict(res: AnalysisResult) -> dict[str, Any]:
    """JSON-ready summary of every number in the report."""
    def fam(f: FamilyScaling) -> dict[str, Any]:
        fit = f.fit
        return {
            "family": f.family, "metric": f.metric, "reference": f.reference, "notes": f.notes,
            "points": [{"label": p.label, "flops_per_target": p.flops, "gain": p.gain, "n_seeds": p.n_seeds}
                       for p in f.points],
            "excluded_non_positive": [p.label for p in f.excluded],
            "fit": None if fit is None else {
                "slope": fit.slope, "intercept": fit.intercept, "r2": fit.r2, "slope_se": fit.slope_se,
                "intercept_se": fit.intercept_se, "slope_ci": list(fit.slope_ci), "n_points": fit.n_points,
                "held_out": None if fit.held_out is None else {
                    "label": fit.held_out.label, "observed": fit.held_out.observed,
                    "predicted": fit.held_out.predicted, "log_error": fit.held_out.log_error}},
        }

    def abl(r: AblationResult) -> dict[str, Any]:
        return {
            "comparison": r.paired.comparison, "stratum": r.paired.stratum, "seeds": r.paired.seeds.tolist(),
            "metrics": {m: {"n": mc.stats.n, "deltas": list(mc.stats.deltas), "mean": mc.stats.mean,
                            "std": mc.stats.std, "ci": [mc.stats.ci_low, mc.stats.ci_high], "p_t": mc.stats.p_t,
                            "p_wilcoxon": mc.stats.p_wilcoxon, "p_permutation": mc.stats.p_permutation,
                            "p_holm": mc.p_holm, "mde": mc.stats.mde, "verdict": mc.verdict,
                            "notes": list(mc.stats.notes)} for m, mc in r.metrics.items()},
            "delong": [{"seed": d.seed, "note": d.note, **({} if d.result is None else {
                "auc_a": d.result.auc_a, "auc_b": d.result.auc_b, "z": d.result.z, "p": d.result.p_value})}
                for d in r.delong],
        }

    return {"sweep": res.results.name, "runs": len(res.results.runs), "baseline": res.results.baseline,
            "scaling": [fam(f) for f in res.scaling], "ablations": [abl(r) for r in res.ablations],
            "plots": res.plots, "warnings": res.warnings}
