"""report.md (tables + plot links), the machine-readable summary, and the terminal summary.

Order, headline first: the per-architecture table; the comparisons (gain over the baseline, Holm verdicts);
the scaling fits (slope with its interval, R^2, held-out check, axis and unit), their points (gain, share of
the oracle gap closed) and marginal returns along each ladder; the family comparisons.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness import metric_registry

from .ablations import AblationResult
from .axes import UNIT_NAMES
from .collect import SweepResults
from .expectations import ExpectationResult, expectation_dicts, expectation_section
from .family_comparison import METHOD as COMPARISON_METHOD
from .family_comparison import Estimate, FamilyComparison
from .headline import Headline
from .marginal_returns import METHOD as MARGINAL_METHOD
from .marginal_returns import MarginalReturns
from .papers import HELIX_CTR, HELIX_CVR_SLOPE
from .powerlaw import BAND_METHOD, CI_METHOD
from .protocol_evidence import ArmFacts
from .protocol_report import answer_lines, protocol_dict, protocol_section
from .rank_comparison import RankComparison
from .curves import curves_section
from .run_health import health_dict, health_section
from .gain_reference import Reference
from .scaling import FamilyScaling


@dataclass
class AnalysisResult:
    results: SweepResults
    scaling: list[FamilyScaling]
    ablations: list[AblationResult]
    headline: Headline | None = None
    comparisons: list[FamilyComparison] = field(default_factory=list)
    reference: Reference | None = None
    plots: dict[str, str] = field(default_factory=dict)  # name -> path relative to the sweep folder
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # scaling notes that are not warnings
    group_note: str = ""  # why there is no grouped-metric plot
    #: expected runs (rows of runs.parquet) whose run folder or files could not be read, one message each
    unread_runs: list[str] = field(default_factory=list)
    #: comparisons that vary a data setting: target sharing and history membership, by ablation index
    arm_facts: dict[int, ArmFacts] = field(default_factory=dict)
    ranks: RankComparison | None = None  # rank order of the models per data arm, DiDs between arms
    #: claims of `analysis.expectations` checked on this sweep (`analysis.expectations`)
    expectations: list[ExpectationResult] = field(default_factory=list)
    health: Any = None  # analysis.run_health.RunHealth: every run's status, the runs left out


def _label(metric: str) -> str:
    """The registered display label ("AUC", "LogLoss")."""
    return metric_registry.get(metric).label


def _f(x: float | None, fmt: str = ".3g") -> str:
    return "–" if x is None or not np.isfinite(x) else format(x, fmt)


def _delta(x: float) -> str:
    return "–" if not np.isfinite(x) else f"{x:+.5f}"


def _est(e: Estimate | None, fmt: str = ".3g") -> str:
    return "–" if e is None else f"{_f(e.value, fmt)} [{_f(e.lo, fmt)}, {_f(e.hi, fmt)}]"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def _pm(pair: tuple[float, float], fmt: str = ".4f") -> str:
    mean, sd = pair
    return "–" if not np.isfinite(mean) else f"{mean:{fmt}} ± {_f(sd, fmt)}"


# ----------------------------------------------------------------------------------------------
# headline


def _headline_rows(h: Headline) -> list[list[str]]:
    rows = []
    for r in h.rows:
        label = r.label + (" (reference)" if r.is_reference else "")
        row = [label, str(r.n_seeds), *([r.health] if h.has_health else []), _pm(r.auc), _pm(r.logloss), _f(r.flops_per_target / 1e6, ".4g")]
        if h.has_params:
            row.append("–" if not np.isfinite(r.params_non_embedding) else f"{r.params_non_embedding:,.0f}")
        if h.has_oracle:
            row += [_f(r.oracle_auc, ".4f"), "–" if not np.isfinite(r.share_oracle_gap) else f"{r.share_oracle_gap:.1%}"]
        rows.append(row)
    return rows


def _headline_header(h: Headline, split: str) -> list[str]:
    header = ["architecture (setting)", "seeds", *(["runs (health)"] if h.has_health else []), f"{split} AUC mean ± sd", f"{split} LogLoss mean ± sd",
              "forward MFLOPs / target"]
    if h.has_params:
        header.append("non-embedding params")
    if h.has_oracle:
        header += ["oracle AUC", "share of oracle gap closed"]
    return header


def _overview(res: AnalysisResult) -> list[str]:
    runs, cfg = res.results.runs, res.results.config
    out = [f"# Analysis of sweep `{res.results.name}`", "",
           f"{len(runs)} finished runs. Baseline architecture: **{res.results.baseline}**. Metrics are on the "
           f"**{cfg.split}** split; significance level {cfg.alpha:g}, power {cfg.power:g} for the minimum detectable "
           f"effect, {cfg.n_resamples} bootstrap / permutation resamples (seed {cfg.seed}).", ""]
    h = res.headline
    if h is None:
        return out
    out += ["## Results per architecture", "",
            "Mean ± sample sd over seeds of each architecture and model setting."
            + (f" Share of the oracle gap closed = mean(AUC − AUC_ref) / mean(AUC_oracle − AUC_ref) over the seeds "
               f"shared with the reference {h.reference} (paired by seed), oracle = the true probabilities' AUC on the "
               "same test targets." if h.has_oracle and h.reference
               else ""), "",
            *_table(_headline_header(h, cfg.split), _headline_rows(h)), ""]
    out += [f"_{n}_" for n in h.notes] + ([""] if h.notes else [])
    return out


# ----------------------------------------------------------------------------------------------
# scaling


def _held(fit) -> str:
    ho = fit.held_out
    if ho is None:
        return "–"
    return f"{ho.label}: observed {ho.observed:.3g}, predicted {ho.predicted:.3g}, ln error {_f(ho.log_error, '+.2f')}"


def _seed_slopes(fit) -> str:
    s = list(fit.seed_slopes.values())
    if not s:
        return "–"
    return f"{min(s):.3f} … {max(s):.3f} ({len(s)} seeds)" if len(s) > 1 else f"{s[0]:.3f}"


def _scaling_rows(res: AnalysisResult) -> list[list[str]]:
    rows = []
    for f in res.scaling:
        fit, n_all = f.fit, len(f.points)
        axis = f.convention.x_label
        if fit is None:
            rows.append([f.family, f.gain_label, axis, f"0/{n_all} × {f.n_seeds}", "–", "–", "–", "–", "–",
                         "; ".join(f.notes) or "–"])
            continue
        rows.append([f.family, f.gain_label, axis, f"{fit.n_points}/{n_all} × {f.n_seeds} ({fit.n_obs} points)",
                     f"{fit.slope:.3f} [{_f(fit.slope_ci[0], '.3f')}, {_f(fit.slope_ci[1], '.3f')}]",
                     f"{fit.intercept:.3f} ± {_f(fit.intercept_se, '.3f')}",
                     f"{fit.r2:.3f} / {_f(fit.r2_means, '.3f')}", _held(fit), _seed_slopes(fit),
                     "; ".join(f.notes) or "–"])
    return rows


def _points_section(res: AnalysisResult) -> list[str]:
    """One row per point of every family (AUC-metric entry), with each metric's seed-mean gain."""
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
    rows = []
    for f in base:
        for p in f.points:
            row = [f.family, p.size_label, _f(p.flops / 1e6, ".4g"), _f(p.x, ".4g"), str(p.n_seeds),
                   *[_f(gains.get((f.family, m, p.label), float("nan")), "+.4g") for m in metrics]]
            if oracle:
                row.append("–" if not np.isfinite(p.oracle_gap_closed) else f"{p.oracle_gap_closed:.1%}")
            rows.append(row)
    text = ("Share of the oracle gap closed: as in the per-architecture table, mean(AUC − AUC_ref) / "
            "mean(AUC_oracle − AUC_ref) over the seeds shared with the reference." if oracle else
            "No oracle AUC in runs.parquet (only synthetic logs know it): no share of the oracle gap.")
    return ["### Points of each fit", "", "Seed-mean gains over the reference, x on the fit's axis. " + text, "",
            *_table(header, rows), ""]


