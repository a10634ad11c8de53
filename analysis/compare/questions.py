"""The study's questions (`analysis.questions`): `evaluate_questions` answers them, `question_deltas` gives each
stratum's per-seed deltas to the power plan (docs/analysis.md, *Questions*)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
from scipy import stats
from tqdm import tqdm

from core.results_layout import RUNS_FILE
from core.typed_config import ConfigError
from harness import metric_registry
from harness import runs_columns as C
from harness.sweep.schema import RoundsSection

from ..collect import SweepResults
from ..columns import show
from ..config import QuestionConfig, describe
from ..fits.family_comparison import FamilyComparison, compare_families
from ..fits.powerlaw import LEVEL as SLOPE_LEVEL
from ..fits.scaling import FamilyScaling
from ..headline import Headline
from ..stats.paired import (
    DECIDED,
    MAX_SEEDS,
    NOT_DECIDED,
    UNTESTABLE,
    PairedStats,
    first_step_level,
    holm,
    holm_levels,
    minimum_detectable_effect,
    paired_stats,
    seeds_for_power,
    t_interval,
    verdict,
)
from ..stats.sequential import SequentialDesign, sequential_verdicts
from .delong_seeds import DeLongSeed, PredictionCache, delong_seeds
from .pairing import PairedRuns, pair_runs, select

nan = float("nan")


@dataclass
class MetricComparison:
    """One metric of a comparison stratum; the verdict fields are set for its question's metric only."""

    metric: str
    stats: PairedStats
    p_holm: float = nan
    level: float = nan  # the level Holm decides it at: p (t) < level exactly when p_holm < alpha
    interval: tuple[float, float] = (nan, nan)  # t interval at 1 - level: excludes 0 exactly when decided
    mde: float = nan  # smallest true delta Holm decides with analysis.power whatever the others (t at alpha / m)
    seeds_needed: float = nan  # seeds detecting its stratum's `target` at that level and power (inf: > MAX_SEEDS)
    verdict: str = ""  # DECIDED, NOT_DECIDED or UNTESTABLE; "" for a metric no question asks about
    seeds: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # [n] the seeds of stats.deltas

    @property
    def favours_a(self) -> bool:
        return (self.stats.mean > 0) == metric_registry.get(self.metric).higher_is_better

    @property
    def decided(self) -> bool:
        return self.verdict == DECIDED


def target_effect(question: QuestionConfig, mean_delta: float) -> tuple[float, str]:
    """(effect, what it is) the seeds needed are counted for: smallest_effect, else |mean delta| (docs/analysis.md)."""
    e = question.smallest_effect
    return (e, "the smallest effect") if e else (abs(mean_delta), "the observed delta")


