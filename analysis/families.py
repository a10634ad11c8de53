"""Which columns make a model size and which make a family.

A family is one architecture at one value of every setting that is not a size (protocol, delay, ablation
switches, ...); its points are its model sizes. Size columns are `analysis.scaling.size_by`, or by default
every numeric (non-boolean) model.* column plus `model.size` (named sizes such as HELIX's S / M / L).
A model.* column whose value is fixed by the size within each architecture and changes with it (a head width
that follows the model width, the name of a model bundle) is an attribute of the size, not a family key.
These functions take a plain runs table, so a sweep's planned trials (`--dry-run`) and its finished runs
form families the same way.
"""
from __future__ import annotations

import pandas as pd

from core.typed_config import ConfigError

#: A named-size column counts as a size even though it is not numeric.
NAMED_SIZE_COLUMN = "model.size"


def size_columns(runs: pd.DataFrame, config_cols: list[str], size_by: list[str]) -> list[str]:
    """Configured size columns (checked against the table), or the default ones."""
    if size_by:
        missing = [c for c in size_by if c not in runs.columns]
        if missing:
            raise ConfigError(f"analysis.scaling.size_by: column(s) {', '.join(missing)} not in the runs; "
                              f"model columns: {', '.join(c for c in config_cols if c.startswith('model.'))}")
        return list(size_by)
    out = []
    for c in config_cols:
        if not c.startswith("model."):
            continue
        col = runs[c]
        numeric = pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col)
        if c == NAMED_SIZE_COLUMN or numeric:
            out.append(c)
    return out


def _follows_sizes(runs: pd.DataFrame, column: str, sizes: list[str]) -> bool:
    """True when `column` has one value per (arch, size) and more than one per arch somewhere."""
    keys = ["arch", *sizes]
    per_size = runs.groupby(keys, dropna=False)[column].nunique(dropna=False)
    per_arch = runs.groupby("arch", dropna=False)[column].nunique(dropna=False)
    return bool((per_size <= 1).all() and (per_arch > 1).any())


def family_columns(runs: pd.DataFrame, config_cols: list[str], sizes: list[str]) -> list[str]:
    """Setting columns that define a family: every config column but the sizes and their attributes."""
    out = []
    for c in config_cols:
        if c in sizes:
            continue
        if sizes and c.startswith("model.") and _follows_sizes(runs, c, sizes):
            continue
        out.append(c)
    return out


def labelled_columns(runs: pd.DataFrame, family_cols: list[str]) -> list[str]:
    """Family columns other than arch that vary within some architecture (they appear in family labels).

    A column that only differs between architectures (e.g. `model.mix_tokens`, empty for those that lack
    the field) says nothing the architecture's name does not.
    """
    return [c for c in family_cols if c != "arch"
            and bool((runs.groupby("arch", dropna=False)[c].nunique(dropna=False) > 1).any())]


def show(value) -> str:
    """A setting value for labels: 64.0 (a float column because other architectures leave it empty) as 64."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def context_columns(family_cols: list[str]) -> list[str]:
    """Family columns shared by every architecture (data and training settings, not model.* options):
    a family and its reference must agree on them."""
    return [c for c in family_cols if c != "arch" and not c.startswith("model.")]
