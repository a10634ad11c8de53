"""Does the data protocol change the *ranking* of architectures? Rank orders per data arm and
difference-in-differences of model pairs between arms.

A data arm is one value of the data settings a sweep varies (`analysis.data_settings`). A model is an
architecture at one value of every other setting. Per arm, models are ordered by their seed-mean metric.
For models X, Y and arms P, Q, the difference-in-differences of seed s is

    DiD_s = (M[X, P, s] - M[Y, P, s]) - (M[X, Q, s] - M[Y, Q, s])

over the seeds present in all four cells: how much the gap between X and Y changes from arm P to arm Q.
Its mean gets a t interval over seeds (mean ± t_{n-1, 0.975} · sd / sqrt(n)) and a one-sample t-test
(scipy.stats.ttest_1samp); Holm's correction runs over every DiD of the report. A significant DiD says the
protocol changes that comparison beyond seed noise; a flipped sign of the gap with a non-significant DiD is
an order swap within seed noise. Kendall's tau (scipy.stats.kendalltau) of the seed-mean metric between two
arms summarises how far the whole order agrees.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats

from harness import runs_columns as C

from .collect import SweepResults
from .data_settings import arm_columns, arm_label
from .families import labelled_columns, show
from .stats.paired import holm, verdict

LEVEL = 0.95
METHOD = (f"per-seed difference-in-differences, mean with a {LEVEL:.0%} t interval over seeds, one-sample t-test, "
          "Holm over every DiD of the report")


@dataclass
class DiD:
    """(X − Y) under arm P minus (X − Y) under arm Q, per seed."""

    x: str
    y: str
    arm_p: str
    arm_q: str
    seeds: np.ndarray  # [S]
    gap_p: np.ndarray  # [S] X − Y under P
    gap_q: np.ndarray  # [S] X − Y under Q
    mean: float = float("nan")
    sd: float = float("nan")
    ci: tuple[float, float] = (float("nan"), float("nan"))
    p_value: float = float("nan")
    p_holm: float = float("nan")
    verdict: str = ""

    @property
    def deltas(self) -> np.ndarray:
        return self.gap_p - self.gap_q

    @property
    def n(self) -> int:
        return len(self.seeds)

    @property
    def swaps(self) -> bool:
        """The seed-mean order of X and Y differs between the two arms."""
        return bool(np.sign(self.gap_p.mean()) != np.sign(self.gap_q.mean()))


@dataclass
class RankComparison:
    metric: str
    arms: list[str]
    models: list[str]
    means: pd.DataFrame  # [model, arm] seed-mean metric
    n_seeds: pd.DataFrame  # [model, arm]
    did: list[DiD] = field(default_factory=list)
    kendall: list[tuple[str, str, float, float]] = field(default_factory=list)  # (P, Q, tau, p)
    notes: list[str] = field(default_factory=list)

    def order(self, arm: str, *, higher_is_better: bool = True) -> list[str]:
        """Models measured under `arm`, best first."""
        return list(self.means[arm].dropna().sort_values(ascending=not higher_is_better, kind="stable").index)


def did_stats(d: DiD, *, level: float = LEVEL) -> DiD:
    """Fill mean, sd, t interval and p of `d` from its per-seed deltas."""
    x = d.deltas
    d.mean = float(x.mean()) if len(x) else float("nan")
    if len(x) >= 2:
        d.sd = float(x.std(ddof=1))
        half = float(stats.t.ppf(0.5 + level / 2, len(x) - 1)) * d.sd / np.sqrt(len(x))
        d.ci = (d.mean - half, d.mean + half)
        d.p_value = float(stats.ttest_1samp(x, 0.0).pvalue) if d.sd > 0 else float("nan")
    return d


def _arm_order(results: SweepResults, labels: list[str]) -> list[str]:
    """The sweep's own order of its data bundles (grid.data in sweep.yaml), else sorted labels."""
    from core.results_layout import SWEEP_FILE

    from .collect import _read_sweep_doc

    grid = _read_sweep_doc(results.root / SWEEP_FILE).get("grid") or {}
    named = [str(v["name"]) for v in grid.get("data", []) if isinstance(v, dict) and "name" in v]
    first = [n for n in named if n in labels]
    return first + sorted(set(labels) - set(first))


def rank_comparison(results: SweepResults, metric: str = "auc") -> RankComparison | None:
    """Rank orders and DiDs across the data arms of `results` (None with fewer than two arms or models)."""
    runs, cfg = results.runs, results.config
    arm_cols = arm_columns(runs, results.config_columns)
    col = results.metric_column(metric)
    if not arm_cols or col not in runs.columns:
        return None
    model_cols = [c for c in results.config_columns if c not in arm_cols and c != C.DATASET_ID
                  and not c.startswith("data.") and c not in (C.PROTOCOL, *C.protocol_parameter_columns())]
    varying = labelled_columns(runs, model_cols)  # settings that vary within an architecture label a model
    frame = pd.DataFrame({
        "arm": runs.apply(lambda r: arm_label(r, arm_cols), axis=1),
        "model": runs["arch"].astype(str) + runs[varying].apply(
            lambda r: "".join(f", {c}={show(v)}" for c,
                              v in r.items()), axis=1) if varying else runs["arch"].astype(str),
        "seed": runs["seed"].astype(int), "value": runs[col].astype(float)})
    frame = frame[np.isfinite(frame["value"])]
    arms = _arm_order(results, sorted(frame["arm"].unique()))
    if len(arms) < 2 or frame["model"].nunique() < 2:
        return None
    notes = []
    dup = frame.duplicated(["arm", "model", "seed"], keep=False)
    if dup.any():
        notes.append(f"{int(dup.sum())} runs share arm, model and seed (another setting varies): their mean is used")
    cell = frame.groupby(["model", "arm", "seed"])["value"].mean()  # [model, arm, seed]
    means = cell.groupby(["model", "arm"]).mean().unstack("arm")[arms]
    means = means[means.notna().sum(axis=1) >= 2]  # a model measured under one arm only has no between-arm gap
    arms = [a for a in arms if means[a].notna().sum() >= 2]
    if len(arms) < 2 or len(means) < 2:
        return None
    means = means[arms]
    counts = cell.groupby(["model", "arm"]).size().unstack("arm").loc[means.index, arms]
    higher = _higher_is_better(metric)
    models = list(means[arms[0]].sort_values(ascending=not higher, kind="stable").index)
    out = RankComparison(metric, arms, models, means.loc[models], counts.loc[models], notes=notes)
    for p, q in itertools.combinations(arms, 2):
        both = means[[p, q]].dropna()
        if len(both) >= 2:
            tau, pv = stats.kendalltau(both[p], both[q])
            out.kendall.append((p, q, float(tau), float(pv)))
        for x, y in itertools.combinations(models, 2):
            try:
                table = pd.DataFrame({k: cell.loc[(m, a)] for k, (m, a) in
                                      {"xp": (x, p), "yp": (y, p), "xq": (x, q), "yq": (y, q)}.items()}).dropna()
            except KeyError:
                continue
            if table.empty:
                continue
            out.did.append(did_stats(DiD(x, y, p, q, table.index.to_numpy(dtype=np.int64),
                                         (table["xp"] - table["yp"]).to_numpy(),
                                         (table["xq"] - table["yq"]).to_numpy())))
    for d, ph in zip(out.did, holm([d.p_value for d in out.did])):
        d.p_holm, d.verdict = float(ph), verdict(ph, cfg.alpha)
    return out


def _higher_is_better(metric: str) -> bool:
    from harness import metric_registry

    return metric_registry.get(metric).higher_is_better