@dataclass
class AblationResult:
    """One stratum of a comparison question: its paired runs, every metric, DeLong per seed."""

    question: QuestionConfig
    paired: PairedRuns
    metrics: dict[str, MetricComparison]
    delong: list[DeLongSeed] = field(default_factory=list)
    seed_wall_s: float | None = None  # recorded wall seconds of one seed of its two cells (mean over its seeds)
    round: int = 0  # seeds in rounds: the round that decided it, else the last it ran (0: a fixed-seed sweep)

    @property
    def target(self) -> tuple[float, str]:
        """The effect the seeds needed are counted for, and what it is (`target_effect`)."""
        mc = self.metrics.get(self.question.metric)
        return target_effect(self.question, mc.stats.mean if mc else nan)

    @property
    def label(self) -> str:
        return self.paired.label

    @property
    def setting(self) -> str:
        """The stratum's settings in words ("" for a single stratum)."""
        return ", ".join(f"{k.removeprefix(C.MODEL_PREFIX)}={show(v)}" for k, v in self.paired.stratum.items())

    @property
    def warning(self) -> str:
        """Why the verdict's test cannot reach its stated error rate at this seed count ("" when it can)."""
        two = len(self.paired.seeds) == 2
        return "2 seeds: the t-test has 1 df and the sign-flip / Wilcoxon p-values cannot go below 0.5" if two else ""

    @property
    def below_smallest_effect(self) -> bool:
        """Not decided, and the verdict's interval lies within +-smallest_effect: settled as too small to matter."""
        mc, e = self.metrics.get(self.question.metric), self.question.smallest_effect
        return mc is not None and not mc.decided and e > 0 and -e < mc.interval[0] and mc.interval[1] < e

    @property
    def settled(self) -> bool:
        mc = self.metrics.get(self.question.metric)
        return not self.paired.error and mc is not None and (mc.decided or self.below_smallest_effect)

    @property
    def answer(self) -> str:
        """The verdict in words: the better side with the delta and its interval, or why it is not decided."""
        q, mc = self.question, self.metrics.get(self.question.metric)
        n, at = len(self.paired.seeds), f" at round {self.round}" if self.round else ""
        if self.paired.error:
            text = "error: no paired runs"
        elif mc is None or mc.verdict in ("", UNTESTABLE):
            text = f"not testable at {n} paired seed(s)"
        elif mc.decided:
            lo, hi = mc.interval
            text = (f"{describe(q.a) if mc.favours_a else describe(q.b)} better{at}: delta {mc.stats.mean:+.5f} "
                    f"[{lo:+.5f}, {hi:+.5f}]")
            if q.expect != "either":
                text += " (as expected)" if mc.favours_a == (q.expect == "a") else " (against the expected direction)"
        elif self.below_smallest_effect:
            lo, hi = mc.interval
            text = f"no effect of {q.smallest_effect:g} or more: delta in [{lo:+.5f}, {hi:+.5f}]"
        else:
            text = (f"open at the cap (round {self.round}, {n} seeds; MDE {mc.mde:.2g})" if self.round
                    else f"not decided at {n} seeds (MDE {mc.mde:.2g})") + self._seeds_to_decide(mc)
        return text + (f" (warning: {self.warning})" if self.warning else "")

    def _seeds_to_decide(self, mc: MetricComparison) -> str:
        """"; about N more seeds for <target> (about T h of trials)", capped as the power plan caps it."""
        effect, what = self.target
        shown = f"{effect:.2g}" if what != "the observed delta" else f"{mc.stats.mean:+.2g}"  # its sign: the leaning
        n = len(self.paired.seeds)
        return seeds_to_decide_text(mc.seeds_needed, n, f"{what} {shown}", self.seed_wall_s,
                                    enough=f"; {n} seeds would detect {what} {shown} at the planned power")


def seeds_to_decide_text(need: float, n: int, what: str, seed_wall_s: float | None, *, enough: str) -> str:
    """"; about N more seeds for <what> (about T h of trials)" from `need` seeds in all and `n` run, each costing
    `seed_wall_s` (docs/analysis.md, *Questions*); `enough` where the seeds run suffice."""
    if np.isnan(need):
        return ""
    if np.isinf(need):
        return f"; > {MAX_SEEDS} seeds for {what}"
    more = int(need) - n
    if more <= 0:
        return enough
    hours = f" (about {more * seed_wall_s / 3600:.2g} h of trials)" if seed_wall_s is not None else ""
    return f"; about {more} more seed{'' if more == 1 else 's'} for {what}{hours}"


@dataclass
class QuestionResult:
    """One question (an ablation set gives one per switch value, `group` naming the set) and its answer."""

    question: QuestionConfig
    strata: list[AblationResult] = field(default_factory=list)  # comparison questions
    slope_answer: str = ""  # slope questions
    slope_settled: bool = False
    group: str = ""

    @property
    def settled(self) -> bool:
        """Every stratum decided (or below the smallest effect); a slope interval narrow enough."""
        return all(s.settled for s in self.strata) if self.strata else self.slope_settled

    @property
    def answers(self) -> list[tuple[str, str]]:
        """(setting, answer) per stratum; one ("", answer) for a slope question."""
        if self.question.kind in ("slope", "slope_difference"):
            return [("", self.slope_answer)]
        return [(s.setting, s.answer) for s in self.strata]


