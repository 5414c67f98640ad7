"""The scoring server (``stash-pipeline serve``): checkpoints kept warm, rewards on request.

Routes (``routes/``, docs/serving.md): ``POST /v1/rewards`` (the API's, with its token),
``GET /v1/models`` and ``GET /v1/stats`` (token too), OpenRLHF's ``POST /get_reward`` and
``POST /get_reward/<model>``, ``GET /health``. Built on ``web/`` as the API is: the same error
shape, body limits (``max_body_bytes`` for /get_reward, a few times it for the API's calls), JSON
nesting limit and request ids.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from starlette.types import Scope

from stash_pipeline.serving.models import ModelRegistry
from stash_pipeline.serving.protocol import REWARDS_PATH
from stash_pipeline.serving.routes import get_reward, rewards, status
from stash_pipeline.serving.settings import API_BODY_FACTOR, ServeSettings
from stash_pipeline.web import errors
from stash_pipeline.web.limits import BodyLimit
from stash_pipeline.web.request_ids import RequestIds
from stash_pipeline.worker.serving import Engine

log = logging.getLogger(__name__)


def create_app(registry: ModelRegistry, engine: Engine, settings: ServeSettings) -> FastAPI:
    """The server over ``registry`` and its ``engine`` (both closed when it stops)."""
    app = FastAPI(title="stash-pipeline scoring server", lifespan=lifespan, docs_url=None,
                  redoc_url=None, openapi_url=None)
    app.state.registry, app.state.engine, app.state.settings = registry, engine, settings
    for module in (rewards, get_reward, status):
        app.include_router(module.router)
    errors.install(app)
    app.add_middleware(BodyLimit, limit_for=lambda scope: body_limit(settings, scope))
    app.add_middleware(RequestIds)
    return app


def body_limit(settings: ServeSettings, scope: Scope) -> int:
    api_call = scope.get("path", "").rstrip("/") == REWARDS_PATH
    return settings.max_body_bytes * (API_BODY_FACTOR if api_call else 1)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Models kept current in a thread of their own while the server runs."""
    registry, engine, settings = app.state.registry, app.state.engine, app.state.settings
    stop = threading.Event()
    refresher = threading.Thread(target=keep_models_current, name="model-refresh", daemon=True,
                                 args=(registry, stop, settings.refresh_s))
    refresher.start()
    try:
        yield
    finally:
        stop.set()
        registry.close()
        engine.close()


def keep_models_current(registry: ModelRegistry, stop: threading.Event, every_s: float) -> None:
    """The current release and the chosen models loaded now and every ``every_s`` seconds."""
    while True:
        try:
            registry.refresh()
        except Exception as error:  # noqa: BLE001 - the store may be down for a while
            log.warning("looking for a new release and the chosen models failed: %s", error)
        if stop.wait(every_s):
            return
