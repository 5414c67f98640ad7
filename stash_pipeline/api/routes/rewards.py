"""Rewards on request: a personal model's or the current release's rewards of a conversation, or
of candidate next messages ranked, read by the scoring server (``stash-pipeline serve``).

The route checks the key, the model (yours and succeeded; the release exists) and the body
(``services.rewards``) here, then forwards the request with the API's token
(``serving.client``); no torch in this process. A client that leaves before the answer closes
the call to the scoring server, which then drops the request (``web.disconnect``).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Depends, Request
from starlette.concurrency import run_in_threadpool

from stash_pipeline.api.auth import AccountDep
from stash_pipeline.api.bodies import REWARDS_REQUEST
from stash_pipeline.api.deps import ScoringDep, StoreDep
from stash_pipeline.api.ids import readable_ids
from stash_pipeline.services import rewards
from stash_pipeline.serving.protocol import Rewards
from stash_pipeline.web.disconnect import unless_disconnected

MODEL_PATH = "/api/v1/rm/reward-models/{model_id}/rewards"
EVALUATOR_PATH = "/api/v1/evaluator/rewards"
router = APIRouter(tags=["rewards"], dependencies=[Depends(readable_ids)])
BODY = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": REWARDS_REQUEST}}}}
ANSWERS = {
    422: {"description": "An unknown field, both or neither of `conversation` and `context`, a "
                         "conversation no importer reads, too many candidates or messages, or "
                         "more tokens to read than one request may ask for."},
    503: {"description": "No scoring server is up, it is loading the model, it has more work "
                         "in flight than it would finish within `STASH_SCORING_TIMEOUT_S`, or "
                         "it did not answer within that time: retry after `Retry-After` "
                         "seconds."},
}


@router.post(MODEL_PATH, openapi_extra=BODY, response_model_exclude_unset=True, responses={
    **ANSWERS, 404: {"description": "Not your model, not there, or an account from before the "
                                    "rollout."},
    409: {"description": "The model has not succeeded: no checkpoint to score with."}})
async def model_rewards(model_id: str, account: AccountDep, store: StoreDep, client: ScoringDep,
                        request: Request, body: Any = Body(...)) -> Rewards:
    """Rewards from one of your succeeded personal models: of a conversation (its raw reward,
    calibrated score and, unless `actions` is false, every action's reward and credit), or of
    candidate next messages after one context, ranked."""
    evaluator = await run_in_threadpool(rewards.personal_evaluator, store, account.id, model_id)
    asked = await run_in_threadpool(rewards.parse_body, body)
    return await unless_disconnected(request, client.rewards(evaluator, asked))


@router.post(EVALUATOR_PATH, openapi_extra=BODY, response_model_exclude_unset=True, responses={
    **ANSWERS, 404: {"description": "No shared evaluator release yet."}})
async def evaluator_rewards(account: AccountDep, store: StoreDep, client: ScoringDep,
                            request: Request, body: Any = Body(...)) -> Rewards:
    """The same from the current shared-evaluator release."""
    evaluator = await run_in_threadpool(rewards.shared_evaluator, store)
    asked = await run_in_threadpool(rewards.parse_body, body)
    return await unless_disconnected(request, client.rewards(evaluator, asked))
