"""The report's sections about the runs themselves: title, answers, headline table, run health, retried runs,
tuning, the comparisons' statistics and DeLong, the grouped-metric figures and the warnings (docs/sweeps.md, "Retry"
and "Tuning")."""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from core.results_layout import RUNS_FILE
from harness import metric_registry
from harness import run_health as H
from harness import runs_columns as C
from harness.runs_columns import TUNED
from harness.sweep.tuning import TuningChoice

from ..compare.delong_seeds import delong_summary
from ..compare.questions import AblationResult, QuestionResult, best_answer
from ..config import describe
from ..headline import Headline, HeadlineRow
from ..result import AnalysisResult
from ..run_health import why_kept
from .section import Section, as_json, figures, markdown_table, mean_sd, metric_label, num, signed_delta


def _title(res: AnalysisResult) -> list[str]:
    runs, cfg = res.results.runs, res.results.config
    return [f"# Analysis of sweep `{res.results.name}`", "",
            f"{len(runs)} finished runs. Baseline architecture: **{res.results.baseline}**. Metrics are on the "
            f"**{cfg.split}** split; significance level {cfg.alpha:g}, power {cfg.power:g} for the minimum detectable "
            f"effect, {cfg.n_resamples} bootstrap / permutation resamples (seed {cfg.bootstrap_seed}).", ""]


def _sweep_json(res: AnalysisResult) -> dict[str, Any]:
    rounds = res.results.rounds
    return {"sweep": res.results.name, "runs": len(res.results.runs), "baseline": res.results.baseline,
            "reference": as_json(res.reference),
            **({} if rounds is None else {"rounds": {**vars(rounds), "ran": int(res.results.runs[C.ROUND].max())}})}


TITLE = Section("title", _title, _sweep_json)


# ----------------------------------------------------------------------------------------------
# headline


def _headline_table(h: Headline, split: str) -> list[str]:
    """Each column a header and its cell; the health, params and oracle columns only where the runs have them."""
    columns: list[tuple[str, Callable[[HeadlineRow], str]]] = [
        ("architecture (setting)", lambda r: r.label + (" (reference)" if r.is_reference else "")),
        ("seeds", lambda r: str(r.n_seeds)),
        *([("runs (health)", lambda r: r.health)] if h.has_health else []),
        (f"{split} AUC mean ± sd", lambda r: mean_sd(r.auc)),
        (f"{split} LogLoss mean ± sd", lambda r: mean_sd(r.logloss)),
        ("forward MFLOPs / target", lambda r: num(r.flops_per_target / 1e6, ".4g")),
        *([("non-embedding params", lambda r: num(r.params_non_embedding, ",.0f"))] if h.has_params else []),
        *([("oracle AUC", lambda r: num(r.oracle_auc, ".4f")),
           ("share of oracle gap closed", lambda r: num(r.share_oracle_gap, ".1%"))] if h.has_oracle else []),
    ]
    return markdown_table([name for name, _ in columns], [[cell(r) for _, cell in columns] for r in h.rows])


def _headline(res: AnalysisResult) -> list[str]:
    h = res.headline
    if h is None:
        return []
    out = ["## Results per architecture", "",
           "Mean ± sample sd over seeds of each architecture and model setting."
           + (f" Share of the oracle gap closed = mean(AUC − AUC_ref) / mean(AUC_oracle − AUC_ref) over the seeds "
              f"shared with the reference {h.reference} (paired by seed), oracle = the true probabilities' AUC on the "
              "same test targets." if h.has_oracle and h.reference
              else ""), "",
           *_headline_table(h, res.results.config.split), ""]
    return out + [f"_{n}_" for n in h.notes] + ([""] if h.notes else [])


def _headline_json(res: AnalysisResult) -> dict[str, Any]:
    h = res.headline  # a row's health only where some run recorded one
    return {"headline": None if h is None else as_json(h, rows=[
        as_json(r, **({"health": r.health} if h.has_health else {})) for r in h.rows])}


HEADLINE = Section("headline", _headline, _headline_json)


# ----------------------------------------------------------------------------------------------
# questions: the report's first table; the terminal summary prints the same answers (report/terminal.py)


SPENDING_NAMES = {"obrien_fleming": "O'Brien-Fleming", "pocock": "Pocock"}


