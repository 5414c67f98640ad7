"""``GET /health`` (anyone), ``GET /v1/models`` and ``GET /v1/stats`` (the API's token): what is
loaded, and the engine's counts."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from stash_pipeline.serving.bodies import Health, ModelsAnswer, StatsAnswer
from stash_pipeline.serving.deps import EngineDep, RegistryDep, api_caller

router = APIRouter()


@router.get("/health")
async def health() -> Health:
    return Health(status="ok")


@router.get("/v1/models", dependencies=[Depends(api_caller)])
async def models(registry: RegistryDep) -> ModelsAnswer:
    return ModelsAnswer.model_validate({"release": registry.release,
                                        "models": registry.states()})


@router.get("/v1/stats", dependencies=[Depends(api_caller)])
async def stats(engine: EngineDep) -> StatsAnswer:
    return StatsAnswer.model_validate({**engine.stats.as_dict(),
                                       "tokens_in_flight": engine.tokens_in_flight,
                                       "tokens_per_s": engine.tokens_per_s})
