"""The review queue: the next item to review, a page of the queue, marking and assigning items."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, ConfigDict, Field

from stash_pipeline.api.auth import AccountDep
from stash_pipeline.api.deps import StoreDep
from stash_pipeline.api.ids import readable_ids
from stash_pipeline.api.responses import (
    ReviewAssigned,
    ReviewNext,
    ReviewQueuePage,
    ReviewStatusChanged,
)
from stash_pipeline.api.search import search_filter
from stash_pipeline.core.trace_search import TraceFilter
from stash_pipeline.services import review
from stash_pipeline.store import Account
from stash_pipeline.store.review_queue import QueueScope

router = APIRouter(prefix="/api/v1/review", tags=["review"],
                   dependencies=[Depends(readable_ids)])
NOT_FOUND = {404: {"description": "A model or item that is not yours."}}
CONFLICT = {409: {"description": "An item changed since the version given: `current` holds each "
                                 "such item's state now (kind, id, version, status, assignee, "
                                 "reviewer); nothing was changed."}}
STRICT = ConfigDict(extra="forbid", strict=True)
NAME = Field(None, min_length=1, max_length=256)


def reviewer_name(account: Account) -> str:
    """Who reviews when the request does not say: the account's name (its id without one)."""
    return account.name or account.id


def queue_scope(store: StoreDep, account: AccountDep,
                kind: Literal["trace", "comparison"] | None = Query(
                    None, description="Only traces, or only comparisons (default: both)."),
                model_id: str | None = Query(
                    None, max_length=64, description="The personal model whose verdict the "
                                                     "order reads (default: your newest)."),
                reviewer: str | None = Query(
                    None, max_length=256, description="Who reviews (default: your account's "
                                                      "name): comparisons they authored are "
                                                      "left out."),
                assignee: str | None = Query(None, max_length=256,
                                             description="Only items assigned to this name."),
                unassigned: bool = Query(False, description="Only items assigned to nobody."),
                where: TraceFilter = Depends(search_filter)) -> QueueScope:
    return review.scope(store, account.id,
                        reviewer=reviewer or reviewer_name(account), where=where,
                        model_id=model_id, assignee=assignee, unassigned=unassigned, kind=kind)


@router.get("/queue", responses=NOT_FOUND, response_model_exclude_unset=True)
def queue(store: StoreDep, limit: int = Query(50, ge=1, le=review.MAX_PAGE),
          offset: int = Query(0, ge=0, le=2**31 - 1),
          scope: QueueScope = Depends(queue_scope)) -> ReviewQueuePage:
    """Your items not reviewed yet, in the queue's order (each with its `reason`), and the
    progress: `reviewed` of `total` in scope; `order` lists the reasons in order."""
    return review.queue(store, scope, limit=limit, offset=offset)


@router.get("/next", responses=NOT_FOUND, response_model_exclude_unset=True)
def next_item(store: StoreDep, scope: QueueScope = Depends(queue_scope)) -> ReviewNext:
    """The first item not reviewed yet (`item` null when none is left), with the action to look
    at first (`focus_action`) and the progress."""
    return review.next_item(store, scope)


class Item(BaseModel):
    model_config = STRICT
    kind: Literal["trace", "comparison"]
    id: str = Field(min_length=1, max_length=64)
    version: int | None = Field(None, ge=0, le=2**31 - 1, description=(
        "The item's review version you decided on (the queue's `version`): the change is made "
        "only if it is still that, else 409 with the item's state now. Without it the change "
        "applies whatever changed since."))


def expected(items: list[Item]) -> dict[tuple[str, str], int]:
    return {(i.kind, i.id): i.version for i in items if i.version is not None}


class StatusChange(BaseModel):
    model_config = STRICT
    items: list[Item] = Field(min_length=1, max_length=review.MAX_ITEMS_PER_CHANGE)
    status: Literal["reviewed", "skipped", "pending"] = Field(
        description="`reviewed` (a trace: at its current version; a changed reimport puts it "
                    "back), `skipped` (to the end of the queue) or `pending` (back as it was).")
    reviewer: str | None = NAME


class Assignment(BaseModel):
    model_config = STRICT
    items: list[Item] = Field(min_length=1, max_length=review.MAX_ITEMS_PER_CHANGE)
    assignee: str | None = Field(min_length=1, max_length=256,
                                 description="A reviewer's name; null: nobody.")


@router.post("/items", responses={**NOT_FOUND, **CONFLICT})
def set_status(body: StatusChange, account: AccountDep, store: StoreDep) -> ReviewStatusChanged:
    """Mark items reviewed or skipped, or put them back; all or nothing, each item with a
    `version` only at that version. Approving or rejecting a comparison is its review (`POST
    /api/v1/comparisons/{id}/review`)."""
    versions = review.set_status(store, account.id,
                                 [(i.kind, i.id) for i in body.items], body.status,
                                 reviewer=body.reviewer or reviewer_name(account),
                                 expected=expected(body.items))
    return ReviewStatusChanged(items=len(versions), status=body.status, versions=versions)


@router.post("/assign", responses={**NOT_FOUND, **CONFLICT})
def assign(body: Assignment, account: AccountDep, store: StoreDep) -> ReviewAssigned:
    """Assign items to a reviewer (or to nobody); all or nothing, each item with a `version`
    only at that version."""
    versions = review.assign(store, account.id, [(i.kind, i.id) for i in body.items],
                             body.assignee, expected=expected(body.items))
    return ReviewAssigned(items=len(versions), assignee=body.assignee, versions=versions)
