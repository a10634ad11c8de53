"""`score_ranks_<split>.parquet`: the dense rank of every compared run's scores, so that a published reference
study (no predictions) reruns DeLong's test bit for bit: its statistic depends on the scores only through their
order and ties (docs/analysis.md, "Data protocols"). One row per event: `event_id`, `label`, and one `uint32`
column per run named by its `trial_id` (null where that run did not score the event). `reference publish` writes
it; the analysis reads a run's column when the run's own prediction file is absent."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from scipy import stats

from core.atomic_write import write_parquet
from core.results_layout import score_ranks_file
from harness import runs_columns as C
from protocols.errors import DataValidationError

from ..collect import SweepResults


def write_score_ranks(results: SweepResults, rows: list[int], out: Path) -> Path | None:
    """Write the dense score ranks of runs `rows` (their prediction files) to `out`; None when no run of
    `rows` has a prediction file."""
    frames: list[pd.DataFrame] = []
    names: list[str] = []
    for row in sorted(set(rows)):
        run_dir = results.runs.at[row, C.RUN_DIR] if C.RUN_DIR in results.runs.columns else None
        pred = None if run_dir is None or pd.isna(run_dir) else results.predictions(run_dir)
        if pred is None:
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
        self.path = path
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
