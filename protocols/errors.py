"""The data-side user error: a log file that breaks a validation rule (the base class is core.errors')."""
from __future__ import annotations

from core.errors import RecscaleError


class DataValidationError(RecscaleError):
    """A log file breaks a validation rule; names the file, the record index, the field and the value."""

    def __init__(self, file: str, field: str, message: str, *, record: int | None = None, value: object = None):
        self.file, self.field, self.record, self.value = file, field, record, value
        where = f"{file}" + (f", record {record}" if record is not None else "") + f", field {field!r}"
        shown = f" (value {value!r})" if value is not None else ""
        super().__init__(f"{where}: {message}{shown}")
