"""The version of recscale's code that a speed calibration belongs to: a hash of its own Python sources.

A sweep's per-trial overhead and its trials' training rates depend on the code as much as on the machine
(what a trial does besides training, how a model steps), so `harness.speed.calibration` files them under this
version beside the machine: a clone with other code never uses them, two clones with the same sources
share them. The hash covers every `.py` file of the packages that run in a trial (`harness`, `protocols`,
`architectures`; not `analysis`), by path and content: an edit of any of them starts a new calibration,
which is honest (an uncalibrated estimate gives a range and says so). The git commit is not used: it
misses uncommitted edits and is absent from an installed copy.
"""
from __future__ import annotations

import hashlib
import importlib
from functools import lru_cache
from pathlib import Path
from typing import cast

#: Packages whose sources decide how long a trial takes.
PACKAGES = ("harness", "protocols", "architectures")


@lru_cache(maxsize=1)
def code_version() -> str:
    """12 hex digits of a blake2b over the packages' .py files (relative path and bytes, sorted by path)."""
    digest = hashlib.blake2b(digest_size=6)
    for name in PACKAGES:
        root = Path(cast(str, importlib.import_module(name).__file__)).resolve().parent  # a package: has a file
        for path in sorted(root.rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            digest.update(f"{name}/{path.relative_to(root).as_posix()}\0".encode())
            digest.update(path.read_bytes())
            digest.update(b"\0")
    return digest.hexdigest()