def family_note(res: AnalysisResult) -> str:
    """How the comparisons' verdicts were reached, in one sentence."""
    cfg, m = res.results.config, sum(np.isfinite(mc.level) for s in res.ablations for mc in s.metrics.values())
    if res.results.rounds is not None:
        r = res.results.rounds
        return (f"seeds in rounds ({', '.join(map(str, r.seeds))} seeds), a paired t at each round against "
                f"{SPENDING_NAMES[r.spending]}-type group-sequential boundaries, Holm-type alpha recycling over the "
                f"{m} comparison(s) at alpha {cfg.alpha:g} (docs/analysis.md, *Seeds in rounds*); a comparison stops "
                "receiving seeds at the round that decides it; interval: t interval of that round at its level; MDE "
                f"and seeds needed: the fixed design's, power {cfg.power:g} at alpha / {m}")
    return (f"paired t over seeds, Holm over the {m} comparison(s) of this report at alpha {cfg.alpha:g}; interval: t "
            f"interval at the level Holm decides each at; MDE: power {cfg.power:g} at Holm's first step alpha / {m}")


def best(res: AnalysisResult) -> str:
    return best_answer(res.headline, res.ablations, res.results.config.split)


def _expected(q: QuestionResult) -> str:
    e = q.question
    said = f"{describe(e.a if e.expect == 'a' else e.b)} better" if e.expect != "either" else ""
    return "; ".join(x for x in (said, e.source) if x) or "–"


def _unmetered(q: QuestionResult) -> tuple:
    """What a question asks, whatever its metric: the siblings of a question asked on several metrics agree."""
    e = q.question
    if e.kind != "comparison":  # only a comparison is asked on several metrics
        return (id(q),)
    return repr(e.a), repr(e.b), repr(e.where), e.expect, e.source, e.smallest_effect, q.group


def _questions(res: AnalysisResult) -> list[str]:
    if not res.questions:
        return ["## Answers", "", "No questions: a single architecture and no `analysis.questions`.", ""]
    siblings = Counter(_unmetered(q) for q in res.questions)  # > 1: one question asked on several metrics
    rows: list[list[str]] = []
    previous = None
    for q in res.questions:
        label = metric_label(q.question.metric)
        answer = "<br>".join(f"{where}: {a}" if where else a for where, a in q.answers)
        same = _unmetered(q)  # one question asked on several metrics
        if rows and same == previous:  # its rows become one: each metric's answer in turn
            rows[-1][1] += f" / {label}"
            rows[-1][3] += f"<br>{label}: {answer}"
        else:
            rows.append([q.question.name, f"{res.results.config.split} {label}", _expected(q),
                         f"{label}: {answer}" if siblings[same] > 1 else answer])
        previous = same
    top = best(res)
    return ["## Answers", "", f"Comparisons: {family_note(res)}. Slopes: the fit's interval against the target "
            "half-width. Evidence in the sections below.", "",
            *markdown_table(["question", "metric", "expected", "answer"], rows), "", *([top, ""] if top else [])]


def _question_json(q: QuestionResult) -> dict[str, Any]:
    return {"question": q.question.name, "kind": q.question.kind, "metric": q.question.metric, "set": q.group,
            "expect": q.question.expect, "source": q.question.source, "settled": q.settled,
            "answers": [{"setting": w, "answer": a} for w, a in q.answers]}


QUESTIONS = Section("questions", _questions, lambda res: {"questions": [_question_json(q) for q in res.questions],
                                                          "best": best(res)})


def _ablation_rows(res: AnalysisResult, metric: str) -> list[list[str]]:
    rows = []
    shown = {r.paired.runs for r in res.ablations if r.question.metric == metric}  # those rows ask this metric
    for r in res.ablations:
        mc = r.metrics.get(metric)
        if mc is None or (metric != r.question.metric and r.paired.runs in shown):
            continue  # the same runs already have a row here
        shown.add(r.paired.runs)
        if r.paired.error:
            rows.append([r.label, "0", *["–"] * 9, "**error: no paired runs**"])
            continue
        s = mc.stats
        asked = metric == r.question.metric
        rows.append([r.label, str(s.n), signed_delta(s.mean), num(s.std, ".2g"),
                     f"[{signed_delta(s.ci_low)}, {signed_delta(s.ci_high)}]", num(s.p_t), num(s.p_wilcoxon),
                     num(s.p_permutation), num(mc.p_holm), num(mc.level, ".2g"),
                     f"[{signed_delta(mc.interval[0])}, {signed_delta(mc.interval[1])}]" if asked else "–",
                     num(mc.mde, ".2g"), r.answer if asked else "– (no question on this metric)"])
    return rows