def _step_row(family: str, m: MarginalReturns, k: int) -> list[str]:
    s = m.steps[k]
    better = "yes" if s.improves else ("not testable" if not s.testable else "no")
    ci = f"[{_delta(s.ci[0])}, {_delta(s.ci[1])}]"
    lo, hi = s.per_doubling_ci
    per = "–" if not np.isfinite(s.per_doubling) else f"{_delta(s.per_doubling)} [{_delta(lo)}, {_delta(hi)}]"
    return [family, _label(m.metric), f"{s.start} → {s.end}", _f(s.flops_ratio, ".3g"),
            str(s.n), f"{_delta(s.mean)} ± {_f(s.sd, '.5f')}", ci, _f(s.p_value, ".3g"), per, better]


def _marginal_section(res: AnalysisResult) -> list[str]:
    fams = [f for f in res.scaling if f.marginal is not None]
    if not fams:
        return []
    level = fams[0].marginal.level
    rows = [_step_row(f.family, f.marginal, k) for f in fams for k in range(len(f.marginal.steps))]
    verdicts = [f"- {f.family}, {_label(f.metric)}: **{f.marginal.verdict}**"
                + (f" ({'; '.join(f.marginal.notes)})" if f.marginal.notes else "") for f in fams]
    return ["### Marginal returns", "",
            f"Each step from one point to the next by FLOPs: Δ = metric(next) − metric(previous), "
            f"{MARGINAL_METHOD}; {level:.0%} interval. Per doubling: Δ / log2(FLOPs ratio). A step improves when its "
            "interval lies above 0 (AUC) or below 0 (LogLoss); returns diminish from the end of the last step that "
            "improves (none above it does). With 3 seeds a step has 2 degrees of freedom: only steps several "
            "seed-sds large count as improvements.", "",
            *_table(["family", "metric", "step", "FLOPs ratio", "seeds", "Δ mean ± sd", f"{level:.0%} CI", "p (t)",
                     "Δ per doubling [CI]", "improves"], rows), "", *verdicts, ""]


