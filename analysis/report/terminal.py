"""The terminal summary of an analysis (`recscale analyze`, `recscale reference`), in the report's order and from the
same objects, each part cut to a few rows (docs/analysis.md)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from harness import runs_columns as C

from ..fits.powerlaw import CI_METHOD
from ..result import AnalysisResult
from .overview import best, family_note
from .scaling import data_scaling_lines
from .section import estimate_text, mean_sd, metric_label, num


def _cut(items: list, n: int, out: list[str], what: str, keep: Callable[[Any], bool] = lambda item: False) -> list:
    """The first `n` items and every one `keep` names; `out` gets a line counting the others, shown after them."""
    shown = [x for i, x in enumerate(items) if i < n or keep(x)]
    if len(items) > len(shown):
        out.append(f"  ... {len(items) - len(shown)} more {what} in the report")
    return shown


def terminal_summary(res: AnalysisResult, report_path: str, *, max_rows: int = 12) -> str:
    """A short text summary in the report's order: answers, headline table, fits, family comparisons."""
    split = res.results.config.split
    out = [f"sweep {res.results.name}: {len(res.results.runs)} runs, baseline {res.results.baseline}"]
    out += answer_lines(res, max_rows=2 * max_rows)
    h, baseline = res.headline, res.results.baseline
    if h is not None and h.rows:
        oracle = "  oracle gap" if h.has_oracle else ""
        out.append(f"  {'architecture (setting)':<40} seeds  {split} AUC        LogLoss          MFLOPs{oracle}")
        more: list[str] = []
        for r in _cut(h.rows, max_rows, more, "rows", lambda r: bool(baseline) and r.setting.get(C.ARCH) == baseline):
            share = f"  {r.share_oracle_gap:6.1%}" if h.has_oracle and np.isfinite(r.share_oracle_gap) else ""
            out.append(f"  {r.label[:40]:<40} {r.n_seeds:>5}  {mean_sd(r.auc)}  {mean_sd(r.logloss)}  "
                       f"{num(r.flops_per_target / 1e6, '.4g'):>7}{share}")
        out += more
    fitted = [f for f in res.scaling if f.fit is not None and f.metric == "auc"]
    if fitted:
        out.append(f"scaling  gain = e^b * x^slope   ({CI_METHOD.split(' (')[0]})")
        more = []
        for f in _cut(fitted, 8, more, "fits"):
            lo, hi = f.fit.slope_ci
            best = f"  best form: {f.forms.best}" if f.forms is not None and f.forms.best else ""
            out.append(f"  {f.family[:28]:<28} {f.gain_label} vs {f.convention.x_unit} {f.convention.x_axis}: slope "
                       f"{f.fit.slope:+.3f} [{num(lo, '+.3f')}, {num(hi, '+.3f')}]  "
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
            out.append(f"  {c.label[:30]:<30} slope diff {estimate_text(None if d is None else d.estimate, '+.3f')} "
                       f"Holm p={num(float('nan') if d is None else d.p_holm, '.2g')}; {c.crossover.split(';')[0]}")
        out += more
    more = []
    out += [f"warning: {w}" for w in _cut(res.warnings, 4, more, "warnings")] + more
    out.append(f"report: {report_path}")
    return "\n".join(out)


def answer_lines(res: AnalysisResult, *, max_rows: int = 24) -> list[str]:
    """The answers of report.md's first table, one line per question setting, then the best architecture."""
    if not res.questions:
        return []
    out = [f"answers  ({family_note(res)})"]
    rows = [(q.question.name + (f" [{where}]" if where else ""), a) for q in res.questions for where, a in q.answers]
    more: list[str] = []
    out += [f"  {name[:44]:<44} {a}" for name, a in _cut(rows, max_rows, more, "answers")]
    top = best(res)
    return out + more + ([top] if top else [])


def _marginal_lines(res: AnalysisResult) -> list[str]:
    """One line per family: the verdict of each metric along its compute ladder."""
    by_family: dict[str, list[str]] = {}
    for f in res.scaling:
        if f.marginal is not None:
            by_family.setdefault(f.family, []).append(f"{metric_label(f.metric)} {f.marginal.verdict}")
    if not by_family:
        return []
    out = ["marginal returns  (consecutive points by FLOPs, paired t over seeds, Holm over each ladder)"]
    more: list[str] = []
    for family in _cut(list(by_family), 8, more, "families"):
        out.append(f"  {family[:28]:<28} " + "; ".join(by_family[family]))
    return out + more
