"""The shared evaluator's releases as one account sees them: how far to trust each on its traces."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from stash_pipeline.api.auth import AccountDep
from stash_pipeline.api.deps import StoreDep
from stash_pipeline.api.ids import readable_ids
from stash_pipeline.api.responses import TrustReport
from stash_pipeline.api.search import GroupBy
from stash_pipeline.services import trust

router = APIRouter(prefix="/api/v1/releases", tags=["shared evaluator"],
                   dependencies=[Depends(readable_ids)])


@router.get("/{version}/trust", responses={
    404: {"description": "No such release (`current`: no release yet)."}})
def get_trust(version: str, account: AccountDep, store: StoreDep,
              group_by: GroupBy = None) -> TrustReport:
    """How far to trust a release (`current`: the latest) on your traces it did not train on:
    its separate benchmark's accuracy, AUC of mean action credit (and of whole-trace scores
    where you scored again with it) against verified outcomes, Spearman with ratings, each with
    its 95% interval and n, overall and per tool, domain and agent (docs/trust.md)."""
    return trust.release_report(store, account.id, version, group_by)