def _helix_lines(res: AnalysisResult) -> list[str]:
    fits = [f for f in res.scaling if f.helix is not None and f.fit is not None]
    if not fits:
        return []
    lines = [f"HELIX reports ln(dAUC) = {HELIX_CTR['slope']} ln C {HELIX_CTR['intercept']} (R² {HELIX_CTR['r2']}) "
             f"for CTR, C = training GFLOPs per sample, and slope {HELIX_CVR_SLOPE} for CVR, against a reference it "
             "does not name: compare slopes, not heights, and only in the same convention.", ""]
    lines += [f"- {f.family} ({f.gain_label}): {f.helix.reason}" for f in fits if f.helix.comparable]
    by_reason: dict[str, list[str]] = {}
    for f in fits:
        if not f.helix.comparable:
            by_reason.setdefault(f.helix.reason, []).append(f"{f.family} ({f.gain_label})")
    lines += [f"- {', '.join(names)}: {reason}" for reason, names in by_reason.items()]
    return lines + [""]


def _scaling_section(res: AnalysisResult) -> list[str]:
    out = ["## Scaling fits", ""]
    if not res.scaling:
        why = res.notes or ["No `flops_per_target` in runs.parquet: no scaling fit."]
        return out + why + [""]
    ref = res.scaling[0].reference
    out += [f"Gain of each family over the reference **{ref}** (one architecture at one fixed size, outside "
            "every fitted family, same data setting, paired by seed). Fit: ln(gain) = intercept + slope · ln(x), "
            f"natural logarithms, x on the axis given per row. Slope interval: {CI_METHOD}. R²: of the per-seed "
            "points / of the seed means against the same line. Held-out: refit without the largest-compute size "
            "and predict its seed-mean gain (ln error = ln(predicted / observed)). Per-seed slopes: each seed's "
            f"sizes fitted alone. Band in the plot: {BAND_METHOD}.", ""]
    out += _table(["family", "gain", "x axis, unit", "sizes fitted × seeds", "slope [95% CI]", "intercept ± SE",
                   "R² (points / means)", "held-out check", "per-seed slopes", "notes"], _scaling_rows(res))
    out += [""] + _points_section(res) + _marginal_section(res)
    excluded = [f"- {p.label} at x = {p.x:.4g}: {f.gain_label} = {_f(p.gain, '+.3g')} (vs {f.reference}) — left out "
                "of the log fit" for f in res.scaling for p in f.excluded]
    if excluded:
        out += ["**Sizes with a seed-mean gain ≤ 0** (no logarithm; listed, not fitted):", "", *excluded, ""]
    dropped = [f"- {label}, seed {seed}: {f.gain_label} = {g:+.3g}" for f in res.scaling if f.fit
               for label, seed, g in f.fit.dropped]
    if dropped:
        out += ["**Single seeds with a gain ≤ 0 at a size with a positive mean** (left out of the per-seed fit, "
                "which therefore overstates that size a little):", "", *dropped, ""]
    out += _helix_lines(res)
    for name in ("scaling_auc", "scaling_logloss"):
        if name in res.plots:
            out += [f"![{name}]({res.plots[name]})", ""]
    return out


