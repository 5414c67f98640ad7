"""The scoring server's request bodies and answers, typed (read under ``web.bodies``' limits)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from stash_pipeline.web.bodies import typed_body


class RewardsCall(BaseModel):
    """What the API forwards (``protocol.rewards_body``)."""

    model_config = ConfigDict(extra="forbid")
    evaluator: str = Field(min_length=1, description="A release version or a personal model id.")
    request: dict[str, Any] = Field(description="``core.reward_requests.request_to_dict``'s form.")
    timeout_s: float | None = Field(None, gt=0, description="What the caller waits at most.")


class GetRewardCall(BaseModel):
    """OpenRLHF's remote reward model body: newer versions send prompts and labels too."""

    model_config = ConfigDict(extra="allow")
    query: list[str] = Field(description="Each the policy's prompt and response, decoded.")
    prompts: list[Any] | None = Field(None, description="Each query's prompt (text; anything "
                                                         "else is read as none).")
    labels: list[Any] | None = None


class GetRewardAnswer(BaseModel):
    rewards: list[float] = Field(description="Each query's reward: raw, or calibrated when asked.")
    scores: list[float] = Field(description="Each query's calibrated score, in (0, 1).")
    extra_logs: dict[str, Any] = Field(default_factory=dict)


class ModelView(BaseModel):
    evaluator: str
    kind: str = Field(description="shared (a release) or personal.")
    state: str = Field(description="loading, ready or failed.")
    pinned: bool
    error: str | None


class ModelsAnswer(BaseModel):
    release: str | None
    models: list[ModelView]


class StatsAnswer(BaseModel):
    """The engine's counts (``worker.serving.EngineStats``) and what is in flight now."""

    requests: int
    batches: int
    forwards: int
    tokens: int
    largest_batch: int
    refused: int
    cancelled: int
    tokens_in_flight: int
    tokens_per_s: float | None


class Health(BaseModel):
    status: str


RewardsCallDep = Annotated[RewardsCall, typed_body(RewardsCall)]
GetRewardCallDep = Annotated[GetRewardCall, typed_body(GetRewardCall)]
