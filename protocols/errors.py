"""User-facing errors. The CLI prints their message to stderr and exits non-zero, without a traceback."""
from __future__ import annotations


class RecscaleError(Exception):
    """Base class of errors caused by user input (files, configs, arguments)."""


class DataValidationError(RecscaleError):
    """A log file breaks a validation rule; names the file, the record index, the field and the value."""

    def __init__(self, file: str, field: str, message: str, *, record: int | None = None, value: object = None):
        self.file, self.field, self.record, self.value = file, field, record, value
        where = f"{file}" + (f", record {record}" if record is not None else "") + f", field {field!r}"
        shown = f" (value {value!r})" if value is not None else ""
        super().__init__(f"{where}: {message}{shown}")


def one_line(error: BaseException) -> str:
    """An exception's message on one line (YAML and JSON parsers spread theirs over several lines)."""
    parts = [line.strip() for line in str(error).splitlines() if line.strip()]
    return "; ".join(parts) or type(error).__name__
