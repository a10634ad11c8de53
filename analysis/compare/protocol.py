"""Does the data protocol change the conclusions? Target and history facts beside each data comparison
(`protocol_evidence`) and rank orders between data arms (`rank_comparison`): docs/analysis.md, "Data protocols"."""
from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from core.results_layout import DATASETS_FILE, SWEEP_FILE
from harness import metric_registry
from harness import runs_columns as C
from protocols.errors import DataValidationError

from ..collect import SweepResults, read_sweep_doc
from ..columns import arm_columns, arm_label, labelled_columns, show
from ..stats.paired import LEVEL, holm, paired_stats, seed_mean, t_interval, verdict
from .questions import AblationResult, decide


@dataclass
class ArmFacts:
    """Target sharing and history membership of the two datasets of one data comparison stratum."""

    dataset_a: str
    dataset_b: str
    arm_a: str  # the arm's name (data.name when the sweep names its data bundles, else the dataset id)
    arm_b: str
    split: str
    targets_a: int
    targets_b: int
    shared: int
    share_history_differs: float
    targets_history_differs: int
    mean_valid_length_a: float
    mean_valid_length_b: float
    mean_common_events: float
    notes: list[str] = field(default_factory=list)

    @property
    def dropped(self) -> int:
        return self.targets_a + self.targets_b - 2 * self.shared

    @property
    def same_targets(self) -> bool:
        return self.dropped == 0


def read_facts(results: SweepResults) -> dict[str, Any] | None:
    path = results.root / DATASETS_FILE
    if not path.exists():
        return None
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise DataValidationError(str(path), "(file)", f"not valid JSON: {e}") from None
    for key in ("datasets", "pairs"):
        if key not in doc:
            raise DataValidationError(str(path), key, "required key missing")
    return doc


def _facts(doc: dict[str, Any], a: str, b: str, names: dict[str, str], split: str,
           notes: tuple[str, ...] = ()) -> ArmFacts | None:
    """What datasets.json holds on datasets `a` and `b` in `split`, each named by `names` (None: nothing)."""
    for p in doc["pairs"]:
        if {p["a"], p["b"]} == {a, b} and split in p["splits"]:
            s = p["splits"][split]
            x, y = ("a", "b") if p["a"] == a else ("b", "a")  # stored the other way round: swap the per-side fields
            return ArmFacts(a, b, names[a], names[b], split, int(s[f"targets_{x}"]), int(s[f"targets_{y}"]),
                            int(s["shared_targets"]), float(s["share_history_differs"]),
                            int(s["targets_history_differs"]), float(s[f"mean_valid_length_{x}"]),
                            float(s[f"mean_valid_length_{y}"]), float(s["mean_common_events"]), list(notes))
    return None


def arm_facts(results: SweepResults, doc: dict[str, Any] | None, r: AblationResult) -> ArmFacts | None:
    """Facts of the datasets compared by `r` (None when `r` varies no data setting or nothing is known)."""
    runs = results.runs
    if not r.paired.varies_data or doc is None or C.DATASET_ID not in runs.columns or not len(r.paired.seeds):
        return None
    pairs = sorted({(str(runs.at[ra, C.DATASET_ID]), str(runs.at[rb, C.DATASET_ID]))
                    for ra, rb in zip(r.paired.rows_a, r.paired.rows_b)})
    a, b = pairs[0]
    names = {str(runs.at[x, C.DATASET_ID]): str(runs.at[x, C.DATA_NAME]) if C.DATA_NAME in runs.columns
             and isinstance(runs.at[x, C.DATA_NAME], str) else str(runs.at[x, C.DATASET_ID])
             for x in (*r.paired.rows_a, *r.paired.rows_b)}
    notes = (f"{len(pairs)} dataset pairs among the paired runs; facts of the first",) if len(pairs) > 1 else ()
    return None if a == b else _facts(doc, a, b, names, results.config.split, notes)


def arm_pairs(results: SweepResults, doc: dict[str, Any] | None) -> tuple[list[ArmFacts] | None, list[str]]:
    """Facts of every two datasets the analysed runs use (the data arms the rank order compares), in the
    analysed split, each named by its arm label; and warnings. None without datasets.json."""
    runs = results.runs
    if doc is None:
        return None, []
    cols = arm_columns(runs, results.config_columns)
    if not cols or C.DATASET_ID not in runs.columns:
        return [], []
    names = {str(row[C.DATASET_ID]): arm_label(row, cols) for _, row in runs.drop_duplicates(C.DATASET_ID).iterrows()}
    split = results.config.split
    out, missing = [], []
    for a, b in itertools.combinations(sorted(names), 2):
        f = _facts(doc, a, b, names, split)
        if f is None:
            missing.append(f"{names[a]} / {names[b]}")
        else:
            out.append(f)
    warnings = [f"{DATASETS_FILE} holds no {split} facts for {len(missing)} pair(s) of the analysed datasets "
                f"({'; '.join(missing)}): their target sharing is unknown"] if missing else []
    return out, warnings


