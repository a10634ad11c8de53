"""User-facing errors. The CLI prints their message to stderr and exits non-zero, without a traceback."""
from __future__ import annotations


class RecscaleError(Exception):
    """Base class of errors caused by user input (files, configs, arguments)."""


def one_line(error: BaseException) -> str:
    """An exception's message on one line (YAML and JSON parsers spread theirs over several lines)."""
    parts = [line.strip() for line in str(error).splitlines() if line.strip()]
    return "; ".join(parts) or type(error).__name__
