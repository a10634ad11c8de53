"""report.md (tables + plot links), the machine-readable summary, and the terminal summary.

Order, headline first: the per-architecture table; the comparisons (gain over the baseline, Holm verdicts);
the scaling fits and the family comparisons (analysis/report/scaling.py: seed-unit slopes, forms, held-out
checks, reference sensitivity, extrapolations, marginal returns).
"""
from __future__ import annotations

import numpy as np

from harness import metric_registry
from harness import runs_columns as C

from ..compare.expectations import expectation_section
from ..fits.powerlaw import CI_METHOD
from ..headline import Headline
from ..result import AnalysisResult
from ..run_health import health_section
from .curves import curves_section
from .data_scaling import data_scaling_lines, data_scaling_section
from .protocol import answer_lines, protocol_section
from .retry import retry_section
from .scaling import family_comparison_section, scaling_section
from .text import estimate_text as _est
from .text import markdown_table as _table
from .text import metric_label as _label
from .text import num as _f
from .text import signed_delta as _delta
from .tuning import tuning_section


def _pm(pair: tuple[float, float], fmt: str = ".4f") -> str:
    mean, sd = pair
    return "–" if not np.isfinite(mean) else f"{mean:{fmt}} ± {_f(sd, fmt)}"


# ----------------------------------------------------------------------------------------------
# headline


def _headline_rows(h: Headline) -> list[list[str]]:
    rows = []
    for r in h.rows:
        label = r.label + (" (reference)" if r.is_reference else "")
        row = [label, str(r.n_seeds), *([r.health] if h.has_health else []), _pm(r.auc), _pm(r.logloss),
               _f(r.flops_per_target / 1e6, ".4g")]
        if h.has_params:
            row.append("–" if not np.isfinite(r.params_non_embedding) else f"{r.params_non_embedding:,.0f}")
        if h.has_oracle:
            row += [_f(r.oracle_auc, ".4f"),
                    "–" if not np.isfinite(r.share_oracle_gap) else f"{r.share_oracle_gap:.1%}"]
        rows.append(row)
    return rows


def _headline_header(h: Headline, split: str) -> list[str]:
    header = ["architecture (setting)", "seeds", *(["runs (health)"] if h.has_health else []),
              f"{split} AUC mean ± sd", f"{split} LogLoss mean ± sd",
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
           f"effect, {cfg.n_resamples} bootstrap / permutation resamples (seed {cfg.bootstrap_seed}).", ""]
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
    lines = (overview[:at] + answer_lines(res) + overview[at:] + health_section(res.health) + retry_section(res.retried)
             + tuning_section(res.tuning)
             + curves_section(res.plots)
             + _ablation_section(res) + protocol_section(res)
             + expectation_section(res.expectations, res.results.config.split, res.results.config.alpha)
             + scaling_section(res) + family_comparison_section(res)  # the protocol answer opens the report
             + data_scaling_section(res.data_scaling, res.plots))
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
        for r in _keep_baseline(h.rows, max_rows, more, res.results.baseline):
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
            best = f"  best form: {f.forms.best}" if f.forms is not None and f.forms.best else ""
            out.append(f"  {f.family[:28]:<28} {f.gain_label} vs {f.convention.x_unit} {f.convention.x_axis}: slope "
                       f"{f.fit.slope:+.3f} [{_f(lo, '+.3f')}, {_f(hi, '+.3f')}]  "
                       f"sizes={f.fit.n_points} seeds={f.fit.n_seeds}{best}")
        out += more
    n_dropped = sum(len(f.fit.dropped) for f in fitted if f.fit is not None)
    if n_dropped:
        out.append(f"  {n_dropped} per-seed point(s) the power law cannot take (listed with reasons in the report)")
    out += _marginal_lines(res)
    out += data_scaling_lines(res.data_scaling)
    auc_comparisons = [c for c in res.comparisons if c.metric == "auc"]
    if auc_comparisons:
        out.append("family comparisons  (AUC gain, paired by seed; slope A - B, Holm p)")
        more = []
        for c in _cut(auc_comparisons, 6, more, "family comparisons"):
            d = c.slope_diff
            out.append(f"  {c.label[:30]:<30} slope diff {_est(None if d is None else d.estimate, '+.3f')} "
                       f"Holm p={_f(float('nan') if d is None else d.p_holm, '.2g')}; {c.crossover.split(';')[0]}")
        out += more
    for w in res.warnings[:4]:
        out.append(f"warning: {w}")
    if len(res.warnings) > 4:
        out.append(f"  ... {len(res.warnings) - 4} more warnings in the report")
    out.append(f"report: {report_path}")
    return "\n".join(out + _answer_lines(res, split))


