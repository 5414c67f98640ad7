"""Typed responses of the routes whose answers are small and fixed (the FastAPI template's
response models): each route names its model as its return type, so OpenAPI documents every
field and FastAPI checks what the route returns against it."""

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
