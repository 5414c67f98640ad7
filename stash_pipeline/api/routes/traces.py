"""Traces: import, the sorted and paginated list, one trace, contribution opt-in, feedback."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from starlette.concurrency import run_in_threadpool

from stash_pipeline.api import temporaries, write_slots
from stash_pipeline.api.auth import AccountDep
from stash_pipeline.api.bodies import CommentBody, ContributionChange, RatingBody, ScoreAgainBody
from stash_pipeline.api.deps import StoreDep
from stash_pipeline.api.ids import readable_ids
from stash_pipeline.api.responses import (
    CommentView,
    RatingView,
    ScoringRequestState,
    TraceContribution,
    TraceDetail,
    TracePage,
    TracesImported,
)
from stash_pipeline.api.search import search_filter
from stash_pipeline.core.errors import InputError
from stash_pipeline.core.trace_search import TraceFilter
from stash_pipeline.importers import DEFAULT_OUTCOME_FIELD, FORMATS
from stash_pipeline.services import feedback, scoring_requests, traces
from stash_pipeline.services.imports import ImportReport
from stash_pipeline.store.scoring_requests import ScoringRequest
from stash_pipeline.store.trace_pages import SORTS

log = logging.getLogger(__name__)

router = APIRouter(prefix="/api/v1/traces", tags=["traces"],
                   dependencies=[Depends(readable_ids)])
NOT_FOUND = {404: {"description": "No such trace of yours."}}
Format = Literal["auto", *FORMATS]  # type: ignore[valid-type]
Sort = Literal[tuple(SORTS)]  # type: ignore[valid-type]


@router.post("", response_model_exclude_unset=True, responses={
    413: {"description": "The body is larger than STASH_API_MAX_IMPORT_BYTES."},
    409: {"description": "A trace id is already taken."},
    422: {"description": "Bad input; names the record and field. Nothing was stored."}},
    openapi_extra={"requestBody": {"required": True, "content": {
        "application/json": {"schema": {
            "description": "A trace object, a JSON array of them, an OTLP export or a "
                           "tau2-bench results file (docs/importing.md)."}},
        "application/x-ndjson": {"schema": {"type": "string",
                                            "description": "JSON Lines of trace objects."}}}}})
async def import_traces(request: Request, account: AccountDep, store: StoreDep,
                        format: Format = "auto", contribute: bool = False,
                        author: str | None = Query(None, min_length=1, max_length=256),
                        reviewer: str | None = Query(None, min_length=1, max_length=256),
                        skip_invalid: bool = False,
                        outcome_field: str | None = Query(
                            None, max_length=256,
                            description=f"default {DEFAULT_OUTCOME_FIELD}; empty reads none; a "
                                        "path given that matches no trace is a warning")
                        ) -> TracesImported:
    """Import traces in any importer format, batch or single; all or nothing. Preference data
    sets take the comparisons' `author` and `reviewer`, and `skip_invalid`; `outcome_field` is
    the metadata path read as a verified outcome (empty: none). `warnings` says what you should
    know although nothing failed: an `outcome_field` that matched no trace."""
    with temporaries.import_folder() as folder:
        path = Path(folder) / "body"
        size = 0
        with open(path, "wb") as file:
            async for chunk in request.stream():
                size += len(chunk)
                file.write(chunk)
        if size == 0:
            raise InputError("the request body is empty: send traces as JSON, a JSON array or "
                             "JSON Lines", file="request body")
        async with write_slots.slots(request):  # once the body is on disk, not before
            return await run_in_threadpool(
                traces.import_file, store, account.id, path, format=format,
                contribute=contribute, label="request body", on_imported=_record_import,
                author=author, reviewer=reviewer, skip_invalid=skip_invalid,
                outcome_field=outcome_field)


def _record_import(report: ImportReport) -> None:
    """The import as a materialisation of the `traces` asset, on the deployment's instance."""
    from stash_pipeline.dagster_runs import record_import

    record_import(report, log.warning)


