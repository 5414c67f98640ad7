"""``Authorization: Bearer <key>``: the account a request acts for; 401 without a valid key."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from stash_pipeline.api.deps import StoreDep
from stash_pipeline.services import accounts
from stash_pipeline.store import Account

bearer = HTTPBearer(auto_error=False, scheme_name="apiKey",
                    description="An API key from `stash-pipeline accounts create`.")


def current_account(store: StoreDep,
                    credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> Account:
    key = credentials.credentials if credentials else None
    account = accounts.authenticate(store, key)
    if account is None:
        raise HTTPException(401, "missing or invalid API key: send Authorization: Bearer <key>",
                            headers={"WWW-Authenticate": "Bearer"})
    return account


# The account a route acts for: ``account: AccountDep``.
AccountDep = Annotated[Account, Depends(current_account)]
