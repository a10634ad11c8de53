"""User-facing errors. The CLI prints their message to stderr and exits non-zero, without a traceback."""
from __future__ import annotations

import errno
import re


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
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        text = str(error)
        if getattr(error, "errno", None) in (errno.ENOSPC, errno.EDQUOT) or "No space left on device" in text or (
                isinstance(error, OSError) and _SHORT_WRITE.search(text)):
            return error
        error = error.__cause__ or error.__context__
    return None