@router.get("")
def list_traces(account: AccountDep, store: StoreDep, sort: Sort = "-created",
                limit: int = Query(50, ge=1, le=traces.MAX_PAGE_SIZE),
                offset: int = Query(0, ge=0, le=2**31 - 1),
                model_id: str | None = Query(None, max_length=64,
                                             description="Whose `latest_score`: one of your "
                                                         "reward models (default: any)."),
                where: TraceFilter = Depends(search_filter)) -> TracePage:
    """Your traces with `latest_score` (personal) apart from the shared evaluator's mean action
    credit and number of actions scored; `sort` by any of them (`-` for descending); the search
    parameters narrow the list (all must hold)."""
    return traces.page(store, account.id, sort=sort, limit=limit,
                       offset=offset, model_id=model_id, where=where)


@router.post("/score", status_code=202, responses={
    404: {"description": "A trace or model that is not yours, or no release yet."},
    422: {"description": "Bad input, or actions asked of a model trained without action "
                         "comparisons."}})
def score_again(body: ScoreAgainBody, account: AccountDep,
                store: StoreDep) -> ScoringRequestState:
    """Score again: a fresh run of the saved checkpoint over these traces, without labelling
    calls or retraining; the released shared evaluator by default, or one of your models."""
    queued = scoring_requests.request(store, account.id, body.trace_ids,
                                      model_id=body.model_id, actions=body.actions)
    return _request_view(queued)


@router.get("/score/{request_id}", responses={404: {"description": "No such request of yours."}})
def get_score_again(request_id: str, account: AccountDep,
                    store: StoreDep) -> ScoringRequestState:
    """A Score again request (its UUID; a request made before UUIDs, its integer id too):
    `status` (queued, running, succeeded, failed), `error` (why it failed), `wait` (while
    queued: what it waits for, and `runs_ahead` of it for the worker)."""
    return _request_view(scoring_requests.get(store, account.id, request_id))


def request_state_of(scoring: ScoringRequest) -> dict[str, Any]:
    """Where a Score again request stands (``dagster_runs.request_state``); every field None when
    the run queue cannot be read (the API's JSON and the viewer's pages say so)."""
    from stash_pipeline.dagster_runs import request_state

    try:
        return request_state(scoring_requests.run_tags(scoring))
    except Exception as error:  # noqa: BLE001 - the request is stored; its state is a courtesy
        log.warning("the run queue is unreadable: %s", error)
        return {"status": None, "error": None, "wait": None, "run_id": None}


def _request_view(scoring: ScoringRequest) -> ScoringRequestState:
    return ScoringRequestState(**scoring_requests.request_view(scoring),
                               **request_state_of(scoring))


@router.get("/{trace_id}", responses=NOT_FOUND, response_model_exclude_unset=True)
def get_trace(trace_id: str, account: AccountDep, store: StoreDep) -> TraceDetail:
    """Messages, actions, `scores` and `action_scores` of each evaluator, and whether the shared
    evaluator has scored it (or the deployment still waits for its first release)."""
    return traces.detail(store, account.id, trace_id)


@router.patch("/{trace_id}", responses=NOT_FOUND)
def change_trace(trace_id: str, body: ContributionChange, account: AccountDep,
                 store: StoreDep) -> TraceContribution:
    """Contribution opt-in. Turning it off excludes the trace from future candidates; it cannot
    remove what previously released weights have learned."""
    return traces.set_contribution(store, account.id, trace_id,
                                   body.contribute)


@router.post("/{trace_id}/ratings", status_code=201, responses=NOT_FOUND)
def rate(trace_id: str, body: RatingBody, account: AccountDep, store: StoreDep) -> RatingView:
    """A trace rating, or a step rating with `action_id`; rating again replaces the value."""
    item = feedback.rate(store, account.id, trace_id, body.value,
                         action=body.action_id, author=body.author)
    return feedback.view(item)


@router.post("/{trace_id}/comments", status_code=201, responses=NOT_FOUND)
def comment(trace_id: str, body: CommentBody, account: AccountDep,
            store: StoreDep) -> CommentView:
    """A comment on the trace, or on one action with `action_id`."""
    item = feedback.comment(store, account.id, trace_id, body.text,
                            action=body.action_id, author=body.author)
    return feedback.view(item)