def _ablations(res: AnalysisResult) -> list[str]:
    if not res.ablations:
        return []
    out = ["## Comparisons: seed variance and significance", "",
           "Delta = A − B per seed, runs paired by seed and every shared setting (docs/analysis.md, *Questions*). "
           f"The answer: {family_note(res)}.", ""]
    header = ["comparison", "seeds", "mean Δ", "sd", "95% BCa", "p (t)", "p (W)", "p (flip)", "p Holm", "level",
              "interval", "MDE", "answer"]
    for m in res.results.config.metrics:
        rows = _ablation_rows(res, m)
        if rows:
            spec = metric_registry.get(m)
            out += [f"### {res.results.config.split} {spec.label} ({spec.better} is better)", "",
                    *markdown_table(header, rows), ""]
    if res.results.config.delong:
        once = {r.paired.runs: r for r in reversed(res.ablations)}  # DeLong is AUC's: one row per pair of runs
        rows = [[r.label, delong_summary(r.delong, res.results.config.alpha),
                 ", ".join(f"{d.seed}: Δ {d.result.delta:+.4f}, z {d.result.z:+.2f}" for d in r.delong
                           if d.result is not None) or "–"] for r in res.ablations if once[r.paired.runs] is r]
        out += ["### DeLong's paired AUC test per seed", "",
                "Test-set sampling noise for one trained pair; seed noise above is a separate, usually larger, "
                "source of variation.", "", *markdown_table(["comparison", "DeLong", "per seed"], rows), ""]
    notes = sorted({f"- {r.label}: {n}" for r in res.ablations for m in r.metrics.values() for n in m.stats.notes}
                   | {f"- {r.label}: {n}" for r in res.ablations for n in r.paired.notes})
    if notes:
        out += ["Notes:", "", *notes, ""]
    return out + figures(res, "forest", "seed_strip")


def _ablation_json(r: AblationResult) -> dict[str, Any]:
    return {"comparison": r.paired.comparison, "stratum": r.paired.stratum, "seeds": r.paired.seeds.tolist(),
            **({"error": r.paired.error} if r.paired.error else {}), **({"round": r.round} if r.round else {}),
            "answer": r.answer,
            "metrics": as_json(r.metrics), "delong": as_json(r.delong)}


ABLATIONS = Section("ablations", _ablations, lambda res: {"ablations": [_ablation_json(r) for r in res.ablations]})


# ----------------------------------------------------------------------------------------------
# figures and warnings


def _curves(res: AnalysisResult) -> list[str]:
    names = sorted(n for n in res.plots if n.startswith("curves_"))
    if not names:
        return []
    return ["## Learning curves", "",
            "Training loss and validation NE from each run's TensorBoard event files; colour = model size, one "
            "line per seed, unhealthy runs dashed.", "", *[f"![{n}]({res.plots[n]})" for n in names], ""]


CURVES = Section("learning curves", _curves)


def _grouped(res: AnalysisResult) -> list[str]:
    extra = [n for n in ("groups", "settings") if n in res.plots]
    if not (extra or res.group_note):
        return []
    return (["## Grouped metrics and data settings", ""] + ([res.group_note, ""] if res.group_note else [])
            + [f"![{n}]({res.plots[n]})" for n in extra] + [""])


GROUPED = Section("grouped metrics", _grouped)

WARNINGS = Section("warnings", lambda res: ["## Warnings", "", *[f"- {w}" for w in res.warnings], ""]
                   if res.warnings else [], lambda res: {"plots": res.plots, "warnings": res.warnings})


