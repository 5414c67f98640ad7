"""What the API and the scoring server agree on: where the server is, how the API proves it is
the API, the body of a scoring call and the answer (``Rewards``, which both apps send).

The server's own routes (``/v1/...``) take ``Authorization: Bearer <token>``, the token an HMAC
of a fixed label under the deployment's signing secret (``STASH_SIGNING_KEY``, or the key file in
``STASH_HOME``, which every API and pipeline process already shares): a process that cannot sign
download URLs cannot ask for scores either.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, Field

from stash_pipeline.core.home import stash_home
from stash_pipeline.core.reward_requests import RewardRequest, request_to_dict
from stash_pipeline.objects.signing import signing_secret_from_env

SCORING_URL_ENV = "STASH_SCORING_URL"
DEFAULT_PORT = 8100
DEFAULT_SCORING_URL = f"http://127.0.0.1:{DEFAULT_PORT}"
SCORING_TIMEOUT_ENV = "STASH_SCORING_TIMEOUT_S"
# What a caller waits for an answer, queueing, loading a model and reading included.
DEFAULT_TIMEOUT_S = 30
REWARDS_PATH = "/v1/rewards"
REWARDS_MAX_BYTES_ENV = "STASH_REWARDS_MAX_BYTES"
# The largest body of a rewards call (413 above it): the API's /rewards routes and the scoring
# server's /get_reward (the server takes a few times this from the API, which re-encodes a body).
DEFAULT_REWARDS_MAX_BYTES = 2 * 1024 * 1024
_TOKEN_LABEL = b"stash-pipeline scoring server v1"


def scoring_token(secret: bytes) -> str:
    return hmac.new(secret, _TOKEN_LABEL, hashlib.sha256).hexdigest()


def scoring_token_from_env(environ: Mapping[str, str] | None = None) -> str:
    environ = os.environ if environ is None else environ
    return scoring_token(signing_secret_from_env(environ, stash_home(environ)))


def scoring_url_from_env(environ: Mapping[str, str] | None = None) -> str:
    environ = os.environ if environ is None else environ
    return (environ.get(SCORING_URL_ENV) or DEFAULT_SCORING_URL).rstrip("/")


def rewards_body(evaluator: str, request: RewardRequest, timeout_s: float) -> dict[str, Any]:
    """A call of ``REWARDS_PATH``: the evaluator (a release version or a personal model id), the
    request in its JSON form, and how long the caller waits."""
    return {"evaluator": evaluator, "request": request_to_dict(request), "timeout_s": timeout_s}


class ActionReward(BaseModel):
    action_id: str = Field(description="Local to the conversation: `m<i>` or `m<i>.call<k>`.")
    tool_call: bool
    raw: float
    credit: float | None = Field(description="None for a model without action statistics.")


class CandidateReward(BaseModel):
    index: int = Field(description="Its place in `candidates` as sent.")
    raw: float
    calibrated: float | None
    actions: list[ActionReward] | None = Field(
        None, description="The candidate message's own actions (absent when not asked for).")
    rank: int = Field(description="1 for the best.")


class Rewards(BaseModel):
    """A conversation's rewards (`raw`, `calibrated`, `actions`), or candidates' (`candidates`,
    `ranking`); the other keys are absent."""

    evaluator: str = Field(description="The reward model's id or the release's version.")
    kind: str = Field(description="personal or shared.")
    raw: float | None = None
    calibrated: float | None = None
    actions: list[ActionReward] | None = None
    candidates: list[CandidateReward] | None = None
    ranking: list[int] | None = Field(None, description="Candidates' indexes, best first.")
