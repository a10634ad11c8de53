"""Pairing runs for a comparison question: A's run with B's of the same seed and every setting both sides carry, one
stratum per value of those settings (docs/analysis.md, *The report, in order*, item 2)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from core.results_layout import RUNS_FILE
from core.typed_config import ConfigError
from harness import runs_columns as C
from protocols.errors import plain

from ..collect import SweepResults
from ..columns import DATASET_IDENTITY, show, varies_data
from ..config import QuestionConfig


@dataclass
class PairedRuns:
    """Runs of A and B aligned by seed for one comparison stratum (row labels index `SweepResults.runs`)."""

    comparison: str
    stratum: dict[str, Any]
    seeds: np.ndarray  # [S]
    rows_a: np.ndarray  # [S]
    rows_b: np.ndarray  # [S]
    notes: list[str] = field(default_factory=list)
    varies_data: bool = False  # the two sides differ in a data setting (protocol, delay, history length)

    @property
    def runs(self) -> tuple[tuple, tuple]:
        """What the stratum compares (a question asked on several metrics has one stratum per metric on them)."""
        return tuple(self.rows_a), tuple(self.rows_b)

    @property
    def error(self) -> str | None:
        """Why nothing could be paired (None when at least one seed pairs)."""
        if len(self.seeds):
            return None
        return f"comparison {self.comparison!r} found no paired runs: {'; '.join(self.notes) or 'no runs'}"

    @property
    def label(self) -> str:
        if not self.stratum:
            return self.comparison
        return f"{self.comparison} [{', '.join(f'{k}={show(v)}' for k, v in self.stratum.items())}]"


def _matches(column: pd.Series, value: Any) -> np.ndarray:
    if isinstance(value, list):
        return np.logical_or.reduce([_matches(column, v) for v in value]) if value else np.zeros(len(column), bool)
    if isinstance(value, bool) or column.dtype == bool:
        return (column.astype(object) == value).to_numpy()
    if isinstance(value, (int, float)) and pd.api.types.is_numeric_dtype(column):
        return np.isclose(column.to_numpy(dtype=np.float64), float(value), rtol=1e-9, atol=0.0)
    return (column.astype(str) == str(value)).to_numpy()


def select(runs: pd.DataFrame, selector: dict[str, Any]) -> np.ndarray:
    """Boolean mask of the runs whose columns equal every value of `selector` (a list means any of)."""
    mask = np.ones(len(runs), dtype=bool)
    for key, value in selector.items():
        if key not in runs.columns:
            raise ConfigError(f"selector column {key!r} is not in {RUNS_FILE}; columns: {', '.join(runs.columns)}")
        mask &= _matches(runs[key], value)
    return mask


def pair_runs(results: SweepResults, comparison: QuestionConfig) -> list[PairedRuns]:
    """One `PairedRuns` per stratum; a comparison without matching runs gives one empty entry with a note."""
    runs = results.runs
    scope = select(runs, comparison.where)
    side_a, side_b = runs[scope & select(runs, comparison.a)], runs[scope & select(runs, comparison.b)]
    empty = np.array([], dtype=np.int64)
    data = varies_data(comparison.a, comparison.b)
    if side_a.empty or side_b.empty:
        which, selector = ("A", comparison.a) if side_a.empty else ("B", comparison.b)
        return [PairedRuns(comparison.name, {}, empty, empty, empty,
                           [f"no runs match side {which} ({selector}, within {comparison.where or 'all runs'})"], data)]
    keys = [c for c in results.config_columns if c not in comparison.a and c not in comparison.b
            and not (data and c in DATASET_IDENTITY)]
    filled_a = set(side_a.columns[side_a.notna().any()])  # columns with a value in some run of the side
    filled_b = set(side_b.columns[side_b.notna().any()])
    shared = [c for c in keys if c in filled_a and c in filled_b]
    only_a = [c for c in keys if c not in shared and c in filled_a]
    only_b = [c for c in keys if c not in shared and c in filled_b]
    left = side_a[[C.SEED, *shared, *only_a]].assign(_row_a=side_a.index.to_numpy())
    right = side_b[[C.SEED, *shared, *only_b]].assign(_row_b=side_b.index.to_numpy())
    merged = left.merge(right, on=[C.SEED, *shared], how="inner")
    if merged.empty:
        return [PairedRuns(comparison.name, {}, empty, empty, empty,
                           ["A and B share no seed with the same settings (" + ", ".join([C.SEED, *shared]) + ")"],
                           data)]
    strata_cols = [*shared, *only_a, *only_b]
    varying = [c for c in strata_cols if merged[c].nunique(dropna=False) > 1]
    # also name settings the pairing narrowed down (e.g. A has several widths, only one pairs with B)
    shown = [c for c in strata_cols if c in varying or side_a[c].nunique(dropna=False) > 1
             or side_b[c].nunique(dropna=False) > 1]
    shown = _without_implied(merged, shown, first=list(results.config.scaling.size_by))
    out: list[PairedRuns] = []
    groups = merged.groupby(varying, dropna=False, sort=True) if varying else [((), merged)]
    for _, group in groups:
        if group[C.SEED].duplicated().any():
            seed = group.loc[group[C.SEED].duplicated(), C.SEED].iloc[0]
            raise ConfigError(f"comparison {comparison.name!r}: seed {seed} pairs with several runs; "
                              "add a selector or `where` that makes the pairing unique")
        group = group.sort_values(C.SEED)
        stratum = {c: plain(group[c].iloc[0]) for c in shown}
        out.append(PairedRuns(comparison.name, stratum, group[C.SEED].to_numpy(),
                              group["_row_a"].to_numpy(), group["_row_b"].to_numpy(), varies_data=data))
    return out


def _without_implied(merged: pd.DataFrame, columns: list[str], *, first: list[str]) -> list[str]:
    """`columns` less those whose value follows from the ones kept before them (e.g. a size bundle's name,
    or a head count that grows with the width), size columns considered first: labels stay short."""
    ordered = [c for c in first if c in columns] + [c for c in columns if c not in first]
    kept: list[str] = []
    for c in ordered:
        if kept and (merged.groupby(kept, dropna=False)[c].nunique(dropna=False) <= 1).all():
            continue
        kept.append(c)
    return [c for c in columns if c in kept]
