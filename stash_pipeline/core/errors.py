"""Errors that tell the user which record and field were wrong, and what to do."""

from __future__ import annotations

import errno


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


class ReviewConflict(StashError):
    """A review change (a verdict, a status, an assignment) made against a version of the item
    that another change has since replaced: nothing was changed. ``current`` is each such item's
    state now (kind, id, version, status, assignee, reviewer; a comparison's verdict too), so the
    caller can look again and decide. The API answers 409 with it."""

    def __init__(self, message: str, *, current: list[dict]):
        super().__init__(message)
        self.current = current


class UnavailableError(StashError):
    """A service the call needs is busy or down (the database, the object store): nothing was
    changed, and the same call can succeed later. The API answers 503 with ``Retry-After``.

    ``detail``: what the operator needs (the driver's own words, which may name hosts and ports):
    the CLI prints it and the API logs it, but never sends it to a client."""

    retry_after_s = 5

    def __init__(self, message: str, *, detail: str | None = None):
        super().__init__(message)
        self.detail = detail


class StorageFullError(StashError):
    """A disk a call writes to is full (the API's temporary folder, the SQLite database, the local
    object store, a job directory): nothing of the call was stored, and nothing of it was left
    behind. The API answers 507 Insufficient Storage."""


# OSError numbers of a full disk: no space, a quota, a file size limit.
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
_SQLITE_FULL = 13  # SQLITE_FULL: "database or disk is full"
_POSTGRES_DISK_FULL = "53100"  # disk_full: "could not extend file ...: No space left on device"


def disk_full(error: BaseException | None) -> bool:
    """Whether ``error`` (or the driver error it wraps, or its cause) says a disk is full."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in DISK_FULL_ERRNOS:
            return True
        if getattr(error, "sqlite_errorcode", None) == _SQLITE_FULL \
                or "database or disk is full" in str(error):
            return True
        if getattr(error, "sqlstate", None) == _POSTGRES_DISK_FULL:
            return True
        error = getattr(error, "orig", None) or error.__cause__ or error.__context__
    return False