def questions_of(results: SweepResults) -> list[tuple[QuestionConfig, str]]:
    """(question, ablation set name) for every question of the sweep, ablation sets expanded (docs/analysis.md)."""
    declared = results.config.questions or [
        QuestionConfig(name=f"{a} vs {results.baseline}", a={C.ARCH: a}, b={C.ARCH: results.baseline})
        for a in sorted(results.runs[C.ARCH].unique()) if a != results.baseline]
    out: list[tuple[QuestionConfig, str]] = []
    for q in declared:
        if q.metrics:  # one comparison per metric, the first keeping the name
            out.extend((dataclasses.replace(q, metric=m, metrics=[], name=q.name if i == 0 else
                                            f"{q.name} ({metric_registry.get(m).label})"), "")
                       for i, m in enumerate(q.metrics))
        elif q.kind != "ablation_set":
            out.append((q, ""))
        elif q.switch not in results.runs.columns:
            raise ConfigError(f"analysis.questions: ablation set {q.name!r}: no column {q.switch!r} in {RUNS_FILE}")
        else:
            typed = {str(x): x for x in results.runs[q.switch].dropna().unique()}
            out.extend((dataclasses.replace(q, kind="comparison", name=q.names.get(str(v), f"{q.full} vs {v}"),
                                            a={q.switch: q.full}, b={q.switch: typed.get(str(v), v)}, names={}),
                        q.name) for v in list(q.names) or sorted(set(typed) - {str(q.full)}))
    return out


