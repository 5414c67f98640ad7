"""``POST /v1/rewards``: what the API forwards (its token only). The request was checked by the
API; here it is read back (``core.reward_requests``), admitted within the time its caller waits,
and answered, or dropped if the API closes the call first (its own client left)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from stash_pipeline.core.reward_requests import request_from_dict
from stash_pipeline.serving import answers
from stash_pipeline.serving.bodies import RewardsCallDep
from stash_pipeline.serving.deps import EngineDep, RegistryDep, SettingsDep, api_caller
from stash_pipeline.serving.protocol import REWARDS_PATH, Rewards
from stash_pipeline.web.disconnect import unless_disconnected

router = APIRouter(dependencies=[Depends(api_caller)])


@router.post(REWARDS_PATH, response_model_exclude_unset=True)
async def rewards(call: RewardsCallDep, request: Request, registry: RegistryDep,
                  engine: EngineDep, settings: SettingsDep) -> Rewards:
    asked = request_from_dict(call.request)
    horizon_s = min(call.timeout_s or settings.timeout_s, settings.timeout_s)
    kind, answer = await unless_disconnected(request, answers.answer(
        registry, engine, call.evaluator, asked, horizon_s))
    return Rewards.model_validate({"evaluator": call.evaluator, "kind": kind, **answer})
