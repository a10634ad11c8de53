"""User-facing errors. The CLI prints their message to stderr and exits non-zero, without a traceback."""
from __future__ import annotations

import errno
import re
import shutil
from pathlib import Path


class RecscaleError(Exception):
    """Base class of errors caused by user input (files, configs, arguments)."""


def one_line(error: BaseException) -> str:
    """An exception's message on one line (YAML and JSON parsers spread theirs over several lines)."""
    parts = [line.strip() for line in str(error).splitlines() if line.strip()]
    return "; ".join(parts) or type(error).__name__


#: numpy's message for a short write (`ndarray.tofile`), which keeps no errno: a full disk
_SHORT_WRITE = re.compile(r"\d+ requested and \d+ written")


def disk_full(error: BaseException) -> BaseException | None:
    """The exception in `error`'s chain (causes and contexts) that says the disk or a quota is full, or None."""
    seen: set[int] = set()
    link: BaseException | None = error
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        text = str(link)
        if getattr(link, "errno", None) in (errno.ENOSPC, errno.EDQUOT) or "No space left on device" in text or (
                isinstance(link, OSError) and _SHORT_WRITE.search(text)):
            return link
        link = link.__cause__ or link.__context__
    return None


def disk_full_line(path: Path, again: str = "run the command again") -> str:
    """One line for a full disk at `path` (a file, or the output location being written): the space left there."""
    existing = next((p for p in (path, *path.parents) if p.exists()), Path.cwd())
    usage = shutil.disk_usage(existing)
    return (f"{path}: no space left on device (the file system holding {existing}: {usage.free / 2**20:,.1f} MiB free "
            f"of {usage.total / 2**20:,.1f} MiB, the partial output removed); free space there, or write elsewhere, "
            f"and {again}")