def _comparison_rows(res: AnalysisResult) -> list[list[str]]:
    rows = []
    for c in res.comparisons:
        unit = UNIT_NAMES[c.convention.x_unit]
        iso = "–" if c.iso_x is None else f"{c.iso_x:.4g} {unit}"
        value = "–"
        if c.iso_x is not None and np.isfinite(c.value_a):
            value = f"{_f(c.value_a, '.4f')} vs {_f(c.value_b, '.4f')}"
        rows.append([c.label, c.convention.gain_label(c.metric),
                     f"{c.slope_a:.3f} − {c.slope_b:.3f} = {_est(c.slope_diff, '+.3f')}", _f(c.p_value, ".3g"), iso,
                     _est(c.gain_a, ".4g"), _est(c.gain_b, ".4g"), _est(c.diff, "+.4g"), _est(c.ratio, ".3g"),
                     value, c.crossover + ("; " + "; ".join(c.notes) if c.notes else "")])
    return rows


def _family_comparison_section(res: AnalysisResult) -> list[str]:
    if not res.comparisons:
        return []
    return ["## Family comparisons", "",
            f"A vs B for two families fitted against the same reference, metric and axes. Method: {COMPARISON_METHOD}. "
            "Slope A − B with its 95% interval and two-sided p-value; at x* (the geometric middle of the overlap of "
            "the two measured ranges): each fitted gain, their difference (the metric difference at matched FLOPs, "
            "both being over the same reference) and ratio, and the metric itself (reference + gain). Crossover: "
            "where the fitted lines meet, if inside the measured range or within a factor 10 of it.", "",
            *_table(["A vs B", "gain", "slope A − B [95% CI]", "p", "x* (iso-FLOP)", "gain A at x*", "gain B at x*",
                     "A − B at x*", "A / B at x*", "metric A vs B at x*", "crossover"], _comparison_rows(res)), ""]


# ----------------------------------------------------------------------------------------------
# ablations


def _ablation_rows(res: AnalysisResult, metric: str) -> list[list[str]]:
    rows = []
    for r in res.ablations:
        mc = r.metrics.get(metric)
        if mc is None:
            continue
        if r.paired.error:
            rows.append([r.label, "0", *["–"] * 8, "**error: no paired runs**"])
            continue
        s = mc.stats
        rows.append([r.label, str(s.n), _delta(s.mean), _f(s.std, ".2g"),
                     f"[{_delta(s.ci_low)}, {_delta(s.ci_high)}]", _f(s.p_t), _f(s.p_wilcoxon), _f(s.p_permutation),
                     _f(mc.p_holm), _f(s.mde, ".2g"), f"**{mc.verdict}**" if mc.verdict else "–"])
    return rows


