"""``Authorization: Bearer <key>``: the account a request acts for; 401 without a valid key."""

from __future__ import annotations

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from stash_pipeline.services import accounts
from stash_pipeline.store import Account

bearer = HTTPBearer(auto_error=False, scheme_name="apiKey",
                    description="An API key from `stash-pipeline accounts create`.")


def current_account(request: Request,
                    credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> Account:
    key = credentials.credentials if credentials else None
    account = accounts.authenticate(request.app.state.store, key)
    if account is None:
        raise HTTPException(401, "missing or invalid API key: send Authorization: Bearer <key>",
                            headers={"WWW-Authenticate": "Bearer"})
    return account

