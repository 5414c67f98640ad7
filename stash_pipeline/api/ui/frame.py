"""The viewer's frame (docs/viewer.md): what every page of ``/ui`` stands on. Its templates and
rendering, its sessions and the dependencies a page acts through (``ViewerDep``, ``FormDep``),
form parsing, security headers, and the error pages.

Every page acts for the account of the session cookie and calls the same services as the JSON API,
so its rules are the API's: another account's trace or model is a 404 page, a bad request the
API's 422 message, shown inline beside the form that sent it. The pages themselves live in the
``*_pages`` modules, each a router of its own; none imports another.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qs, urlencode, urlparse

import jinja2
import sqlalchemy as sa
from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from stash_pipeline.api.deps import StoreDep
from stash_pipeline.api.ui import plots
from stash_pipeline.api.ui.session import COOKIE, Sessions, session_secret
from stash_pipeline.core.errors import (
    InputError,
    NotFoundError,
    ReviewConflict,
    StorageFullError,
    UnavailableError,
)
from stash_pipeline.core.requests import MAX_TRACE_IDS
from stash_pipeline.core.trust import held_out_summary
from stash_pipeline.store import Account, StatusError

HERE = Path(__file__).parent
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; "
                               "script-src 'self'; form-action 'self'; frame-ancestors 'none'; "
                               "base-uri 'none'",
    "X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin", "Cache-Control": "no-store",
}
MAX_FORM_FIELDS = MAX_TRACE_IDS + 20

templates = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"),
                               autoescape=True)
templates.filters["num"] = lambda v, digits=3: "" if v is None else (
    f"{v:.{digits}f}" if isinstance(v, float) else str(v))
templates.filters["pretty"] = lambda v: v if isinstance(v, str) else json.dumps(
    v, indent=2, ensure_ascii=False, default=str)
templates.filters["signed"] = lambda v: "" if v is None else f"{v:+.2f}"
templates.filters["short"] = lambda v: v if len(v) <= 14 else v[:8] + "…"  # a long id
templates.globals["credit_class"] = plots.credit_class
templates.globals["held_out_summary"] = held_out_summary


class LoginRequired(Exception):
    def __init__(self, target: str):
        self.target = target


class Refused(Exception):
    """A page that cannot be served: its status and a sentence for the person."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def sessions(request: Request) -> Sessions:
    return request.app.state.ui_sessions


def session_account(request: Request, store: Any) -> Account | None:
    """The account of the request's session cookie; None without a valid one."""
    return sessions(request).account(store, request.cookies.get(COOKIE))


def render(request: Request, name: str, *, status: int = 200,
           account: Account | None = None, **context: Any) -> HTMLResponse:
    cookie = request.cookies.get(COOKIE)
    csrf = sessions(request).csrf_token(cookie) if account is not None and cookie else ""
    html = templates.get_template(name).render(request=request, account=account, csrf=csrf,
                                               **context)
    return HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)


def redirect(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303, headers=SECURITY_HEADERS)


def home() -> Response:
    """Where a browser lands first (``/`` and ``/ui``): the trace list."""
    return redirect("/ui/traces")


def viewer(request: Request, store: StoreDep) -> Account:
    """The session's account; a person without one is sent to the login page."""
    account = session_account(request, store)
    if account is None:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        raise LoginRequired(target)
    return account


# The session's account a page acts for (a person without one goes to the login page), as the
# JSON routes' ``account: AccountDep``: ``account: ViewerDep``.
ViewerDep = Annotated[Account, Depends(viewer)]


def _same_origin(request: Request) -> bool:
    origin = request.headers.get("origin")
    if origin is None:  # not sent by every browser on a same-origin POST
        return True
    try:
        return urlparse(origin).netloc == request.headers.get("host")
    except ValueError:  # "http://[x": not a URL, so not this site
        return False


async def read_form(request: Request) -> dict[str, list[str]]:
    """A form's fields, sent from this site (the login form's, before any session)."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise Refused(415, "forms are sent as application/x-www-form-urlencoded")
    if not _same_origin(request):
        raise Refused(403, "this form was sent from another site")
    body = (await request.body()).decode("utf-8", errors="replace")
    try:
        return parse_qs(body, keep_blank_values=True, max_num_fields=MAX_FORM_FIELDS)
    except ValueError:
        raise Refused(413, "too many form fields") from None


async def posted(request: Request) -> dict[str, list[str]]:
    """A form of a signed-in page: same origin and the session's CSRF token, or a 403 page."""
    fields = await read_form(request)
    cookie = request.cookies.get(COOKIE)
    if not sessions(request).csrf_ok(cookie, (fields.get("csrf") or [None])[0]):
        raise Refused(403, "this form has expired or did not come from this site: reload the "
                           "page and send it again")
    return fields


