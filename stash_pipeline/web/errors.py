"""Every refusal as one JSON shape: ``{"detail": message, "field"?, "record"?, "file"?, "code"?}``.

The typed errors both apps raise: InputError 422 (naming the file, record and field),
NotFoundError 404, ``Unauthorized`` 401 with ``WWW-Authenticate: Bearer``, UnavailableError 503
with ``Retry-After`` and ``"retryable": true`` (its ``detail``, which may name hosts, is logged,
never sent); FastAPI's own validation errors get the same shape. Any other exception is a bug:
500, one line without a traceback, the request's id in the log line. Each app adds its own
kinds (``api.errors``).
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.requests import ClientDisconnect

from stash_pipeline.core.errors import InputError, NotFoundError, UnavailableError
from stash_pipeline.web.request_ids import HEADER, current_request_id

log = logging.getLogger(__name__)


class Unauthorized(Exception):
    """No credentials, or not the expected ones: 401 asking for a bearer token."""


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


def internal_error(request: Request, error: Exception) -> JSONResponse:
    """Any other exception (Starlette logs it with its traceback, then re-raises it to the
    server, which has sent this answer already)."""
    request_id = current_request_id()
    log.error("request %s (%s %s) failed: %s", request_id, request.method, request.url.path,
              type(error).__name__)
    return error_response(500, "internal error: the server failed to answer this request; "
                               "the error is logged",
                          headers={HEADER: request_id} if request_id else None)


def input_error(_: Request, error: InputError) -> JSONResponse:
    return error_response(422, str(error), field=error.field, record=error.record,
                          file=error.file, code=getattr(error, "code", None))


def not_found(_: Request, error: NotFoundError) -> JSONResponse:
    return error_response(404, str(error))


def unauthorized(_: Request, error: Unauthorized) -> JSONResponse:
    return error_response(401, str(error), headers={"WWW-Authenticate": "Bearer"})


def validation_error(_: Request, error: RequestValidationError) -> JSONResponse:
    # An unknown field is named first, as core.requests does: it is the likelier mistake.
    found = sorted(error.errors(), key=lambda e: e.get("type") != "extra_forbidden")
    first = found[0] if found else {"loc": (), "msg": "invalid request"}
    loc = [str(part) for part in first.get("loc", ())]
    where = loc[0] if loc else None
    field = ".".join(loc[1:]) or ("body" if where == "body" else None)
    return error_response(422, f"{where or 'request'} {field or ''}: {first.get('msg')}".strip(),
                          field=field)


def client_gone(_: Request, _error: ClientDisconnect) -> Response:
    """The client left before its answer (``web.disconnect``): nothing to answer, nothing to
    log."""
    return Response(status_code=499)


def install(app: FastAPI) -> None:
    app.add_exception_handler(ClientDisconnect, client_gone)
    app.add_exception_handler(UnavailableError, unavailable)
    app.add_exception_handler(Exception, internal_error)
    app.add_exception_handler(InputError, input_error)
    app.add_exception_handler(NotFoundError, not_found)
    app.add_exception_handler(Unauthorized, unauthorized)
    app.add_exception_handler(RequestValidationError, validation_error)
