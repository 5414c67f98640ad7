"""The scoring server's routes' dependencies under names, as the API's (``api/deps.py``): a route
takes ``engine: EngineDep`` instead of reading ``request.app.state``, and names who may call it
(``api_caller``: the API's token; ``openrlhf_caller``: the operator's optional key)."""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, Request

from stash_pipeline.serving.models import ModelRegistry
from stash_pipeline.serving.settings import ServeSettings
from stash_pipeline.web.errors import Unauthorized
from stash_pipeline.worker.serving import Engine


async def get_registry(request: Request) -> ModelRegistry:
    return request.app.state.registry


async def get_engine(request: Request) -> Engine:
    return request.app.state.engine


async def get_settings(request: Request) -> ServeSettings:
    return request.app.state.settings


RegistryDep = Annotated[ModelRegistry, Depends(get_registry)]
EngineDep = Annotated[Engine, Depends(get_engine)]
SettingsDep = Annotated[ServeSettings, Depends(get_settings)]


def _bearer(request: Request, expected: str, what: str) -> None:
    sent = request.headers.get("authorization", "")
    if not hmac.compare_digest(sent.encode(), f"Bearer {expected}".encode()):
        raise Unauthorized(f"missing or wrong {what}: send Authorization: Bearer <it>")


async def api_caller(request: Request, settings: SettingsDep) -> None:
    """The API (its token, derived from the deployment's signing key)."""
    _bearer(request, settings.token, "scoring token")


async def openrlhf_caller(request: Request, settings: SettingsDep) -> None:
    """Anyone who can reach the server, unless the operator set a key (``STASH_GET_REWARD_KEY``)."""
    if settings.openrlhf_key:
        _bearer(request, settings.openrlhf_key, "key (STASH_GET_REWARD_KEY)")