def _ablation_section(res: AnalysisResult) -> list[str]:
    if not res.ablations:
        return ["## Comparisons", "", "No comparisons (a single architecture and no `analysis.comparisons`).", ""]
    alpha = res.results.config.alpha
    default = not res.results.config.comparisons
    title = f"Gain over the baseline ({res.results.baseline})" if default else "Comparisons"
    out = [f"## {title}: seed variance and significance", "",
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
            spec = metric_registry.get(m)
            out += [f"### {res.results.config.split} {spec.label} ({spec.better} is better)", "",
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
    overview = _overview(res)
    at = next((i for i, line in enumerate(overview) if line.startswith("## ")), len(overview))
    lines = (overview[:at] + answer_lines(res) + overview[at:] + health_section(res.health) + curves_section(res.plots)
             + _ablation_section(res) + protocol_section(res)
             + expectation_section(res.expectations, res.results.config.split, res.results.config.alpha)
             + _scaling_section(res) + _family_comparison_section(res))  # the protocol answer opens the report
    extra = [n for n in ("groups", "settings") if n in res.plots]
    if extra or res.group_note:
        lines += ["## Grouped metrics and data settings", ""]
        lines += [res.group_note, ""] if res.group_note else []
        lines += [f"![{n}]({res.plots[n]})" for n in extra] + [""]
    if res.warnings:
        lines += ["## Warnings", "", *[f"- {w}" for w in res.warnings], ""]
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# terminal


def _cut(items: list, n: int, out: list[str], what: str) -> list:
    if len(items) > n:
        out.append(f"  ... {len(items) - n} more {what} in the report")  # appended after the shown ones
    return items[:n]


def terminal_summary(res: AnalysisResult, report_path: str, *, max_rows: int = 12) -> str:
    """A short text summary in the report's order: headline table, comparisons, fits, family comparisons."""
    split = res.results.config.split
    out = [f"sweep {res.results.name}: {len(res.results.runs)} runs, baseline {res.results.baseline}"]
    h = res.headline
    if h is not None and h.rows:
        oracle = "  oracle gap" if h.has_oracle else ""
        out.append(f"  {'architecture (setting)':<40} seeds  {split} AUC        LogLoss          MFLOPs{oracle}")
        more: list[str] = []
        for r in _cut(h.rows, max_rows, more, "rows"):
            share = f"  {r.share_oracle_gap:6.1%}" if h.has_oracle and np.isfinite(r.share_oracle_gap) else ""
            out.append(f"  {r.label[:40]:<40} {r.n_seeds:>5}  {_pm(r.auc)}  {_pm(r.logloss)}  "
                       f"{_f(r.flops_per_target / 1e6, '.4g'):>7}{share}")
        out += more
    if res.ablations:
        out.append(f"comparisons  ({split} AUC, delta = A - B, Holm-adjusted paired t)")
        more = []
        for r in _cut(res.ablations, max_rows, more, "comparisons"):
            mc = r.metrics.get("auc")
            if r.paired.error:
                out.append(f"  {r.label[:40]:<40} error: no paired runs")
            elif mc is not None:
                out.append(f"  {r.label[:40]:<40} {_delta(mc.stats.mean)}  n={mc.stats.n}  "
                           f"p={_f(mc.p_holm, '.2g'):<6} {mc.verdict}")
        out += more
    if res.expectations:
        out.append("expectations  (delta = A - B per seed, Holm-adjusted paired t)")
        more = []
        for e in _cut(res.expectations, max_rows, more, "expectations"):
            out.append(f"  {e.label[:40]:<40} {_delta(e.stats.mean)}  A better in {int(e.a_better.sum())}/"
                       f"{len(e.a_better)}  p={_f(e.p_holm, '.2g'):<6} {e.outcome}")
        out += more
    fitted = [f for f in res.scaling if f.fit is not None and f.metric == "auc"]
    if fitted:
        out.append(f"scaling  ln(gain) = slope * ln(x) + b   ({CI_METHOD.split(' (')[0]})")
        more = []
        for f in _cut(fitted, 8, more, "fits"):
            lo, hi = f.fit.slope_ci
            out.append(f"  {f.family[:28]:<28} {f.gain_label} vs {f.convention.x_unit} {f.convention.x_axis}: slope "
                       f"{f.fit.slope:+.3f} [{_f(lo, '+.3f')}, {_f(hi, '+.3f')}]  R2 {f.fit.r2:.2f}  "
                       f"sizes={f.fit.n_points} seeds={f.n_seeds}")
        out += more
    n_excluded = sum(len(f.excluded) for f in fitted)
    if n_excluded:
        out.append(f"  {n_excluded} size(s) with a dAUC <= 0 left out of the fits (listed in the report)")
    out += _marginal_lines(res)
    auc_comparisons = [c for c in res.comparisons if c.metric == "auc"]
    if auc_comparisons:
        out.append("family comparisons  (AUC gain; slope A - B, gain A - B at matched FLOPs)")
        more = []
        for c in _cut(auc_comparisons, 6, more, "family comparisons"):
            out.append(f"  {c.label[:30]:<30} slope diff {_est(c.slope_diff, '+.3f')} p={_f(c.p_value, '.2g')}; "
                       f"A-B {_est(c.diff, '+.3g')}; {c.crossover.split(';')[0]}")
        out += more
    for w in res.warnings[:4]:
        out.append(f"warning: {w}")
    if len(res.warnings) > 4:
        out.append(f"  ... {len(res.warnings) - 4} more warnings in the report")
    out.append(f"report: {report_path}")
    return "\n".join(out)


def _marginal_lines(res: AnalysisResult) -> list[str]:
    """One line per family: the verdict of each metric along its compute ladder."""
    by_family: dict[str, list[str]] = {}
    for f in res.scaling:
        if f.marginal is not None:
            by_family.setdefault(f.family, []).append(f"{_label(f.metric)} {f.marginal.verdict}")
    if not by_family:
        return []
    out = ["marginal returns  (consecutive points by FLOPs, paired t over seeds)"]
    more: list[str] = []
    for family in _cut(list(by_family), 8, more, "families"):
        out.append(f"  {family[:28]:<28} " + "; ".join(by_family[family]))
    return out + more


# ----------------------------------------------------------------------------------------------
# JSON


def _marginal(m: MarginalReturns | None) -> dict[str, Any] | None:
    if m is None:
        return None
    return {"metric": m.metric, "verdict": m.verdict, "diminish_from": m.diminish_from, "level": m.level,
            "method": m.method, "notes": m.notes, "steps": [
                {"start": s.start, "end": s.end, "flops_ratio": s.flops_ratio, "doublings": s.doublings,
                 "n_seeds": s.n, "seeds": [int(x) for x in s.seeds], "deltas": s.deltas.tolist(), "mean": s.mean,
                 "sd": s.sd, "ci": list(s.ci), "p_value": s.p_value, "per_doubling": s.per_doubling,
                 "per_doubling_ci": list(s.per_doubling_ci), "improves": s.improves} for s in m.steps]}


def _estimate(e: Estimate | None) -> dict[str, float] | None:
    return None if e is None else {"value": e.value, "lo": e.lo, "hi": e.hi}


def _family(f: FamilyScaling) -> dict[str, Any]:
    fit = f.fit
    return {
        "family": f.family, "arch": f.arch, "metric": f.metric, "gain": f.gain_label, "reference": f.reference,
        "reference_value": f.ref_value, "n_seeds": f.n_seeds, **f.convention.record(), "notes": f.notes,
        "points": [{"label": p.label, "setting": p.setting, "flops_per_target": p.flops, "x": p.x, "gain": p.gain,
                    "gain_per_seed": dict(zip(map(int, p.seeds), p.gain_per_seed.tolist())),
                    "value_per_seed": None if p.value_per_seed is None else
                    dict(zip(map(int, p.seeds), p.value_per_seed.tolist())),
                    "n_seeds": p.n_seeds, "oracle_gap_closed": p.oracle_gap_closed} for p in f.points],
        "marginal_returns": _marginal(f.marginal),
        "excluded_non_positive": [p.label for p in f.excluded],
        "helix_ctr": None if f.helix is None else {"comparable": f.helix.comparable, "reason": f.helix.reason,
                                                   "inside_ci": f.helix.inside_ci},
        "fit": None if fit is None else {
            "slope": fit.slope, "intercept": fit.intercept, "r2": fit.r2, "r2_means": fit.r2_means,
            "slope_se": fit.slope_se, "intercept_se": fit.intercept_se, "slope_ci": list(fit.slope_ci),
            "ci_method": fit.ci_method, "df": fit.df, "n_points": fit.n_points, "n_obs": fit.n_obs,
            "x_axis": f.convention.x_axis, "x_unit": f.convention.x_unit,
            "seed_slopes": {str(k): v for k, v in fit.seed_slopes.items()},
            "dropped_seed_points": [{"label": lab, "seed": s, "gain": g} for lab, s, g in fit.dropped],
            "held_out": None if fit.held_out is None else {
                "label": fit.held_out.label, "x": fit.held_out.x, "observed": fit.held_out.observed,
                "predicted": fit.held_out.predicted, "log_error": fit.held_out.log_error}},
    }


def _comparison(c: FamilyComparison) -> dict[str, Any]:
    return {"a": c.a, "b": c.b, "metric": c.metric, "gain": c.convention.gain_label(c.metric),
            "reference": c.reference, **c.convention.record(), "method": c.method, "df": c.df,
            "n_obs": list(c.n_obs), "slope_a": c.slope_a, "slope_b": c.slope_b,
            "slope_diff": _estimate(c.slope_diff), "p_value": c.p_value, "iso_x": c.iso_x,
            "gain_a": _estimate(c.gain_a), "gain_b": _estimate(c.gain_b), "diff": _estimate(c.diff),
            "ratio": _estimate(c.ratio), "value_a": c.value_a, "value_b": c.value_b,
            "crossover_x": c.crossover_x, "crossover": c.crossover, "notes": c.notes}


def _abl(r: AblationResult) -> dict[str, Any]:
    return {
        "comparison": r.paired.comparison, "stratum": r.paired.stratum, "seeds": r.paired.seeds.tolist(),
        **({"error": r.paired.error} if r.paired.error else {}),
        "metrics": {m: {"n": mc.stats.n, "deltas": list(mc.stats.deltas), "mean": mc.stats.mean,
                        "std": mc.stats.std, "ci": [mc.stats.ci_low, mc.stats.ci_high], "p_t": mc.stats.p_t,
                        "p_wilcoxon": mc.stats.p_wilcoxon, "p_permutation": mc.stats.p_permutation,
                        "p_holm": mc.p_holm, "mde": mc.stats.mde, "verdict": mc.verdict,
                        "notes": list(mc.stats.notes)} for m, mc in r.metrics.items()},
        "delong": [{"seed": d.seed, "note": d.note, **({} if d.result is None else {
            "auc_a": d.result.auc_a, "auc_b": d.result.auc_b, "z": d.result.z, "p": d.result.p_value})}
            for d in r.delong],
    }


def _headline(h: Headline | None) -> dict[str, Any] | None:
    if h is None:
        return None
    return {"reference": h.reference, "notes": h.notes, "rows": [
        {"label": r.label, "setting": r.setting, "n_seeds": r.n_seeds, "auc_mean": r.auc[0], "auc_sd": r.auc[1],
         "logloss_mean": r.logloss[0], "logloss_sd": r.logloss[1], "flops_per_target": r.flops_per_target,
         "params_non_embedding": r.params_non_embedding, "oracle_auc": r.oracle_auc,
         "share_oracle_gap": r.share_oracle_gap, "is_reference": r.is_reference,
         **({"health": r.health} if h.has_health else {})} for r in h.rows]}


def summary_dict(res: AnalysisResult) -> dict[str, Any]:
    """JSON-ready summary of every number in the report."""
    ref = res.reference
    return {"sweep": res.results.name, "runs": len(res.results.runs), "baseline": res.results.baseline,
            "reference": None if ref is None else {"selector": ref.selector, "arch": ref.arch,
                                                   "setting": ref.setting, "families": ref.families},
            "headline": _headline(res.headline),
            "scaling": [_family(f) for f in res.scaling], "scaling_notes": res.notes,
            "family_comparisons": [_comparison(c) for c in res.comparisons],
            "ablations": [_abl(r) for r in res.ablations], **_protocol_json(res), "plots": res.plots,
            "warnings": res.warnings, **({"run_health": health_dict(res.health)} if res.health is not None else {}),
            **({"expectations": expectation_dicts(res.expectations)} if res.expectations else {})}


def _protocol_json(res: AnalysisResult) -> dict[str, Any]:
    """The protocol section's keys, only for a sweep that varies a data setting (other summaries unchanged)."""
    if not res.arm_facts and res.ranks is None:
        return {}
    return {"protocol": protocol_dict(res)}
