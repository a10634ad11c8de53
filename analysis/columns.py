"""Which columns of a runs table make a model size, a family, a data setting and a data arm (docs/analysis.md,
"Families and sizes" and "Data protocols"); planned trials and finished runs are read alike."""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from core.typed_config import ConfigError
from harness import runs_columns as C


def size_columns(runs: pd.DataFrame, config_cols: list[str], size_by: list[str]) -> list[str]:
    """Configured size columns (checked against the table), or the default ones."""
    if size_by:
        missing = [c for c in size_by if c not in runs.columns]
        if missing:
            raise ConfigError(f"analysis.scaling.size_by: column(s) {', '.join(missing)} not in the runs; "
                              f"model columns: {', '.join(c for c in config_cols if c.startswith(C.MODEL_PREFIX))}")
        return list(size_by)
    def numeric(col: pd.Series) -> bool:
        return pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col)
    return [c for c in config_cols if c.startswith(C.MODEL_PREFIX) and (c == C.MODEL_SIZE or numeric(runs[c]))]


def _follows_sizes(runs: pd.DataFrame, column: str, sizes: list[str]) -> bool:
    """True when `column` has one value per (arch, size) and more than one per arch somewhere."""
    keys = [C.ARCH, *sizes]
    per_size = runs.groupby(keys, dropna=False)[column].nunique(dropna=False)
    per_arch = runs.groupby(C.ARCH, dropna=False)[column].nunique(dropna=False)
    return bool((per_size <= 1).all() and (per_arch > 1).any())


def family_columns(runs: pd.DataFrame, config_cols: list[str], sizes: list[str]) -> list[str]:
    """Setting columns that define a family: every config column but the sizes and their attributes."""
    return [c for c in config_cols if c not in sizes
            and not (sizes and c.startswith(C.MODEL_PREFIX) and _follows_sizes(runs, c, sizes))]


def labelled_columns(runs: pd.DataFrame, family_cols: list[str]) -> list[str]:
    """Family columns other than arch that vary within some architecture (they appear in family labels); one that
    only differs between architectures (e.g. `model.mix_tokens`) says nothing the architecture's name does not."""
    return [c for c in family_cols if c != C.ARCH
            and bool((runs.groupby(C.ARCH, dropna=False)[c].nunique(dropna=False) > 1).any())]


def same_setting(runs: pd.DataFrame, setting: dict[str, Any]) -> np.ndarray:
    """Mask of the rows whose columns read as every value of `setting` (compared as text)."""
    mask = np.ones(len(runs), dtype=bool)
    for c, v in setting.items():
        mask &= (runs[c].astype(str) == str(v)).to_numpy()
    return mask


def show(value) -> str:
    """A setting value for labels: 64.0 (a float column because other architectures leave it empty) as 64."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def context_columns(family_cols: list[str]) -> list[str]:
    """Family columns shared by every architecture (data and training settings, not model.* options):
    a family and its reference must agree on them."""
    return [c for c in family_cols if c != C.ARCH and not c.startswith(C.MODEL_PREFIX)]


#: Columns naming a whole dataset; never pairing keys of a comparison that varies a data setting.
DATASET_IDENTITY = (C.DATA_NAME, C.DATASET_ID)


def is_data_column(column: str) -> bool:
    return column in C.data_setting_columns() or column in DATASET_IDENTITY or column.startswith(C.DATA_PREFIX)


def varies_data(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """True when selectors `a` and `b` of a comparison differ in a data setting."""
    return any(is_data_column(k) for k in (*a, *b))


def arm_columns(runs: pd.DataFrame, config_columns: list[str]) -> list[str]:
    """Data columns that take more than one value in `runs` (empty: a single data arm). The tasks of multi-task
    runs (one row per task, docs/tasks.md) are heads of one model on the same targets, not data arms."""
    cols = [c for c in config_columns if is_data_column(c) and c != C.DATASET_ID]
    if C.TASKS in runs.columns and runs[C.TASKS].notna().all():
        cols = [c for c in cols if c != C.TASK]
    return [c for c in cols if runs[c].nunique(dropna=False) > 1]


def arm_label(row: pd.Series, columns: list[str]) -> str:
    """`data.name` when the sweep names its data bundles, else the varied settings (n/a where empty)."""
    if C.DATA_NAME in columns and pd.notna(row[C.DATA_NAME]):
        return str(row[C.DATA_NAME])
    return ", ".join(f"{c}={'n/a' if pd.isna(row[c]) else show(row[c])}" for c in columns)