def _health(res: AnalysisResult) -> list[str]:
    health = res.health
    if health is None:
        return []
    c = health.counts
    out = ["## Run health", "",
           f"{health.total_runs} runs: " + ", ".join(f"{c[s]} {s}" for s in H.STATUSES) + ". Criteria "
           "(harness/run_health.py): " + "; ".join(f"{name}: {text}" for name, text in H.CRITERIA.items()) + ".", ""]
    out += [f"_{n}_" for n in health.notes()] + ([""] if health.notes() else [])
    if health.excluded:
        out += ["Unhealthy runs: failed ones are left out, undertrained ones used and marked (docs/analysis.md, "
                "*Run health*).", "",
                *markdown_table(["run", "status", "reason", "in the analysis"],
                                [[e.trial, e.status, e.reasons,
                                  f"**{why_kept(e)}**" if e.kept else "left out"] for e in health.excluded]), ""]
    return out


def _health_json(res: AnalysisResult) -> dict:
    h = res.health
    if h is None:
        return {}
    return {"run_health": {"counts": h.counts, "unrecorded": h.unrecorded, "unchecked": h.unchecked,
                           "still_falling_unchecked": dict(h.falling_unchecked), "excluded": as_json(h.excluded)}}


HEALTH = Section("run health", _health, _health_json)


def _retried(res: AnalysisResult) -> list[str]:
    if res.retried is None:
        return []
    head = ["## Retried runs", "",
            "The sweep's `retry:` policy trained an unhealthy run again at a lower learning rate; each run below is "
            "its final attempt everywhere in this report (docs/sweeps.md).", ""]
    if not res.retried:
        return head + ["No run needed a retry.", ""]
    rows = [[r.trial, r.setting, str(r.seed), r.path, r.status] for r in res.retried]
    return head + markdown_table(["run", "setting", "seed", "learning rate → status, per attempt", "final status"],
                                 rows) + [""]


RETRIED = Section("retried runs", _retried,
                  lambda res: {} if res.retried is None else {"retried_runs": as_json(res.retried)})


def tuning_warnings(choice: TuningChoice | None) -> list[str]:
    """One warning per setting whose choice is at the grid's edge or whose every grid value had an unhealthy run."""
    if choice is None:
        return []
    out = []
    for s in choice.settings:
        if s.fallback:
            out.append(f"tuning: {s.setting}: every value of {choice.param} had a tuning run that was not ok; "
                       f"{num(s.chosen, 'g')} was chosen on its mean anyway: its measurement runs may not learn")
        if s.edge is not None:
            word = "lowest" if s.edge == "low" else "highest"
            out.append(f"tuning: {s.setting}: the chosen {choice.param} {num(s.chosen, 'g')} is the grid's {word} "
                       f"value (grid {num(choice.grid[0], 'g')} to {num(choice.grid[-1], 'g')}); its best value may "
                       "lie outside the grid: widen it")
    return out


def tuning_section(choice: TuningChoice | None) -> list[str]:
    """report.md's `## Tuning` table (docs/sweeps.md, "Tuning")."""
    if choice is None:
        return []
    header = ["setting", f"chosen {choice.param}", "at the edge", *(num(v, "g") for v in choice.grid)]
    rows = []
    for s in choice.settings:
        means = [num(m, ".4f") + ("" if ok else " (not ok)")
                 for m, ok in zip(s.means, s.healthy or [True] * len(s.means), strict=True)]
        i = choice.grid.index(s.chosen)
        means[i] = f"**{means[i]}**"
        edge = {"low": "lowest value", "high": "highest value"}.get(s.edge or "", "")
        rows.append([s.setting, num(s.chosen, "g"), edge, *means])
    better = "highest" if choice.mode == "max" else "lowest"
    return ["## Tuning", "",
            f"Before measuring, each setting's {choice.param} was chosen on {choice.metric} ({better} mean over "
            f"tuning seeds {choice.seeds}) among the grid values in the last columns, which give that mean per value "
            "('–': some seed had no finite value; 'not ok': some tuning run of that value did not learn (collapsed, "
            "diverged, or undertrained other than still falling), and the value could not be chosen). Every "
            f"measurement run of a setting trained at its chosen value ({RUNS_FILE}'s `{TUNED}` column names the "
            "key). A choice at the grid's edge is listed under Warnings.",
            "", *markdown_table(header, rows), ""]


TUNING = Section("tuning", lambda res: tuning_section(res.tuning),
                 lambda res: {} if res.tuning is None else {"tuning": as_json(res.tuning)})
