"""Checking an output location before a command writes anything there: `check_writable(path, what)` refuses a
location that cannot be written, in one line naming the path and what was to be written, and creates nothing
that stays, so no stub folder blocks a rerun (docs/reliability.md, "Output locations").
"""
from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

from core.errors import RecscaleError

#: Every location `check_writable` checked in this process, latest last: where a command was writing when a
#: write fails without naming its file (cli/main.py's disk-full line).
CHECKED: list[Path] = []


class OutputLocationError(RecscaleError):
    """An output location cannot be written; names the path and the operation."""


def check_writable(path: str | Path, what: str) -> None:
    """Refuse (OutputLocationError) when `what` cannot be written at `path` (a folder or a file to create
    or replace); creates nothing."""
    path = Path(path).absolute()
    CHECKED.append(path)
    existing = next((p for p in (path, *path.parents) if os.path.lexists(p)), Path("."))  # nearest existing
    if existing.is_file() and existing != path:
        raise OutputLocationError(f"{path}: cannot write {what}: {existing} is a file, not a folder")
    folder = existing if existing.is_dir() else existing.parent
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as e:
        reason = "read-only file system" if e.errno == errno.EROFS else (e.strerror or str(e)).lower()
        raise OutputLocationError(f"{path}: cannot write {what}: {folder}: {reason}") from None
