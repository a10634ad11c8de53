"""Atomic writes of single files: a file is either its previous content or the complete new one (docs/contracts.md,
"Sweeps and analysis"). A SIGKILL can leave the temporary file behind: `temporary_glob(name)` finds such leftovers
(`harness.run_folder.clean_stale_temporaries`).
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any


def temporary_glob(name: str) -> str:
    """Glob pattern of the temporary files any process may have left for file `name`."""
    return f".{name}.tmp.*"


def atomic_write(path: Path, write: Callable[[Path], Any]) -> None:
    """Call `write(tmp)` to fill a temporary file, then rename it onto `path`; nothing is left on failure."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException as e:  # an error or an abort mid-write: no temporary file left, `path` untouched
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError) and e.filename in (None, str(tmp)):
            e.filename = str(path)  # name the file the user knows (pyarrow and a full disk name none)
        raise


def write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(text))


def write_json(path: Path, value: Any, **dumps_options: Any) -> None:
    """`json.dumps(value, **dumps_options)` written atomically (serialised before the file is opened)."""
    write_text(path, json.dumps(value, **dumps_options))


def write_parquet(path: Path, table: Any, **options: Any) -> None:
    """A pyarrow Table (`pyarrow.parquet.write_table`) or a pandas DataFrame (`to_parquet`), atomically."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if isinstance(table, pa.Table):
        atomic_write(path, lambda tmp: pq.write_table(table, tmp, **options))
    else:
        atomic_write(path, lambda tmp: table.to_parquet(tmp, **options))
