"""Bulk actions over chosen traces or every trace that matches a search, and saved filters."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Depends
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, model_validator

from stash_pipeline.api.auth import AccountDep
from stash_pipeline.api.bodies import AUTHOR
from stash_pipeline.api.deps import StoreDep
from stash_pipeline.api.ids import readable_ids
from stash_pipeline.api.responses import (
    CommentsAdded,
    ContributionChanged,
    SavedFilter,
    SavedFilters,
    ScoringQueued,
    ScoringRequestView,
)
from stash_pipeline.api.search import TraceSearch
from stash_pipeline.services import scoring_requests, trace_bulk, traces
from stash_pipeline.services.feedback import MAX_COMMENT_LENGTH
from stash_pipeline.store import Account, Store

router = APIRouter(prefix="/api/v1", tags=["bulk"], dependencies=[Depends(readable_ids)])
NOT_FOUND = {404: {"description": "A trace or model that is not yours (nothing was changed)."}}
STRICT = ConfigDict(extra="forbid", strict=True)


class Selection(BaseModel):
    """Exactly one of `trace_ids` (chosen traces) and `match` (every trace matching a search;
    `{}` matches all of yours)."""

    model_config = STRICT
    trace_ids: list[str] | None = Field(None, min_length=1,
                                        max_length=trace_bulk.MAX_BULK_TRACES)
    match: TraceSearch | None = None

    @model_validator(mode="after")
    def _one_selection(self) -> Selection:
        if (self.trace_ids is None) == (self.match is None):
            raise ValueError("give exactly one of trace_ids and match")
        return self

    def ids(self, store: Store, account: Account) -> list[str]:
        return trace_bulk.select(
            store, account.id, trace_ids=self.trace_ids,
            where=None if self.match is None else self.match.trace_filter())


class BulkContribute(Selection):
    contribute: bool = Field(description="Opt in (true) or out (false).")


class BulkComment(Selection):
    text: str = Field(min_length=1, max_length=MAX_COMMENT_LENGTH)
    author: str | None = AUTHOR


class BulkScore(Selection):
    model_id: str | None = Field(None, min_length=1, max_length=64,
                                 description="One of your succeeded reward models; absent: the "
                                             "released shared evaluator.")
    actions: bool = Field(False, description="Score actions too.")


class BulkExport(Selection):
    format: Literal["jsonl", "csv"] = "jsonl"


@router.post("/traces/bulk/contribute", responses=NOT_FOUND)
def contribute(body: BulkContribute, account: AccountDep,
               store: StoreDep) -> ContributionChanged:
    """Opt the selection in or out of shared-evaluator training, all or nothing."""
    changed = trace_bulk.contribute(store, account.id,
                                    body.ids(store, account), body.contribute)
    return ContributionChanged(traces=changed, contribute=body.contribute)


@router.post("/traces/bulk/comment", status_code=201, responses=NOT_FOUND)
def comment(body: BulkComment, account: AccountDep, store: StoreDep) -> CommentsAdded:
    """The same comment on every trace of the selection, in one transaction."""
    count = trace_bulk.comment(store, account.id, body.ids(store, account),
                               body.text, author=body.author)
    return CommentsAdded(comments=count)


@router.post("/traces/bulk/score", status_code=202, responses=NOT_FOUND)
def score(body: BulkScore, account: AccountDep, store: StoreDep) -> ScoringQueued:
    """Score again for the selection: one request per 10,000 traces, run by the pipeline."""
    queued = trace_bulk.score(store, account.id, body.ids(store, account),
                              model_id=body.model_id, actions=body.actions)
    return ScoringQueued(
        requests=[ScoringRequestView(**scoring_requests.request_view(r)) for r in queued],
        traces=sum(len(r.traces) for r in queued))


@router.post("/traces/bulk/export", responses={
    **NOT_FOUND, 200: {"description": "JSON Lines (a trace object a line, with its `summary`) "
                                      "or CSV (the trace list's columns).",
                       "content": {"application/x-ndjson": {}, "text/csv": {}}}})
def export(body: BulkExport, account: AccountDep, store: StoreDep) -> StreamingResponse:
    """The selection as a file, streamed a chunk of traces at a time."""
    ids = body.ids(store, account)
    lines = trace_bulk.export_lines(store, account.id, ids, body.format)
    return StreamingResponse(lines, media_type=trace_bulk.EXPORT_MEDIA_TYPES[body.format], headers={
        "Content-Disposition": f'attachment; filename="traces.{body.format}"'})


class SavedFilterBody(BaseModel):
    model_config = STRICT
    name: str = Field(min_length=1, max_length=256)
    match: TraceSearch


def saved_view(saved: Any) -> SavedFilter:
    return SavedFilter(id=saved.id, name=saved.name, match=saved.params,
                       created_at=saved.created_at.isoformat())


@router.get("/saved-filters")
def saved_filters(account: AccountDep, store: StoreDep) -> SavedFilters:
    """Your saved searches of the trace list, by name."""
    return SavedFilters(saved_filters=[saved_view(f) for f in store.saved_filters(account.id)])


@router.post("/saved-filters", status_code=201)
def save_filter(body: SavedFilterBody, account: AccountDep, store: StoreDep) -> SavedFilter:
    """Keep a search under a name; saving a name again replaces its search."""
    saved = traces.save_filter(store, account.id, body.name,
                               body.match.params())
    return saved_view(saved)


@router.delete("/saved-filters/{filter_id}", status_code=204,
               responses={404: {"description": "No saved filter of yours with this id."}})
def remove_filter(filter_id: str, account: AccountDep, store: StoreDep) -> None:
    """One of your saved searches, by its id (a UUID; one saved before UUIDs, its integer id
    too)."""
    traces.remove_filter(store, account.id, filter_id)
