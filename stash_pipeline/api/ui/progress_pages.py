"""What the viewer's live pages poll (ui.js), as JSON for the session's account: a model's
progress and the Score again requests a page follows (``progress.py`` says what they show)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from stash_pipeline.api.deps import StoreDep
from stash_pipeline.api.errors import error_response
from stash_pipeline.api.ui.frame import SECURITY_HEADERS, session_account
from stash_pipeline.api.ui.progress import live_view, request_ids, requests_view
from stash_pipeline.core.errors import NotFoundError
from stash_pipeline.services import reward_models
from stash_pipeline.store import Account, Store

router = APIRouter(prefix="/ui", include_in_schema=False)


def live_json(request: Request, store: Store,
              view: Callable[[Store, Account], dict[str, Any]]) -> Response:
    """What a live page polls, as JSON for the session's account (``view(store, account)``):
    401 without a session, 404 for what is not the account's (or none), like the page itself."""
    account = session_account(request, store)
    if account is None:
        return error_response(401, "not signed in: log in to the viewer again",
                              headers=SECURITY_HEADERS)
    try:
        shown = view(store, account)
    except NotFoundError as error:
        return error_response(404, str(error), headers=SECURITY_HEADERS)
    return JSONResponse(shown, headers=SECURITY_HEADERS)


@router.get("/reward-models/{model_id}/progress")
def model_progress(model_id: str, request: Request, store: StoreDep) -> Response:
    """The model page's live progress."""
    return live_json(request, store, lambda store, account: live_view(
        reward_models.get(store, account.id, model_id)))


@router.get("/score-requests/progress")
def requests_progress(request: Request, store: StoreDep, requests: str = "") -> Response:
    """The followed Score again requests' state (``requests_view``), as a page polls it."""
    ids = request_ids(requests)

    def view(store: Store, account: Account) -> dict[str, Any]:
        if not ids:
            raise NotFoundError("no such scoring request")
        return requests_view(store, account.id, ids) or {}

    return live_json(request, store, view)
