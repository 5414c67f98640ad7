"""The API's refusals, in the shape of every refusal of both HTTP apps (``web.errors``:
``{"detail": message, "field"?, "record"?, "file"?, "code"?}``; InputError 422, NotFoundError
404, UnavailableError 503 with ``Retry-After``, a one-line 500), and the API's own kinds:

StatusError and a taken trace id 409, an expired or altered download URL 403, the SQL endpoint not
set up 503. A retryable condition (the database busy past its busy timeout or down, the object
store down, a lock wait that ran out) is 503 with ``Retry-After`` and ``"retryable": true``; its
body never names a host or port (the server logs them). A full disk (the temporary folder, the
database, the local object store) is 507 Insufficient Storage.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from stash_pipeline.core.errors import OwnershipError, ReviewConflict, StorageFullError, disk_full
from stash_pipeline.objects import DownloadRefusedError, ObjectNotFoundError
from stash_pipeline.store import StatusError
from stash_pipeline.store.locks import database_full, unavailable_database
from stash_pipeline.store.readonly_sql import SqlUnavailable
from stash_pipeline.web import errors as web_errors
from stash_pipeline.web.errors import error_response, internal_error, unavailable

log = logging.getLogger(__name__)


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


def install(app: FastAPI) -> None:
    import sqlalchemy as sa

    web_errors.install(app)
    app.add_exception_handler(StorageFullError, storage_full)
    app.add_exception_handler(sa.exc.DBAPIError, database_error)
    app.add_exception_handler(OSError, os_error)
    handlers = (
        (ObjectNotFoundError, 404), (StatusError, 409),
        (OwnershipError, 409), (DownloadRefusedError, 403), (SqlUnavailable, 503),
    )
    for kind, status in handlers:
        app.add_exception_handler(
            kind, lambda _request, error, status=status: error_response(status, str(error)))
    app.add_exception_handler(ReviewConflict, lambda _request, error: error_response(
        409, str(error), current=error.current))
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
