"""The viewer's login and logout: an API key exchanged for a session cookie (``session.py``)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from stash_pipeline.api.deps import StoreDep
from stash_pipeline.api.ui.frame import (
    FormDep,
    one,
    read_form,
    redirect,
    render,
    session_account,
    sessions,
    viewer_page,
)
from stash_pipeline.api.ui.session import COOKIE, SESSION_SECONDS
from stash_pipeline.services import accounts

router = APIRouter(prefix="/ui", include_in_schema=False)


@router.get("/login", response_class=HTMLResponse)
def login_page(request: Request, next: str | None = None) -> Response:
    return render(request, "login.html", next=viewer_page(next), error=None)


@router.post("/login", response_class=HTMLResponse)
async def login(request: Request, store: StoreDep) -> Response:
    fields = await read_form(request)
    target = viewer_page(one(fields, "next"))
    account = accounts.authenticate(store, one(fields, "api_key"))
    if account is None:
        return render(request, "login.html", status=401, next=target,
                      error="That is not a valid API key (`stash-pipeline accounts key ID` "
                            "prints a new one).")
    response = redirect(target)
    response.set_cookie(COOKIE, sessions(request).issue(account), max_age=SESSION_SECONDS,
                        httponly=True, samesite="strict", path="/",
                        secure=request.url.scheme == "https")
    return response


@router.post("/logout", response_class=HTMLResponse)
def logout(request: Request, store: StoreDep, fields: FormDep) -> Response:
    """Ends the session on the server too: the account's session epoch moves on, so this cookie
    (and every other of the account's sessions) is no session any more, even replayed."""
    account = session_account(request, store)
    if account is not None:
        store.end_sessions(account.id)
    response = redirect("/ui/login")
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
    return response
