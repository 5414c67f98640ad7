"""``GET /api/v1/account``: whose key this is."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends

from stash_pipeline.api.auth import current_account
from stash_pipeline.services import accounts
from stash_pipeline.store import Account

router = APIRouter(prefix="/api/v1", tags=["account"])


@router.get("/account")
def get_account(account: Account = Depends(current_account)) -> dict[str, Any]:
    return accounts.view(account)
