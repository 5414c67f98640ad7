"""Every refusal as one JSON shape: ``{"detail": message, "field"?, "record"?, "file"?, "code"?}``.

InputError 422 (naming the file, record and field), NotFoundError 404 (another account's id too),
StatusError and a taken trace id 409, an expired or altered download URL 403, the SQL endpoint not
set up 503. FastAPI's own validation errors (query parameters, small bodies) get the same shape.

A retryable condition (the database busy past its busy timeout or down, the object store down, a
lock wait that ran out) is 503 with ``Retry-After`` and ``"retryable": true``; its body never names
a host or port (the server logs them). A full disk (the temporary folder, the database, the local
object store) is 507 Insufficient Storage. A 500 is a bug, and its body is one line without a
traceback.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from stash_pipeline.core.errors import (
    InputError,
    NotFoundError,
    OwnershipError,
    StorageFullError,
    UnavailableError,
    disk_full,
)
from stash_pipeline.objects import DownloadRefusedError, ObjectNotFoundError
from stash_pipeline.store import StatusError
from stash_pipeline.store.locks import database_full, unavailable_database
from stash_pipeline.store.readonly_sql import SqlRefused, SqlUnavailable

log = logging.getLogger(__name__)


def error_response(status: int, detail: str, *, headers: dict[str, str] | None = None,
                   **extra: Any) -> JSONResponse:
    body = {"detail": detail, **{k: v for k, v in extra.items() if v is not None}}
    return JSONResponse(body, status_code=status, headers=headers)


def unavailable(_: Request, error: UnavailableError) -> JSONResponse:
    if error.detail:
        log.warning("%s (%s)", error, error.detail)
    seconds = error.retry_after_s
    return error_response(503, f"{error} (retry in {seconds} s)", retryable=True,
                          headers={"Retry-After": str(seconds)})


def database_error(request: Request, error: Exception) -> JSONResponse:
    """A database error no store call turned into ours: retryable when the database went
    away, else a bug (500), said in one line."""
    if disk_full(error):
        return storage_full(request, database_full())
    translated = unavailable_database(error)
    if translated is not None:
        return unavailable(request, translated)
    log.error("unexpected database error: %s", error, exc_info=error)
    return internal_error(request, error)


def storage_full(_: Request, error: StorageFullError) -> JSONResponse:
    return error_response(507, str(error))


FULL_DISK = StorageFullError("the server's disk is full; nothing was stored (try again once "
                             "there is space)")


def os_error(request: Request, error: OSError) -> JSONResponse:
    """A full disk where the server writes (the import's temporary folder): 507, in words that
    name no server path; any other OSError is a bug."""
    if disk_full(error):
        log.warning("a full disk refused a request: %s", error)
        return storage_full(request, FULL_DISK)
    return internal_error(request, error)


def internal_error(_: Request, error: Exception) -> JSONResponse:
    """Any other exception (Starlette logs it with its traceback, then re-raises it to the
    server, which has sent this answer already)."""
    return error_response(500, "internal error: the server failed to answer this request; "
                               "the error is logged")


def input_error(_: Request, error: InputError) -> JSONResponse:
    code = error.code if isinstance(error, SqlRefused) else None
    return error_response(422, str(error), field=error.field, record=error.record,
                          file=error.file, code=code)


def validation_error(_: Request, error: RequestValidationError) -> JSONResponse:
    # An unknown field is named first, as core.requests does: it is the likelier mistake.
    found = sorted(error.errors(), key=lambda e: e.get("type") != "extra_forbidden")
    first = found[0] if found else {"loc": (), "msg": "invalid request"}
    loc = [str(part) for part in first.get("loc", ())]
    where = loc[0] if loc else None
    field = ".".join(loc[1:]) or ("body" if where == "body" else None)
    return error_response(422, f"{where or 'request'} {field or ''}: {first.get('msg')}".strip(),
                          field=field)


def install(app: FastAPI) -> None:
    import sqlalchemy as sa

    app.add_exception_handler(UnavailableError, unavailable)
    app.add_exception_handler(StorageFullError, storage_full)
    app.add_exception_handler(sa.exc.DBAPIError, database_error)
    app.add_exception_handler(OSError, os_error)
    app.add_exception_handler(Exception, internal_error)
    app.add_exception_handler(InputError, input_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    handlers = (
        (NotFoundError, 404), (ObjectNotFoundError, 404), (StatusError, 409),
        (OwnershipError, 409), (DownloadRefusedError, 403), (SqlUnavailable, 503),
    )
    for kind, status in handlers:
        app.add_exception_handler(
            kind, lambda _request, error, status=status: error_response(status, str(error)))
    _install_database_value_errors(app)


def _install_database_value_errors(app: FastAPI) -> None:
    """A value the database cannot store (e.g. a NUL character in text) is the input's fault."""
    import psycopg
    import sqlalchemy as sa

    def refused(_: Request, error: Exception) -> JSONResponse:
        original = getattr(error, "orig", error)
        reason = getattr(getattr(original, "diag", None), "message_primary", None) or "bad value"
        return error_response(422, f"the database refused a value: {reason}")

    app.add_exception_handler(sa.exc.DataError, refused)
    app.add_exception_handler(psycopg.DataError, refused)
