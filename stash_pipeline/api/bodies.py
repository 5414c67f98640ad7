"""Request bodies of the API, as documented in its OpenAPI schema.

The reward-model request is validated by ``core.requests`` (one validation for the CLI and the API),
whose field table also writes the JSON Schema documented here. The small bodies are pydantic
models that refuse unknown fields.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from stash_pipeline.core.requests import request_json_schema
from stash_pipeline.core.reward_requests import MAX_CANDIDATES
from stash_pipeline.importers import FORMATS
from stash_pipeline.services.feedback import MAX_AUTHOR_LENGTH, MAX_COMMENT_LENGTH
from stash_pipeline.services.scoring_requests import (
    MAX_TRACES_PER_REQUEST as MAX_SCORE_AGAIN_TRACES,
)
from stash_pipeline.services.sql import MAX_SQL_CHARS

# Written from the parser's own field table: the documented body is the accepted one.
REWARD_MODEL_REQUEST: dict[str, Any] = request_json_schema()

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


_CONVERSATION = {
    "description": "A conversation in any import format (docs/importing.md): a trace object in "
                   "OpenAI's or Anthropic's form, an OTLP export, a tau2-bench result of one "
                   "simulation, an AgentProcessBench record; or a list of messages.",
    "anyOf": [{"type": "object"}, {"type": "array", "items": {"type": "object"}}],
}
# The /rewards routes' body, as services.rewards.parse_body reads it.
REWARDS_REQUEST: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "conversation": _CONVERSATION,
        "context": {**_CONVERSATION, "description": "The conversation the candidates continue "
                                                    "(with `candidates`, instead of "
                                                    "`conversation`)."},
        "candidates": {
            "type": "array", "minItems": 1, "maxItems": MAX_CANDIDATES,
            "description": "Candidate next assistant messages, in the context's format, or "
                           "strings (text replies); ranked by the reward of the conversation "
                           "each completes.",
            "items": {"anyOf": [{"type": "string"}, {"type": "object"}]}},
        "format": {"type": "string", "enum": ["auto", *FORMATS], "default": "auto",
                   "description": "The conversation's import format."},
        "actions": {"type": "boolean", "default": True,
                    "description": "Every action's reward and credit too (`actions` in the "
                                   "answer); false: the whole reward only, one forward of at "
                                   "most the model's window a conversation."},
    },
    "oneOf": [{"required": ["conversation"]}, {"required": ["context", "candidates"]}],
}
