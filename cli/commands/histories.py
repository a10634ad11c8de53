"""Export the history membership of every target of a split: the audit trail.

Writes a parquet file with one row per target (stored order): `event_id` of the target and
`history_event_ids`, the ordered list (ascending time) of the event ids in its history. Anyone can
check membership against the raw log with it, independently of recscale.

Example:
  recscale histories artifacts/prepared/synthetic-exposure-0123abcd --split test --out test_histories.parquet
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pyarrow as pa

from core import results_layout as layout
from core.atomic_write import write_parquet
from core.errors import RecscaleError
from protocols.artifact import PreparedDataset, load_array
from protocols.output_location import check_writable
from protocols.split import SPLITS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("artifact", help="prepared dataset folder (printed by `recscale prepare`)")
    parser.add_argument("--split", required=True, choices=SPLITS, help="which split to export")
    parser.add_argument("--out", required=True, help="output parquet file")


def history_table(ds: PreparedDataset, split: str) -> pa.Table:
    """Columns event_id (int64) and history_event_ids (list<int64>), one row per target."""
    event_ids = load_array(ds.path / layout.EXPOSURE_EVENT_ID_FILE)
    rows = ds.history_rows(split)  # [n, L]
    valid = rows >= 0
    offsets = np.concatenate([[0], np.cumsum(valid.sum(axis=1))]).astype(np.int64)
    values = np.asarray(event_ids[rows[valid]], dtype=np.int64)  # row-major: per target, ascending
    lists = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(values))
    target_ids = ds.targets(split).column("event_id")
    return pa.table({"event_id": target_ids, "history_event_ids": lists})


def run(args: argparse.Namespace) -> int:
    ds = PreparedDataset.open(args.artifact)
    out = Path(args.out)
    if out.suffix != ".parquet":
        raise RecscaleError(f"--out {out}: expected a .parquet file name")
    check_writable(out, "the history table")
    out.parent.mkdir(parents=True, exist_ok=True)
    table = history_table(ds, args.split)
    write_parquet(out, table)
    print(f"wrote {table.num_rows:,} {args.split} targets to {out}")
    return 0
