"""``GET /api/v1/account``: whose key this is."""

from __future__ import annotations

from fastapi import APIRouter

from stash_pipeline.api.auth import AccountDep
from stash_pipeline.api.responses import AccountView
from stash_pipeline.services import accounts

router = APIRouter(prefix="/api/v1", tags=["account"])


@router.get("/account")
def get_account(account: AccountDep) -> AccountView:
    return AccountView(**accounts.view(account))
