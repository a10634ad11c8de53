"""Preparing every distinct dataset of a sweep once, in the driver, before any trial starts (docs/sweeps.md,
"Datasets are prepared once"): the synthetic log is generated first when the sweep has no `data.root`, then
each data configuration goes through the content-addressed `protocols.prepare.prepare`. Trials only receive
the artifact path.
"""
from __future__ import annotations

import re
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import cast

from core.errors import RecscaleError
from core.typed_config import ConfigError, from_dict
from protocols.prepare import PrepareConfig, prepare

from .plan import DatasetPlan
from .schema import Sweep

#: Prepare-setting names at the start of a word, as the prepare errors spell them.
_SETTING_RE = re.compile(r"(?<![\w.])(split\.\w+|n_(?:train|valid|test)\b)")


def log_root(sweep: Sweep) -> Path:
    """The folder of the log every dataset of this sweep is prepared from (generated if synthetic)."""
    if sweep.data_root is not None:
        return sweep.data_root
    from protocols.synthetic import generate

    data = sweep.config.data
    out = Path(data.cache) / "synthetic" / f"{data.scale}-seed{data.log_seed}"
    t0 = time.perf_counter()
    generate(cast(str, data.scale), out, seed=data.log_seed)  # no data_root: the schema requires a scale
    print(f"synthetic log ({data.scale}) ready in {out} ({time.perf_counter() - t0:.1f} s)",
          file=sys.stderr)
    return out


def prepare_datasets(sweep: Sweep, datasets: Iterable[DatasetPlan]) -> dict[str, str]:
    """Dataset id -> absolute artifact path, preparing each distinct dataset once."""
    datasets = list(datasets)
    root = log_root(sweep)
    paths: dict[str, str] = {}
    for d in datasets:
        mapping = {**d.prepare, "root": str(root), "out": str(sweep.config.data.prepared_dir())}
        cfg = from_dict(PrepareConfig, mapping, prefix="data.")
        t0 = time.perf_counter()
        try:
            path = Path(prepare(cfg)).resolve()
        except RecscaleError as e:  # name the keys as the sweep file spells them (data.split..., data.n_...)
            message = _SETTING_RE.sub(r"data.\1", str(e))
            raise (ConfigError if isinstance(e, ConfigError) else RecscaleError)(
                f"dataset {d.dataset_id}: {message}") from None
        print(f"dataset {d.dataset_id} ready in {path} ({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
        paths[d.dataset_id] = str(path)
    return paths