def _metric_values(results: SweepResults, paired: PairedRuns, metric: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The seeds and A's and B's values of `metric` on the stratum's seeds, pairs without a finite value on both
    left out."""
    column = results.metric_column(metric)
    a, b = (results.runs.loc[rows, column].to_numpy(dtype=np.float64) for rows in (paired.rows_a, paired.rows_b))
    keep = np.isfinite(a) & np.isfinite(b)
    return paired.seeds[keep], a[keep], b[keep]


def question_deltas(results: SweepResults, question: QuestionConfig) -> list[tuple[PairedRuns, np.ndarray]]:
    """Per stratum of a comparison question: its paired runs and the per-seed deltas A - B of the question's
    metric (in `paired.seeds` order, a seed without a finite value on both sides left out)."""
    out = []
    for paired in pair_runs(results, question):
        _, a, b = _metric_values(results, paired, question.metric)
        out.append((paired, a - b))
    return out


def decide(strata: list[AblationResult], alpha: float, power: float, rounds: RoundsSection | None = None) -> None:
    """One Holm over the question metric of every stratum, or with `rounds` the group-sequential rule (which sets each
    stratum's round): sets p_holm, level, interval and verdict, and the MDE and seeds needed at Holm's first step."""
    asked = [(r, r.metrics[r.question.metric]) for r in strata if r.question.metric in r.metrics]
    p = [mc.stats.p_t for _, mc in asked]
    first_step = first_step_level(alpha, np.isfinite(p).sum())
    if rounds is None:
        for (_, mc), p_holm, level in zip(asked, holm(p), holm_levels(p, alpha)):
            mc.p_holm, mc.level, mc.verdict = float(p_holm), float(level), verdict(p_holm, alpha)
            mc.interval = t_interval(mc.stats.mean, mc.stats.std, mc.stats.n, level)
    else:
        design = SequentialDesign(tuple(rounds.seeds), alpha, rounds.spending)
        looks = sequential_verdicts([(mc.seeds, np.array(mc.stats.deltas)) for _, mc in asked], design)
        for (r, mc), v in zip(asked, looks):
            mc.level, mc.interval, r.round = v.level, v.interval, v.look + 1
            mc.verdict = DECIDED if v.rejected else NOT_DECIDED if v.look >= 0 else UNTESTABLE
    for r, mc in asked:
        s = mc.stats
        if np.isfinite(mc.level):
            mc.mde = minimum_detectable_effect(s.std, s.n, alpha=first_step, power=power)
            mc.seeds_needed = seeds_for_power(s.std, r.target[0], alpha=first_step, power=power)


def _seed_wall_s(results: SweepResults, paired: PairedRuns) -> float | None:
    """Mean over the stratum's seeds of the recorded wall seconds of its A and B runs (None without them)."""
    if C.WALL_S not in results.runs.columns or not len(paired.seeds):
        return None
    wall = results.runs[C.WALL_S]
    seconds = wall.loc[paired.rows_a].to_numpy(float) + wall.loc[paired.rows_b].to_numpy(float)  # [S]
    return float(seconds.mean()) if np.isfinite(seconds).all() else None


def _compare(results: SweepResults, questions: list[tuple[QuestionConfig, str]], progress: bool
             ) -> list[QuestionResult]:
    cfg = results.config
    metrics = [m for m in cfg.metrics if results.has_metric(m)]
    cache = PredictionCache(results)
    out = [QuestionResult(q, group=group) for q, group in questions if q.kind == "comparison"]
    work = [(r, p) for r in out for p in pair_runs(results, r.question)]
    for r, paired in tqdm(work, desc="comparisons", disable=not progress, file=None):
        values = {m: _metric_values(results, paired, m) for m in dict.fromkeys([*metrics, r.question.metric])
                  if results.has_metric(m)}
        per_metric = {m: MetricComparison(m, paired_stats(a, b, alpha=cfg.alpha, n_resamples=cfg.n_resamples,
                                                          seed=cfg.bootstrap_seed), seeds=seeds)
                      for m, (seeds, a, b) in values.items()}
        r.strata.append(AblationResult(r.question, paired, per_metric,
                                       delong_seeds(results, cache, paired) if cfg.delong else [],
                                       _seed_wall_s(results, paired)))
    decide([s for r in out for s in r.strata], cfg.alpha, cfg.power, results.rounds)
    return out


def _slope(q: QuestionConfig, scaling: list[FamilyScaling], comparisons: list[FamilyComparison],
           results: SweepResults) -> QuestionResult:
    """A slope question read from the fits: the interval, and whether its half-width meets the target (or,
    without a target, whether it excludes zero)."""
    if q.kind == "slope":
        fit = next((f.fit for f in scaling if f.family == q.family and f.metric == q.metric and f.fit is not None),
                   None)
        if fit is None:
            return QuestionResult(q, slope_answer=f"no power-law fit of family {q.family!r} on {q.metric}")
        value, (lo, hi), n = fit.slope, fit.slope_ci, fit.n_seeds
    elif q.tasks:  # one family on two tasks (a multi-task sweep, docs/tasks.md): paired by seed like two families
        fa, fb = (next((f for f in scaling if q.family in (f.family, f.arch) and str(f.context.get(C.TASK)) == task
                        and f.metric == q.metric and f.fit is not None), None) for task in q.tasks)
        task_diff = compare_families(fa, fb).slope_diff if fa is not None and fb is not None else None
        if task_diff is None:
            return QuestionResult(q, slope_answer=f"no paired power-law fits of family {q.family!r} on tasks "
                                                  f"{', '.join(q.tasks)}")
        value, (lo, hi), n = task_diff.estimate.value, (task_diff.estimate.lo, task_diff.estimate.hi), task_diff.n_seeds
    else:
        c = next((c for c in comparisons if [c.a, c.b] in (q.families, q.families[::-1]) and c.metric == q.metric
                  and c.slope_diff is not None), None)
        if c is None or c.slope_diff is None:
            return QuestionResult(q, slope_answer="no family comparison of these families (analysis.scaling.compare)")
        sign = 1.0 if c.a == q.families[0] else -1.0
        e = c.slope_diff.estimate
        value, (lo, hi), n = sign * e.value, sorted((sign * e.lo, sign * e.hi)), c.slope_diff.n_seeds
    half = (hi - lo) / 2.0
    settled = bool(half <= q.target_half_width) if q.target_half_width > 0 else bool(lo > 0 or hi < 0)
    text = f"{value:+.3f} [{lo:+.3f}, {hi:+.3f}] at {n} seeds"
    if settled and q.target_half_width > 0:
        text += f"; half-width {half:.3g} within the target {q.target_half_width:g}: decided"
    if not settled:
        text += (f"; half-width {half:.3g} above the target {q.target_half_width:g}: open" if q.target_half_width > 0
                 else "; the interval holds 0: open")
        text += _slope_seeds_to_decide(q, value, half, n, results)
    return QuestionResult(q, slope_answer=text, slope_settled=settled)


def slope_seeds_needed(value: float, half: float, n: int, *, target_half_width: float = 0.0,
                       power: float = 0.8, level: float = SLOPE_LEVEL) -> float:
    """Seeds an open slope question needs, from its t interval of half-width `half` over `n` per-seed values
    (docs/analysis.md, *Questions*, `slope`); NaN without a spread, inf past MAX_SEEDS."""
    if n < 2 or not np.isfinite(half) or half <= 0:
        return nan
    alpha = 1.0 - level
    sd = half * np.sqrt(n) / stats.t.ppf(1 - alpha / 2, n - 1)
    if target_half_width <= 0:
        return seeds_for_power(sd, value, alpha=alpha, power=power)
    return next((float(k) for k in range(2, MAX_SEEDS + 1)
                 if stats.t.ppf(1 - alpha / 2, k - 1) * sd / np.sqrt(k) <= target_half_width), float("inf"))


def _slope_seeds_to_decide(q: QuestionConfig, value: float, half: float, n: int, results: SweepResults) -> str:
    """"; about N more seeds for ... (about T h of trials)" for an open slope question (`slope_seeds_needed`)."""
    need = slope_seeds_needed(value, half, n, target_half_width=q.target_half_width, power=results.config.power)
    what = (f"a half-width of {q.target_half_width:g}" if q.target_half_width > 0
            else f"the observed value {value:+.2g}")
    runs = results.runs  # a multi-task run is one row per task (`<trial_id>@<task>` after the first): time it once
    runs = runs[~runs[C.TRIAL_ID].astype(str).str.contains(C.TASK_SEPARATOR, regex=False)]
    arms = results.config.scaling.arms  # a family is an architecture or a named arm of one
    mine = runs[np.logical_or.reduce([select(runs, arms.get(f, {C.ARCH: f})) for f in q.families or [q.family]])
                ] if C.WALL_S in runs.columns else runs.iloc[:0]
    per_seed = float(mine.groupby(C.SEED)[C.WALL_S].sum().mean()) if len(mine) else nan
    return seeds_to_decide_text(need, n, what, per_seed if np.isfinite(per_seed) else None,
                                enough=f"; {n} seeds would give {what} at the planned power: the observed spread "
                                       "misleads it")


def evaluate_questions(results: SweepResults, scaling: list[FamilyScaling], comparisons: list[FamilyComparison],
                       *, progress: bool = True) -> list[QuestionResult]:
    """Every question of the sweep answered, in declaration order (ablation sets expanded)."""
    questions = questions_of(results)
    compared = iter(_compare(results, questions, progress))
    return [next(compared) if q.kind == "comparison" else _slope(q, scaling, comparisons, results)
            for q, _ in questions]


def best_answer(head: Headline | None, strata: list[AblationResult], split: str) -> str:
    """The best-architecture answer (docs/analysis.md, *Questions*, "The best architecture")."""
    rows = [r for r in (head.rows if head is not None else []) if np.isfinite(r.auc[0])]
    tasks = list(dict.fromkeys(str(r.setting[C.TASK]) for r in rows if r.setting.get(C.TASK) is not None))
    if len(tasks) > 1:  # AUCs of different labels do not compare: a best per task
        return "; ".join(f"task {t}: {a}" for t in tasks if (a := _best(
            [r for r in rows if str(r.setting.get(C.TASK)) == t], strata, split)))
    return _best(rows, strata, split)


def _best(rows: list, strata: list[AblationResult], split: str) -> str:
    archs = sorted({r.setting[C.ARCH] for r in rows})
    if len(archs) < 2:
        return ""
    best = max(rows, key=lambda r: r.auc[0])
    arch = best.setting[C.ARCH]
    open_ = [y for y in archs if y != arch and not _decided_against(arch, y, best.setting, strata)]
    top = f"highest mean {split} AUC: {best.label}, {best.auc[0]:.4f} over {best.n_seeds} seed(s)"
    if open_:
        return f"best: not decided among {', '.join([arch, *open_])} ({top})"
    return f"best: {arch} ({top}; decided against every other architecture)"


def _decided_against(x: str, y: str, setting: dict, strata: list[AblationResult]) -> bool:
    """Does a decided AUC comparison favour architecture x over y (the one at x's `setting` where there is one)?"""
    runs: list[tuple[AblationResult, bool]] = []
    for s in strata:
        mc = s.metrics.get("auc")
        if s.paired.error or mc is None or s.question.metric != "auc":
            continue
        arch_a, arch_b = s.question.a.get(C.ARCH, s.question.where.get(C.ARCH)), s.question.b.get(C.ARCH)
        if {arch_a, arch_b} == {x, y}:
            runs.append((s, mc.decided and mc.favours_a == (arch_a == x)))
    here = [won for s, won in runs if all(str(s.paired.stratum.get(c, v)) == str(v) for c, v in setting.items())]
    chosen = here or [won for _, won in runs]
    return bool(chosen) and all(chosen)