# A signed-in page's form, checked (``posted``): ``fields: FormDep``.
FormDep = Annotated[dict[str, list[str]], Depends(posted)]


def one(fields: dict[str, list[str]], name: str) -> str | None:
    """A single-valued field, stripped; None when absent or empty."""
    values = fields.get(name) or [""]
    text = values[0].strip()
    return text or None


def digits(text: str) -> bool:
    """ASCII digits only: ``str.isdigit()`` also takes "²", which ``int()`` refuses."""
    return text.isascii() and text.isdigit()


def viewer_page(target: str | None) -> str:
    """Where a form may send the person next: only a page of the viewer, never another site."""
    if not target or not target.startswith("/ui") or target.startswith("//"):
        return "/ui/traces"
    return target


def author(account: Account) -> str:
    """The name a person's feedback and reviews are signed with."""
    return account.name or account.id


# Errors ---------------------------------------------------------------------------------------

def install(app: FastAPI, routers: Sequence[APIRouter]) -> None:
    """Serve the viewer from ``app``: its pages (``routers``, in order: the first route that
    matches serves), its static files, its error pages. Call it after ``errors.install``: on
    ``/ui`` paths the API's JSON errors become pages."""
    app.state.ui_sessions = Sessions(session_secret())
    for routes in routers:
        app.include_router(routes)
    # The API's root is where a browser lands first: it leads to the viewer.
    app.add_api_route("/ui", home, methods=["GET"], include_in_schema=False,
                      response_class=HTMLResponse)
    app.add_api_route("/", home, methods=["GET"], include_in_schema=False)
    app.mount("/ui/static", StaticFiles(directory=HERE / "static"), name="ui-static")

    def page(status: int, message: str) -> Callable[[Request, Exception], Any]:
        return lambda request, error: render(
            request, "error.html", status=status, account=None, status_code=status,
            message=message or str(error))

    def on_ui(kind: type[Exception], status: int | None, message: str = "") -> None:
        json_handler = app.exception_handlers.get(kind)

        async def handle(request: Request, error: Exception) -> Response:
            if not request.url.path.startswith("/ui"):
                if json_handler is None:
                    raise error
                result = json_handler(request, error)
                return await result if hasattr(result, "__await__") else result
            if isinstance(error, LoginRequired):
                return redirect("/ui/login?" + urlencode({"next": error.target}))
            if status is None and not isinstance(error, (Refused, StarletteHTTPException)):
                # A database or disk error: the page says what the API's JSON would.
                answer = json_handler(request, error)
                answer = await answer if hasattr(answer, "__await__") else answer
                shown = json.loads(answer.body)["detail"]
                response = page(answer.status_code, shown)(request, error)
                if "retry-after" in answer.headers:
                    response.headers["Retry-After"] = answer.headers["retry-after"]
                return response
            code = status
            if isinstance(error, Refused):
                code = error.status
            elif isinstance(error, StarletteHTTPException):
                code = error.status_code
            shown = message or (str(error.detail) if isinstance(error, StarletteHTTPException)
                                else str(error))
            response = page(code, shown)(request, error)
            if isinstance(error, UnavailableError):
                response.headers["Retry-After"] = str(error.retry_after_s)
            return response

        app.add_exception_handler(kind, handle)

    on_ui(LoginRequired, None)
    on_ui(Refused, None)
    on_ui(NotFoundError, 404, "Not found: there is no such page of yours.")
    on_ui(InputError, 422)
    on_ui(StatusError, 409)
    on_ui(ReviewConflict, 409)  # the message says the item's state now
    on_ui(StarletteHTTPException, None)
    # Outages and full disks are pages too, in the JSON handler's words (which name no host).
    on_ui(UnavailableError, 503)
    on_ui(StorageFullError, 507)
    on_ui(sa.exc.DBAPIError, None)
    on_ui(OSError, None)