def _keep_baseline(rows: list, n: int, out: list[str], baseline: str | None) -> list:
    """The first `n` headline rows plus every row of the baseline architecture (never cut)."""
    shown = [r for i, r in enumerate(rows) if i < n or (baseline and r.setting.get(C.ARCH) == baseline)]
    if len(rows) > len(shown):
        out.append(f"  ... {len(rows) - len(shown)} more rows in the report")
    return shown


def _answer_lines(res: AnalysisResult, split: str) -> list[str]:
    """The summary's last lines: which architecture did best, and its gain over the baseline with the
    Holm-corrected verdict of that comparison (one sentence each)."""
    h, runs, baseline = res.headline, res.results.runs, res.results.baseline
    rivals = [r for r in (h.rows if h is not None else []) if r.setting.get(C.ARCH) != baseline
              and np.isfinite(r.auc[0])]
    if not rivals:
        return []
    best = max(rivals, key=lambda r: r.auc[0])
    lines = [f"answer: the best architecture is {best.label} ({split} AUC {best.auc[0]:.4f} over {best.n_seeds} "
             f"seed(s))."]
    versus = [r for r in res.ablations if not r.paired.error and "auc" in r.metrics
              and runs.loc[r.paired.rows_b[0], C.ARCH] == baseline
              and runs.loc[r.paired.rows_a[0], C.ARCH] == best.setting.get(C.ARCH)]
    # the comparison of the best setting itself (same width, ...); else the arch's largest gain, named by label
    same_setting = [r for r in versus if all(str(runs.loc[r.paired.rows_a[0], c]) == str(v)
                                             for c, v in best.setting.items() if c in runs.columns)]
    if versus:
        top = (same_setting or [max(versus, key=lambda r: r.metrics["auc"].stats.mean)])[0]
        mc = top.metrics["auc"]
        lines.append(f"answer: its gain over the baseline {baseline} is {_delta(mc.stats.mean).strip()} {split} AUC "
                     f"({top.label}; {mc.verdict}, Holm-adjusted p={_f(mc.p_holm, '.2g')}, n={mc.stats.n}).")
    else:
        base = [r.auc[0] for r in (h.rows if h is not None else [])
                if r.setting.get(C.ARCH) == baseline and np.isfinite(r.auc[0])]
        gain = f"{_delta(best.auc[0] - max(base)).strip()} {split} AUC (mean over seeds) " if base else ""
        lines.append(f"answer: its gain over the baseline {baseline} is {gain}untested: no configured comparison "
                     "pairs them.")
    return lines


def _marginal_lines(res: AnalysisResult) -> list[str]:
    """One line per family: the verdict of each metric along its compute ladder."""
    by_family: dict[str, list[str]] = {}
    for f in res.scaling:
        if f.marginal is not None:
            by_family.setdefault(f.family, []).append(f"{_label(f.metric)} {f.marginal.verdict}")
    if not by_family:
        return []
    out = ["marginal returns  (consecutive points by FLOPs, paired t over seeds, Holm over each ladder)"]
    more: list[str] = []
    for family in _cut(list(by_family), 8, more, "families"):
        out.append(f"  {family[:28]:<28} " + "; ".join(by_family[family]))
    return out + more
