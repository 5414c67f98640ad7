"""Typed responses (the FastAPI template's response models): each route names its model as its
return type, so OpenAPI documents every field and FastAPI checks what the route returns against
it. Reward models, Score again requests, the account, bulk actions, saved filters and the review
queue's changes; the trace list, a trace and the trust reports stay dicts (their shapes are
documented in docs/api.md and docs/trust.md)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field


class AccountView(BaseModel):
    """Whose key this is."""

    id: str
    name: str | None
    reward_models_enabled: bool
    created_at: str = Field(description="ISO 8601.")
    has_api_key: bool


class ContributionChanged(BaseModel):
    """Traces opted in or out of shared-evaluator training."""

    traces: int = Field(description="How many traces changed.")
    contribute: bool


class CommentsAdded(BaseModel):
    comments: int = Field(description="How many traces got the comment.")


class ScoringRequestView(BaseModel):
    """A Score again request, queued for the pipeline."""

    request_id: int
    evaluator: str
    trace_ids: list[str]
    actions: bool
    created_at: str = Field(description="ISO 8601.")


class ScoringQueued(BaseModel):
    requests: list[ScoringRequestView]
    traces: int = Field(description="Traces in all the requests together.")


class SavedFilter(BaseModel):
    id: int
    name: str
    match: dict[str, Any] = Field(description="The search, as `match` takes it.")
    created_at: str = Field(description="ISO 8601.")


class SavedFilters(BaseModel):
    saved_filters: list[SavedFilter]


class ReviewStatusChanged(BaseModel):
    items: int = Field(description="How many items changed.")
    status: Literal["reviewed", "skipped", "pending"]


class ReviewAssigned(BaseModel):
    items: int = Field(description="How many items changed.")
    assignee: str | None


class ScoringRequestState(ScoringRequestView):
    """A Score again request and where its run is."""

    status: Literal["queued", "running", "succeeded", "failed"] | None = Field(
        description="None when the run queue could not be read.")
    error: str | None = Field(description="Why its run failed.")
    wait: dict[str, Any] | None = Field(
        description="While queued: what it waits for, and `runs_ahead` of it for the worker.")
    run_id: str | None


class HeldOut(BaseModel):
    """Held-out accuracy as people should read it."""

    pairs: int
    accuracy: float
    interval: list[float] = Field(description="The 95% Wilson interval.")
    note: str | None = Field(description="On a handful of pairs, the seed's sentence.")


class RewardModelView(BaseModel):
    """A personal reward model: its request, status, error and metrics, what it waits for in
    the run queue, and its latest Score again's state."""

    id: str
    name: str
    status: str = Field(description="queued, running, succeeded or failed.")
    error: str | None = Field(description="Why it failed: the end of its worker's log.")
    metrics: dict[str, Any] | None
    trace_ids: list[str]
    base_model: str
    epochs: int
    max_pairs: int
    attempt: int
    held_out: HeldOut | None
    created_at: str | None = Field(description="ISO 8601, like `started_at` and `finished_at`.")
    started_at: str | None
    finished_at: str | None
    wait: dict[str, Any] | None = Field(
        description="While queued: what it waits for in the run queue.")
    score_again: dict[str, Any] | None = Field(
        description="Its latest Score again request's number and state; None before one.")


class RewardModels(BaseModel):
    reward_models: list[RewardModelView]
