"""Data settings and data arms: the columns of runs.parquet that say which prepared dataset a run used.

A *data setting* (`harness.runs_columns.data_setting_columns()`: `protocol`, `task`, a parameter of any
registered protocol such as `delay_s` and `history_len`; or any `data.*` column) changes the prepared dataset.
The protocol parameters come from the protocol registry, so a protocol added from RECSCALE_PROTOCOL_PATH brings
its parameters along; analyse its sweep with the same path set.
A sweep's data bundle names it (`data.name`) and the sweep records a hash of it (`dataset_id`): those two
columns identify the dataset as a whole, so a comparison that varies a data setting must not pair on them
(the two sides always differ there). A *data arm* is one distinct value of the data columns a sweep varies,
e.g. `exposure-0s`, `exposure-60s` and `author50` in sweeps/delay_protocol.yaml.
"""
from __future__ import annotations

from typing import Any

import pandas as pd

from harness import runs_columns as C

from .families import show

#: Columns naming a whole dataset; never pairing keys of a comparison that varies a data setting.
DATASET_IDENTITY = (C.DATA_NAME, C.DATASET_ID)


def is_data_column(column: str) -> bool:
    return column in C.data_setting_columns() or column in DATASET_IDENTITY or column.startswith(C.DATA_PREFIX)


def varies_data(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """True when selectors `a` and `b` of a comparison differ in a data setting."""
    return any(is_data_column(k) for k in (*a, *b))


def arm_columns(runs: pd.DataFrame, config_columns: list[str]) -> list[str]:
    """Data columns that take more than one value in `runs` (empty: a single data arm)."""
    cols = [c for c in config_columns if is_data_column(c) and c != C.DATASET_ID]
    return [c for c in cols if runs[c].nunique(dropna=False) > 1]


def arm_label(row: pd.Series, columns: list[str]) -> str:
    """`data.name` when the sweep names its data bundles, else the varied settings (n/a where empty)."""
    if C.DATA_NAME in columns and pd.notna(row[C.DATA_NAME]):
        return str(row[C.DATA_NAME])
    return ", ".join(f"{c}={'n/a' if pd.isna(row[c]) else show(row[c])}" for c in columns)
