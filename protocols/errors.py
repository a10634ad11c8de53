"""The data-side user error: a log file that breaks a validation rule (the base class is core.errors'), and
`check_rows`, which raises it at a column's first bad record."""
from __future__ import annotations

import numpy as np

from core.errors import RecscaleError


class DataValidationError(RecscaleError):
    """A log file breaks a validation rule; names the file, the record index, the field and the value."""

    def __init__(self, file: str, field: str, message: str, *, record: int | None = None, value: object = None):
        self.file, self.field, self.record, self.value = file, field, record, value
        where = f"{file}" + (f", record {record}" if record is not None else "") + f", field {field!r}"
        shown = f" (value {value!r})" if value is not None else ""
        super().__init__(f"{where}: {message}{shown}")


def plain(value: object) -> object:
    """A numpy scalar as the Python value it holds (its repr in a message is the plain one)."""
    return value.item() if isinstance(value, np.generic) else value


def check_rows(file: object, field: str, bad: np.ndarray, values: np.ndarray | None, message: str, *,
               count: bool = False) -> None:
    """Raise DataValidationError at the first record where `bad` holds (1-based, with its value from `values`;
    `count`: the message also says how many records are bad)."""
    rows = np.flatnonzero(bad)
    if len(rows):
        i = int(rows[0])
        raise DataValidationError(str(file), field, f"{message} ({len(rows)} record(s))" if count else message,
                                  record=i + 1, value=None if values is None else plain(values[i]))
