"""The ASGI app: ``create_app()`` for uvicorn (``stash-pipeline api``), tests pass their own parts.

No torch, and Dagster only to record imports and read a running model's progress: the API reads and
writes the store; the pipeline picks up what it queues.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI
from starlette.types import Scope

from stash_pipeline.api import docs, errors, temporaries, ui
from stash_pipeline.api.routes import (
    account,
    bulk,
    feedback,
    health,
    objects,
    releases,
    review,
    reward_models,
    rewards,
    sql,
    traces,
)
from stash_pipeline.api.settings import ApiSettings
from stash_pipeline.api.write_slots import IMPORT_PATH, REWARDS_SUFFIX, write_slot
from stash_pipeline.objects import ObjectStore
from stash_pipeline.store import Store
from stash_pipeline.store.readonly_sql import ReadonlySql
from stash_pipeline.web.limits import BodyLimit
from stash_pipeline.web.request_ids import RequestIds


def create_app(store: Store | None = None, objects_store: ObjectStore | None = None,
               settings: ApiSettings | None = None) -> FastAPI:
    """The API over ``store`` and ``objects_store`` (default: both from the environment)."""
    settings = settings or ApiSettings.from_env()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        owned = store is None
        temporaries.remove_abandoned()  # of API processes killed while they received an import
        app.state.store = store or Store.from_env()
        app.state.store.migrate()
        if objects_store is None:
            from stash_pipeline.objects import object_store_from_env
            app.state.objects = object_store_from_env()
        else:
            app.state.objects = objects_store
        app.state.sql = ReadonlySql(app.state.store, concurrency=settings.sql_concurrency)
        problem = app.state.sql.prepare()
        if problem:
            import logging
            logging.getLogger(__name__).warning("SQL endpoint unavailable: %s", problem)
        try:
            yield
        finally:
            if getattr(app.state, "scoring", None) is not None:
                await app.state.scoring.close()
            app.state.sql.dispose()
            if owned:
                app.state.store.dispose()

    app = FastAPI(
        title="stash-pipeline API",
        summary="Traces, feedback, personal reward models and read-only SQL over your own rows.",
        version="1",
        lifespan=lifespan,
        docs_url=None, redoc_url=None,  # docs.install serves both without a CDN
        dependencies=[Depends(write_slot)],
    )
    app.state.settings = settings
    for module in (reward_models, rewards, releases, traces, feedback, bulk, review, sql, account,
                   objects, health):
        app.include_router(module.router)
    docs.install(app)
    errors.install(app)
    ui.install(app)  # after errors.install: on /ui paths its errors are pages

    def limit_for(scope: Scope) -> int:
        path = scope.get("path", "").rstrip("/")
        if scope.get("method") == "POST" and path == IMPORT_PATH:
            return settings.max_import_bytes
        if scope.get("method") == "POST" and path.endswith(REWARDS_SUFFIX):
            return settings.max_rewards_bytes
        return settings.max_json_bytes

    app.add_middleware(BodyLimit, limit_for=limit_for)
    app.add_middleware(RequestIds)
    return app
