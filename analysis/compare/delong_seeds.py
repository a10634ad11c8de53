"""DeLong's paired AUC test (DeLong, DeLong & Clarke-Pearson 1988; Sun & Xu's (2014) O(n log n) midrank algorithm,
ties counting 1/2) per seed of a comparison (test-sample noise of one trained pair, beside the seed-level verdict),
from the runs' predictions or, in a published reference, from `score_ranks_<split>.parquet`: one row per event,
`event_id`, `label` and a `uint32` dense score rank per run named by its trial_id (docs/analysis.md)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from scipy import stats

from core.atomic_write import write_parquet
from core.results_layout import RUNS_FILE, predictions_file, score_ranks_file
from harness import runs_columns as C
from protocols.errors import DataValidationError

from ..collect import SweepResults
from .pairing import PairedRuns


@dataclass(frozen=True)
class DeLongResult:
    """Paired comparison of AUC_a and AUC_b on the same events (two-sided test of equal AUC)."""

    auc_a: float
    auc_b: float
    var_a: float
    var_b: float
    cov_ab: float
    z: float
    p_value: float
    n_pos: int
    n_neg: int

    @property
    def delta(self) -> float:
        return self.auc_a - self.auc_b

    @property
    def se_delta(self) -> float:
        return float(np.sqrt(max(self.var_a + self.var_b - 2.0 * self.cov_ab, 0.0)))


def structural_components(labels: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """AUCs [K], V10 = (Tz - Tx) / n [K, m] and V01 = 1 - (Tz - Ty) / m [K, n] of K score rows [K, N] against
    binary `labels` [N] (Tx, Ty, Tz: midranks within positives, within negatives, over all events)."""
    labels = np.asarray(labels).astype(bool)
    scores = np.atleast_2d(np.asarray(scores, dtype=np.float64))  # [K, N]
    if scores.shape[1] != labels.shape[0]:
        raise ValueError(f"scores have {scores.shape[1]} events, labels {labels.shape[0]}")
    pos, neg = scores[:, labels], scores[:, ~labels]  # [K, m], [K, n]
    m, n = pos.shape[1], neg.shape[1]
    if m == 0 or n == 0:
        raise ValueError(f"DeLong needs both classes; got {m} positives and {n} negatives")
    tx = stats.rankdata(pos, axis=1)  # midranks within positives
    ty = stats.rankdata(neg, axis=1)  # midranks within negatives
    tz = stats.rankdata(np.concatenate([pos, neg], axis=1), axis=1)  # [K, m + n]
    tz_pos, tz_neg = tz[:, :m], tz[:, m:]
    auc = (tz_pos.sum(axis=1) - m * (m + 1) / 2.0) / (m * n)
    v10 = (tz_pos - tx) / n
    v01 = 1.0 - (tz_neg - ty) / m
    return auc, v10, v01


def delong_covariance(labels: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """AUCs [K] and their DeLong covariance matrix [K, K] for score rows [K, N]."""
    auc, v10, v01 = structural_components(labels, scores)
    m, n = v10.shape[1], v01.shape[1]
    s10 = np.atleast_2d(np.cov(v10)) if m > 1 else np.zeros((len(auc), len(auc)))
    s01 = np.atleast_2d(np.cov(v01)) if n > 1 else np.zeros((len(auc), len(auc)))
    return auc, s10 / m + s01 / n


def delong_paired(labels: np.ndarray, scores_a: np.ndarray, scores_b: np.ndarray) -> DeLongResult:
    """DeLong's two-sided test of AUC_a == AUC_b for two score vectors on the same labelled events."""
    labels = np.asarray(labels).astype(bool)
    auc, cov = delong_covariance(labels, np.stack([scores_a, scores_b]))
    var_delta = cov[0, 0] + cov[1, 1] - 2.0 * cov[0, 1]
    delta = auc[0] - auc[1]
    if var_delta <= 0.0:  # identical rankings: no evidence of a difference
        z, p = 0.0, 1.0
    else:
        z = float(delta / np.sqrt(var_delta))
        p = float(2.0 * stats.norm.sf(abs(z)))
    return DeLongResult(
        auc_a=float(auc[0]), auc_b=float(auc[1]), var_a=float(cov[0, 0]), var_b=float(cov[1, 1]),
        cov_ab=float(cov[0, 1]), z=z, p_value=p, n_pos=int(labels.sum()), n_neg=int((~labels).sum()),
    )



def _run_predictions(results: SweepResults, row: int) -> pd.DataFrame | None:
    """The prediction file of run `row`, or None (no run folder, or no file in it)."""
    run_dir = results.runs.at[row, C.RUN_DIR] if C.RUN_DIR in results.runs.columns else None
    return None if run_dir is None or pd.isna(run_dir) else results.predictions(run_dir)


def write_score_ranks(results: SweepResults, rows: list[int], out: Path) -> Path | None:
    """Write the dense score ranks of runs `rows` to `out`; None when none of them has a prediction file."""
    frames: list[pd.DataFrame] = []
    names: list[str] = []
    for row in sorted(set(rows)):
        if (pred := _run_predictions(results, row)) is None:
            continue
        rank = stats.rankdata(pred["score"].to_numpy(dtype=np.float64), method="dense").astype(np.uint32)
        name = str(results.runs.at[row, C.TRIAL_ID])
        frames.append(pd.DataFrame({"event_id": pred["event_id"].to_numpy(np.int64),
                                    "label": pred["label"].to_numpy(np.float32), name: rank}))
        names.append(name)
    if not frames:
        return None
    table = frames[0]
    for f in frames[1:]:
        table = table.merge(f, on="event_id", how="outer", suffixes=("", "_new"))
        if "label_new" in table.columns:
            known = table["label"].notna() & table["label_new"].notna()
            if (table.loc[known, "label"] != table.loc[known, "label_new"]).any():
                raise DataValidationError(str(out), "label", f"run {f.columns[-1]} labels an event differently")
            table["label"] = table["label"].fillna(table["label_new"])
            table = table.drop(columns="label_new")
    table = table.sort_values("event_id", kind="stable").reset_index(drop=True)
    arrays = {"event_id": pa.array(table["event_id"].to_numpy(np.int64)),
              "label": pa.array(table["label"].to_numpy(np.float32))}
    for name in names:
        col = table[name]
        arrays[name] = pa.array(col.to_numpy(np.float64, na_value=0).astype(np.uint32), mask=col.isna().to_numpy())
    write_parquet(out, pa.table(arrays), compression="zstd")
    return out


