"""The routes' dependencies under names, in the FastAPI template's style: a route takes
``store: StoreDep`` (and ``account: AccountDep``, ``api.auth``) instead of reading
``request.app.state``. What ``create_app`` keeps on the app's state is read here only.

The getters are ``async``: they only read the state, so FastAPI runs them in the event loop
rather than sending each to a worker thread.
"""

from __future__ import annotations

from typing import Annotated

import anyio
from fastapi import Depends, Request

from stash_pipeline.api.settings import ApiSettings
from stash_pipeline.objects import ObjectStore
from stash_pipeline.serving.client import ScoringClient
from stash_pipeline.serving.protocol import scoring_token_from_env
from stash_pipeline.store import Store
from stash_pipeline.store.readonly_sql import ReadonlySql


async def get_store(request: Request) -> Store:
    return request.app.state.store


async def get_objects(request: Request) -> ObjectStore:
    return request.app.state.objects


async def get_settings(request: Request) -> ApiSettings:
    return request.app.state.settings


async def get_sql(request: Request) -> ReadonlySql:
    return request.app.state.sql


async def get_sql_threads(request: Request) -> anyio.CapacityLimiter:
    """The threads SQL queries run in, apart from the other routes' (made at the first query)."""
    state = request.app.state
    if getattr(state, "sql_threads", None) is None:
        state.sql_threads = anyio.CapacityLimiter(2 * state.settings.sql_concurrency)
    return state.sql_threads


async def get_scoring_client(request: Request) -> ScoringClient:
    """The app's client of the scoring server, made on first use (the token needs the signing
    key, which the local object store may create)."""
    state = request.app.state
    if getattr(state, "scoring", None) is None:
        settings = state.settings
        token = settings.scoring_token or scoring_token_from_env()
        state.scoring = ScoringClient(settings.scoring_url, token, settings.scoring_timeout_s)
    return state.scoring


StoreDep = Annotated[Store, Depends(get_store)]
ObjectsDep = Annotated[ObjectStore, Depends(get_objects)]
SettingsDep = Annotated[ApiSettings, Depends(get_settings)]
SqlDep = Annotated[ReadonlySql, Depends(get_sql)]
SqlThreadsDep = Annotated[anyio.CapacityLimiter, Depends(get_sql_threads)]
ScoringDep = Annotated[ScoringClient, Depends(get_scoring_client)]
