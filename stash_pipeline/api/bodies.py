"""Request bodies of the API, as documented in its OpenAPI schema.

The reward-model request is validated by ``core.requests`` (one validation for the CLI and the API);
its schema here only documents it. The small bodies are pydantic models that refuse unknown fields.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from stash_pipeline.core.requests import (
    MAX_BASE_MODEL_LENGTH, MAX_EPOCHS, MAX_MAX_PAIRS, MAX_NAME_LENGTH, MAX_TRACE_ID_LENGTH,
    MAX_TRACE_IDS,
)
from stash_pipeline.core.training_settings import (
    DEFAULT_BASE_MODEL, DEFAULT_EPOCHS, DEFAULT_MAX_PAIRS,
)
from stash_pipeline.services.feedback import MAX_AUTHOR_LENGTH, MAX_COMMENT_LENGTH
from stash_pipeline.services.sql import MAX_SQL_CHARS
from stash_pipeline.services.scoring_requests import MAX_TRACES_PER_REQUEST as MAX_SCORE_AGAIN_TRACES

REWARD_MODEL_REQUEST: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "trace_ids"],
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": MAX_NAME_LENGTH,
                 "description": "Display name."},
        "trace_ids": {"type": "array", "minItems": 1, "maxItems": MAX_TRACE_IDS,
                      "items": {"type": "string", "minLength": 1,
                                "maxLength": MAX_TRACE_ID_LENGTH},
                      "description": "At least one trace UUID owned by you. Only these traces "
                                     "supply training pairs."},
        "base_model": {"type": "string", "minLength": 1, "maxLength": MAX_BASE_MODEL_LENGTH,
                       "default": DEFAULT_BASE_MODEL,
                       "description": "Hugging Face model id to fine-tune."},
        "epochs": {"type": "integer", "minimum": 1, "maximum": MAX_EPOCHS,
                   "default": DEFAULT_EPOCHS, "description": "Passes over the training pairs."},
        "max_pairs": {"type": "integer", "minimum": 1, "maximum": MAX_MAX_PAIRS,
                      "default": DEFAULT_MAX_PAIRS,
                      "description": "Cap on combined API-rating and feedback-derived pairs."},
    },
}

_STRICT = ConfigDict(extra="forbid", strict=True)
ACTION_ID = Field(None, min_length=1, max_length=160,
                  description="An action of the trace: `m<i>` (a message's text) or "
                              "`m<i>.call<k>` (its k-th tool call), or the full "
                              "`<trace id>/m<i>...`. Absent: the whole trace.")
AUTHOR = Field(None, max_length=MAX_AUTHOR_LENGTH, description="Who gave it.")


class ContributionChange(BaseModel):
    model_config = _STRICT
    contribute: bool = Field(description="Opt the trace in to (true) or out of (false) "
                                         "shared-evaluator training.")


class RatingBody(BaseModel):
    model_config = _STRICT
    value: float = Field(allow_inf_nan=False, description="Higher is better.")
    action_id: str | None = ACTION_ID
    author: str | None = AUTHOR


class CommentBody(BaseModel):
    model_config = _STRICT
    text: str = Field(min_length=1, max_length=MAX_COMMENT_LENGTH)
    action_id: str | None = ACTION_ID
    author: str | None = AUTHOR


class SqlBody(BaseModel):
    model_config = _STRICT
    sql: str = Field(min_length=1, max_length=MAX_SQL_CHARS,
                     description="One SELECT over traces, scores, action_scores and "
                                 "reward_models (your rows only).")


class ScoreAgainBody(BaseModel):
    model_config = _STRICT
    trace_ids: list[str] = Field(min_length=1, max_length=MAX_SCORE_AGAIN_TRACES,
                                 description="Traces of yours to score again.")
    model_id: str | None = Field(None, min_length=1, max_length=64,
                                 description="One of your succeeded reward models; absent: the "
                                             "released shared evaluator.")
    actions: bool = Field(False, description="Score actions too (a personal model needs "
                                             "training with action comparisons: else 422).")
