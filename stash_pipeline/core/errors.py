"""Errors that tell the user which record and field were wrong, and what to do."""

from __future__ import annotations


class StashError(Exception):
    """Base class of every error the project raises on purpose."""


class InputError(StashError):
    """Bad input: names the file, the record (line or index) and the field."""

    def __init__(self, message: str, *, file: str | None = None, record: str | None = None,
                 field: str | None = None):
        self.file, self.record, self.field, self.reason = file, record, field, message
        where = ", ".join(
            part for part in (
                file and f"file {file}", record and f"record {record}", field and f"field {field!r}"
            ) if part
        )
        super().__init__(f"{where}: {message}" if where else message)

    def located(self, *, file: str | None = None, record: str | None = None) -> InputError:
        """The same error (of the same class) with the file and record filled in where they
        were unknown."""
        return type(self)(self.reason, file=self.file or file, record=self.record or record,
                          field=self.field)


class OwnershipError(StashError):
    """A trace id that belongs to another owner."""

    def __init__(self, message: str, *, trace_id: str | None = None):
        super().__init__(message)
        self.trace_id = trace_id


class NotFoundError(StashError):
    """A trace, action or model that does not exist (or is not the caller's)."""


class UnavailableError(StashError):
    """A service the call needs is busy or down (the database, the object store): nothing was
    changed, and the same call can succeed later. The API answers 503 with ``Retry-After``."""

    retry_after_s = 5
