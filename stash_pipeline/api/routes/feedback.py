"""Comparisons, reviews, outcomes, feedback in batches and contribution of many traces.

Every route takes only the caller's traces (another account's is 404, as everywhere) and is one
transaction: a batch with one bad item stores nothing, and the 422 names the item and field.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field

from stash_pipeline.api.auth import AccountDep
from stash_pipeline.api.bodies import AUTHOR
from stash_pipeline.api.deps import StoreDep
from stash_pipeline.api.ids import readable_ids
from stash_pipeline.api.responses import (
    ComparisonView,
    ContributionChanged,
    FeedbackApplied,
    OutcomeView,
)
from stash_pipeline.core.errors import InputError
from stash_pipeline.core.feedback import (
    ReviewedComparison,
    comparison_item,
    outcome_item,
    review_item,
)
from stash_pipeline.core.requests import MAX_TRACE_ID_LENGTH
from stash_pipeline.core.validation import validate_review
from stash_pipeline.services import feedback_batch
from stash_pipeline.services.feedback import MAX_COMMENT_LENGTH
from stash_pipeline.services.traces import owned_trace

router = APIRouter(prefix="/api/v1", tags=["feedback"], dependencies=[Depends(readable_ids)])
NOT_FOUND = {404: {"description": "A trace, action or comparison that is not yours."}}
ADDRESS = Field(min_length=1, max_length=200,
                description="A trace id, or an action as `<trace id>/m<i>` or "
                            "`<trace id>/m<i>.call<k>`.")
REVIEWER = Field(None, min_length=1, max_length=256, description="Who reviewed it.")
MAX_CONTRIBUTE_IDS = 10_000
STRICT = ConfigDict(extra="forbid", strict=True)


class ComparisonBody(BaseModel):
    model_config = STRICT
    chosen: str = ADDRESS
    rejected: str = ADDRESS
    author: str | None = AUTHOR
    reviewer: str | None = REVIEWER
    status: Literal["pending", "approved", "rejected"] = Field(
        "pending", description="A status other than pending needs its reviewer.")
    rationale: str | None = Field(None, max_length=MAX_COMMENT_LENGTH)


class ReviewBody(BaseModel):
    model_config = STRICT
    reviewer: str = Field(min_length=1, max_length=256)
    status: Literal["approved", "rejected"] = "approved"
    version: int | None = Field(None, ge=0, le=2**31 - 1, description=(
        "The comparison's review version you decided on (the review queue's `version`, or the "
        "last verdict's): the verdict is stored only if it is still that, else 409 with its "
        "state now. Without it the verdict replaces whatever is there."))


class OutcomeBody(BaseModel):
    model_config = STRICT
    reward: float = Field(allow_inf_nan=False, description="1 succeeded, 0 failed.")
    source: str | None = Field(None, max_length=256, description="What checked it.")


class FeedbackBatch(BaseModel):
    model_config = STRICT
    items: list[dict[str, Any]] = Field(
        min_length=1, max_length=feedback_batch.MAX_BATCH_ITEMS,
        description="Feedback items as in a feedback file (docs/importing.md): `type` comment, "
                    "rating, comparison, review or outcome. All or nothing.")


class ContributeMany(BaseModel):
    model_config = STRICT
    trace_ids: list[str] = Field(min_length=1, max_length=MAX_CONTRIBUTE_IDS)
    contribute: bool = Field(description="Opt in (true) or out (false).")


def comparison_view(item: ReviewedComparison) -> ComparisonView:
    return ComparisonView(**dataclasses.asdict(item),
                          independently_reviewed=item.independently_reviewed)


@router.post("/comparisons", status_code=201, responses=NOT_FOUND)
def compare(body: ComparisonBody, account: AccountDep, store: StoreDep) -> ComparisonView:
    """A comparison: `chosen` beats `rejected` (two actions or two traces of yours). The shared
    evaluator learns only from ones approved by a reviewer other than the author."""
    item = comparison_item(body.chosen, body.rejected, author=body.author,
                           reviewer=body.reviewer, status=body.status, rationale=body.rationale)
    feedback_batch.apply(store, account.id, [("body", item)])
    return comparison_view(item)


@router.post("/comparisons/{comparison_id}/review", responses={**NOT_FOUND, 409: {
    "description": "The comparison changed since `version`: `current` holds its state now; "
                   "nothing was changed."}})
def review(comparison_id: str, body: ReviewBody, account: AccountDep,
           store: StoreDep) -> ComparisonView:
    """Approve or reject a comparison on your traces, at its review `version` when given."""
    item = review_item(comparison_id, body.reviewer, body.status)
    validate_review(item)
    comparison, version = store.decide_comparison(
        item.comparison_id, reviewer=item.reviewer, status=item.status, owner=account.id,
        version=body.version)
    return comparison_view(comparison).model_copy(update={"version": version})


@router.post("/traces/{trace_id}/outcomes", status_code=201, responses=NOT_FOUND)
def outcome(trace_id: str, body: OutcomeBody, account: AccountDep,
            store: StoreDep) -> OutcomeView:
    """A verified outcome of your trace; one per source (recording it again replaces it)."""
    trace = owned_trace(store, account.id, trace_id)
    item = outcome_item(trace.id, body.reward, body.source)
    feedback_batch.apply(store, account.id, [("body", item)])
    return OutcomeView(**dataclasses.asdict(item))


@router.post("/feedback", status_code=201, responses=NOT_FOUND)
def batch(body: FeedbackBatch, account: AccountDep, store: StoreDep) -> FeedbackApplied:
    """Many feedback items in one request, all or nothing: 422 names `items[i]` and the field,
    404 names the item whose trace, action or comparison is not yours."""
    entries = feedback_batch.parse_items(body.items)
    counts = feedback_batch.apply(store, account.id, entries)
    ids = [getattr(item, "id", None) or getattr(item, "comparison_id") for _, item in entries]
    return FeedbackApplied(items=len(entries), ids=ids, **counts)


@router.post("/traces/contribute", responses=NOT_FOUND)
def contribute(body: ContributeMany, account: AccountDep,
               store: StoreDep) -> ContributionChanged:
    """Opt many of your traces in or out of shared-evaluator training, all or nothing."""
    for index, trace_id in enumerate(body.trace_ids):
        if not trace_id or len(trace_id) > MAX_TRACE_ID_LENGTH or "\x00" in trace_id:
            raise InputError(f"a trace id is 1 to {MAX_TRACE_ID_LENGTH} characters, no NUL",
                             field=f"trace_ids[{index}]")
    changed = store.set_contribute_many(body.trace_ids, body.contribute,
                                                          account.id)
    return ContributionChanged(traces=changed, contribute=body.contribute)