class ScoreRanks:
    """The ranks file of a sweep folder, read once (absent file: no run has ranks)."""

    def __init__(self, results: SweepResults):
        path = results.root / score_ranks_file(results.config.split)
        self.table = pq.read_table(path) if path.exists() else None

    def has(self, trial_id: str) -> bool:
        return self.table is not None and trial_id in self.table.column_names

    def predictions(self, trial_id: str) -> pd.DataFrame | None:
        """`event_id, label, score` (score = dense rank) of the run, or None when the file lacks it."""
        table = self.table
        if table is None or not self.has(trial_id):
            return None
        col = table.column(trial_id)
        keep = col.is_valid().to_numpy(zero_copy_only=False)
        return pd.DataFrame({"event_id": table.column("event_id").to_numpy()[keep],
                             "label": table.column("label").to_numpy()[keep],
                             "score": col.to_numpy(zero_copy_only=False)[keep].astype(np.float64)})


@dataclass
class DeLongSeed:
    seed: int
    result: DeLongResult | None
    note: str = ""


class PredictionCache:
    """Predictions keyed by run row, so the baseline's file is read once for all its comparisons; a run
    without its prediction file falls back to its column of the folder's score-ranks file, if any."""

    def __init__(self, results: SweepResults):
        self.results = results
        self.frames: dict[int, pd.DataFrame | None] = {}
        self.ranks = ScoreRanks(results)

    def get(self, row: int) -> pd.DataFrame | None:
        if row not in self.frames:
            runs = self.results.runs
            frame = _run_predictions(self.results, row)
            if frame is None and C.TRIAL_ID in runs.columns:
                frame = self.ranks.predictions(str(runs.at[row, C.TRIAL_ID]))
            self.frames[row] = frame
        return self.frames[row]


def _delong_for_seed(results: SweepResults, cache: PredictionCache, seed: int, row_a: int, row_b: int) -> DeLongSeed:
    pa, pb = cache.get(row_a), cache.get(row_b)
    if pa is None or pb is None:
        return DeLongSeed(int(seed), None, "no prediction files")
    joined = pa.merge(pb, on="event_id", suffixes=("_a", "_b"))
    if joined.empty:
        return DeLongSeed(int(seed), None, "the two runs share no test events")
    mismatch = joined["label_a"].to_numpy() != joined["label_b"].to_numpy()
    if mismatch.any():
        i = int(np.flatnonzero(mismatch)[0])
        run_dir = results.runs.at[row_b, C.RUN_DIR]
        raise DataValidationError(str(results.run_path(run_dir) / predictions_file(results.config.split)),
                                  "label", "label differs from the paired run's for the same event",
                                  value=int(joined["event_id"].iloc[i]))
    labels = joined["label_a"].to_numpy()
    if labels.min() == labels.max():
        return DeLongSeed(int(seed), None, "shared test events have one class only")
    note = "" if len(joined) == len(pa) == len(pb) else f"{len(joined)} shared events of {len(pa)} / {len(pb)}"
    return DeLongSeed(int(seed), delong_paired(labels, joined["score_a"].to_numpy(), joined["score_b"].to_numpy()),
                      note)


def delong_seeds(results: SweepResults, cache: PredictionCache, paired: PairedRuns) -> list[DeLongSeed]:
    """DeLong's test for every seed of one comparison stratum."""
    return [_delong_for_seed(results, cache, s, ra, rb)
            for s, ra, rb in zip(paired.seeds, paired.rows_a, paired.rows_b)]


def delong_summary(seeds: list[DeLongSeed], alpha: float) -> str:
    done = [d.result for d in seeds if d.result is not None]
    if not done:
        return "; ".join(sorted({d.note for d in seeds if d.note})) or "not run"
    hits = sum(r.p_value < alpha for r in done)
    return f"p < {alpha:g} in {hits}/{len(done)} seeds (median p {np.median([r.p_value for r in done]):.3g})"


def delong_coverage(results: SweepResults, compared: list[PairedRuns]) -> str | None:
    """The warning naming how many compared runs have no prediction file or score ranks, or None (docs/analysis.md)."""
    if not results.config.delong:
        return None
    rows = sorted({int(r) for p in compared for r in (*p.rows_a, *p.rows_b)})
    paths = {r: results.predictions_path(r) for r in rows}
    ranks = ScoreRanks(results)
    ranked = {r for r in rows if C.TRIAL_ID in results.runs.columns and ranks.has(str(results.runs.at[r, C.TRIAL_ID]))}
    missing = [r for r in rows if ((p := paths[r]) is None or not p.exists()) and r not in ranked]
    if not missing:
        return None
    example = paths[missing[0]]
    where = f" (e.g. {example.relative_to(results.root)})" if example is not None else " (no run_dir column)"
    return (f"DeLong skipped where a run has no predictions: {len(missing)} of {len(rows)} compared run(s) lack "
            f"{predictions_file(results.config.split)}{where}; the seed-level statistics come from {RUNS_FILE}")
