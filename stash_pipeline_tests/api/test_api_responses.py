"""The response models name every key the store and services put in the JSON, in order: a model
that missed a field would drop it from the wire without an error."""

from __future__ import annotations

import dataclasses

import pytest
from pydantic import BaseModel

from stash_pipeline.api import responses
from stash_pipeline.core.feedback import (
    Comment,
    Rating,
    ReviewedComparison,
    VerifiedOutcome,
    count_by_kind,
)
from stash_pipeline.core.trust import METHODS, Figure
from stash_pipeline.defs.worker_queue import NOT_STARTED, Wait
from stash_pipeline.services.imports import BREAKDOWN
from stash_pipeline.store.imports import ImportSummary
from stash_pipeline.store.trace_pages import TraceSummary


def names(cls) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


@pytest.mark.parametrize(("model", "keys"), [
    (responses.TraceListItem, names(TraceSummary)),
    (responses.CommentItem, ["type", *names(Comment)]),
    (responses.RatingItem, ["type", *names(Rating)]),
    (responses.ComparisonItem, ["type", *names(ReviewedComparison)]),
    (responses.OutcomeItem, ["type", *names(VerifiedOutcome)]),
    (responses.ComparisonView, [*names(ReviewedComparison), "independently_reviewed",
                                    "version"]),
    (responses.OutcomeView, names(VerifiedOutcome)),
    (responses.FeedbackApplied, ["items", "ids", *count_by_kind([]), "reviews"]),
    (responses.TracesImported, [*names(ImportSummary), *(f"by_{k}" for k in BREAKDOWN),
                                "outcome_field", "outcome_field_matched", "skipped_invalid",
                                "warnings", "trace_ids"]),
    (responses.TrustFigure, names(Figure)),
    (responses.TrustMethods, list(METHODS)),
    (responses.WaitView, list(NOT_STARTED.to_dict())),
    (responses.WaitView, [*names(Wait), "text"]),
], ids=lambda value: value.__name__ if isinstance(value, type) else "")
def test_a_response_model_has_every_key_of_what_it_describes(model: type[BaseModel],
                                                             keys: list[str]) -> None:
    assert list(model.model_fields) == keys
