"""OpenRLHF's remote reward model (``--remote_rm_url``): ``POST /get_reward`` scores with the first
model the operator chose (``--openrlhf-model``), ``POST /get_reward/<model>`` with any of them;
``?output=calibrated`` makes ``rewards`` the calibrated scores (default ``--openrlhf-output``).

OpenRLHF sends no credentials: anyone who reaches the server may call these routes, unless the
operator sets ``STASH_GET_REWARD_KEY`` (then ``Authorization: Bearer <key>``); the server listens
on loopback unless told otherwise. Each query's reward is its conversation's whole reward (one
forward each); queries that share everything but their last assistant message are candidates of
one context (``core.reward_requests.requests_for``). A batch of any size is read in waves.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Depends, Request

from stash_pipeline.core.errors import NotFoundError
from stash_pipeline.core.reward_requests import requests_for, reward_of
from stash_pipeline.serving import answers, openrlhf
from stash_pipeline.serving.bodies import GetRewardAnswer, GetRewardCall, GetRewardCallDep
from stash_pipeline.serving.deps import EngineDep, RegistryDep, SettingsDep, openrlhf_caller
from stash_pipeline.serving.models import ModelRegistry
from stash_pipeline.serving.settings import RELEASE, Output, ServeSettings
from stash_pipeline.web.disconnect import unless_disconnected
from stash_pipeline.worker.serving import Engine

router = APIRouter(dependencies=[Depends(openrlhf_caller)])


@router.post("/get_reward")
async def get_reward(call: GetRewardCallDep, request: Request, registry: RegistryDep,
                     engine: EngineDep, settings: SettingsDep,
                     output: Output | None = None) -> GetRewardAnswer:
    if not settings.openrlhf_models:
        raise NotFoundError("this server scores no model at /get_reward: start it with "
                            "--openrlhf-model ID (or release, once there is one)")
    return await unless_disconnected(request, _rewards(
        call, registry, engine, settings, settings.openrlhf_models[0], output))


@router.post("/get_reward/{model}")
async def get_reward_of(model: str, call: GetRewardCallDep, request: Request,
                        registry: RegistryDep, engine: EngineDep, settings: SettingsDep,
                        output: Output | None = None) -> GetRewardAnswer:
    if model not in settings.openrlhf_models:
        served = ", ".join(settings.openrlhf_models) or "none"
        raise NotFoundError(f"this server scores no model {model} at /get_reward (it serves "
                            f"{served}): its operator names each with --openrlhf-model")
    return await unless_disconnected(request, _rewards(
        call, registry, engine, settings, model, output))


async def _rewards(call: GetRewardCall, registry: ModelRegistry, engine: Engine,
                   settings: ServeSettings, model: str, output: Output | None
                   ) -> GetRewardAnswer:
    evaluator = registry.release if model == RELEASE else model
    if evaluator is None:
        raise NotFoundError("there is no shared-evaluator release yet to score with")
    queries, prompts = openrlhf.queries(call)
    traces = await asyncio.to_thread(lambda: [
        openrlhf.query_trace(query, prompt, f"query[{i}]")
        for i, (query, prompt) in enumerate(zip(queries, prompts))])
    requests, where = requests_for(traces)
    first = {}
    for index, (request_index, _) in enumerate(where):
        first.setdefault(request_index, f"query[{index}]")
    _, found = await answers.answer_all(registry, engine, evaluator, requests,
                                        settings.timeout_s,
                                        [first[i] for i in range(len(requests))])
    read = [reward_of(found, w) for w in where]
    return GetRewardAnswer(rewards=[a[output or settings.openrlhf_output] for a in read],
                           scores=[a["calibrated"] for a in read], extra_logs={})