def protocol_evidence(results: SweepResults, ablations: list[AblationResult]
                      ) -> tuple[dict[int, ArmFacts], list[ArmFacts] | None, list[str]]:
    """Facts per ablation index, facts of every two data arms (`arm_pairs`), and warnings; a comparison whose arms
    do not share every target gets its AUC statistics on the shared targets (docs/analysis.md, "Data protocols")."""
    doc = read_facts(results)
    data = [i for i, r in enumerate(ablations) if r.paired.varies_data and len(r.paired.seeds)]
    pairs, warnings = arm_pairs(results, doc)
    if data and doc is None:
        warnings.append(f"no {DATASETS_FILE} in the results folder (written by `recscale sweep`): the target "
                        "sharing and history membership of the compared data arms are unknown")
    facts = {i: f for i in data if (f := arm_facts(results, doc, ablations[i])) is not None}
    recomputed = False
    cfg = results.config
    for i, f in facts.items():
        r = ablations[i]
        if f.same_targets or "auc" not in r.metrics:
            continue
        done = [d.result for d in r.delong if d.result is not None]
        if len(done) != len(r.delong) or not done:
            warnings.append(f"{r.label}: the arms share {f.shared} of {f.targets_a} / {f.targets_b} {f.split} "
                            "targets and per-target scores are missing: its seed-level AUC compares different "
                            "target sets")
            continue
        st = paired_stats(np.array([d.auc_a for d in done]), np.array([d.auc_b for d in done]), alpha=cfg.alpha,
                          n_resamples=cfg.n_resamples, seed=cfg.bootstrap_seed)
        r.metrics["auc"].stats = replace(st, notes=(*st.notes, f"AUC on the {f.shared} shared {f.split} targets "
                                                               f"({f.dropped} held by one arm only left out)"))
        recomputed = True
    if recomputed:  # the report's one family decided again
        decide(ablations, cfg.alpha, cfg.power, results.rounds)
    return facts, pairs, warnings


METHOD = (f"per-seed difference-in-differences, mean with a {LEVEL:.0%} t interval over seeds, one-sample t-test, "
          "Holm over every DiD of the report")


@dataclass
class DiD:
    """(X − Y) under arm P minus (X − Y) under arm Q, per seed; its mean, sd, t interval and p follow from them."""

    x: str
    y: str
    arm_p: str
    arm_q: str
    seeds: np.ndarray  # [S]
    gap_p: np.ndarray  # [S] X − Y under P
    gap_q: np.ndarray  # [S] X − Y under Q
    mean: float = field(init=False)
    sd: float = field(init=False)
    ci: tuple[float, float] = field(init=False)
    p_value: float = field(init=False)
    p_holm: float = float("nan")
    verdict: str = ""

    def __post_init__(self) -> None:
        self.mean, self.sd, self.p_value = seed_mean(self.deltas)
        self.ci = t_interval(self.mean, self.sd, self.n, 1.0 - LEVEL)

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

    def order(self, arm: str) -> list[str]:
        """Models measured under `arm`, best first."""
        higher = metric_registry.get(self.metric).higher_is_better
        return list(self.means[arm].dropna().sort_values(ascending=not higher, kind="stable").index)


def _arm_order(results: SweepResults, labels: list[str]) -> list[str]:
    """The sweep's own order of its data bundles (grid.data in sweep.yaml), else sorted labels."""
    grid = read_sweep_doc(results.root / SWEEP_FILE).get("grid") or {}
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
                  and not c.startswith(C.DATA_PREFIX) and c not in (C.PROTOCOL, *C.protocol_parameter_columns())]
    varying = labelled_columns(runs, model_cols)  # settings that vary within an architecture label a model
    frame = pd.DataFrame({
        "arm": runs.apply(lambda r: arm_label(r, arm_cols), axis=1),
        "model": runs[C.ARCH].astype(str) + (runs[varying].apply(
            lambda r: "".join(f", {c}={show(v)}" for c, v in r.items()), axis=1) if varying else ""),
        C.SEED: runs[C.SEED].astype(int), "value": runs[col].astype(float)})
    frame = frame[np.isfinite(frame["value"])]
    arms = _arm_order(results, sorted(frame["arm"].unique()))
    if len(arms) < 2 or frame["model"].nunique() < 2:
        return None
    notes = []
    dup = frame.duplicated(["arm", "model", C.SEED], keep=False)
    if dup.any():
        notes.append(f"{int(dup.sum())} runs share arm, model and seed (another setting varies): their mean is used")
    cell = frame.groupby(["model", "arm", C.SEED])["value"].mean()  # [model, arm, seed]
    means = cell.groupby(["model", "arm"]).mean().unstack("arm")[arms]
    means = means[means.notna().sum(axis=1) >= 2]  # a model measured under one arm only has no between-arm gap
    arms = [a for a in arms if means[a].notna().sum() >= 2]
    if len(arms) < 2 or len(means) < 2:
        return None
    means = means[arms]
    counts = cell.groupby(["model", "arm"]).size().unstack("arm").loc[means.index, arms]
    higher = metric_registry.get(metric).higher_is_better
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
            out.did.append(DiD(x, y, p, q, table.index.to_numpy(dtype=np.int64),
                               (table["xp"] - table["yp"]).to_numpy(), (table["xq"] - table["yq"]).to_numpy()))
    for d, ph in zip(out.did, holm([d.p_value for d in out.did])):
        d.p_holm, d.verdict = float(ph), verdict(ph, cfg.alpha)
    return out
