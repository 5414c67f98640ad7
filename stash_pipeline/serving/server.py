"""The scoring server (``stash-pipeline serve``): checkpoints kept warm, rewards on request.

Routes (docs/serving.md):
- ``POST /v1/rewards``: what the API forwards (``protocol.rewards_body``), with the API's token;
- ``GET /v1/models``, ``GET /v1/stats``: what is loaded, and the engine's counts (token too);
- ``POST /get_reward``: OpenRLHF's remote reward model, for the model chosen with
  ``--openrlhf-model`` (OpenRLHF sends no credentials: keep the server on a private network);
- ``GET /health``.

Errors have the API's shape (``{"detail", "field"?, "reason"?}``); 503 carries ``Retry-After``;
bodies over ``MAX_BODY_BYTES`` are 413, as the API refuses them.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from stash_pipeline.api.limits import BodyLimit
from stash_pipeline.core.errors import InputError, NotFoundError, UnavailableError
from stash_pipeline.core.reward_requests import (
    RewardRequest,
    request_from_dict,
    requests_for,
    reward_of,
)
from stash_pipeline.serving import openrlhf
from stash_pipeline.serving.models import ModelRegistry
from stash_pipeline.serving.protocol import DEFAULT_TIMEOUT_S, REWARDS_PATH

log = logging.getLogger(__name__)
RELEASE = "release"
# The largest body (413 above it): a /get_reward batch of 1024 queries of 64 KiB each.
MAX_BODY_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class ServeSettings:
    token: str  # what the API sends (protocol.scoring_token)
    timeout_s: float = DEFAULT_TIMEOUT_S  # the longest a request may wait, whatever it asks
    openrlhf_model: str | None = None  # a personal model id, or "release": the current release
    refresh_s: float = 60.0  # how often a new release and the chosen models are looked for


class Unauthorized(Exception):
    pass


class ScoringTimedOut(UnavailableError):
    retry_after_s = 1


def create_app(registry: ModelRegistry, engine: Any, settings: ServeSettings) -> FastAPI:
    """The server over ``registry`` and its ``engine`` (``worker.serving.Engine``)."""
    stop = threading.Event()

    def refreshing() -> None:
        while True:
            try:
                registry.refresh()
            except Exception as error:  # noqa: BLE001 - the store may be down for a while
                log.warning("looking for a new release and the chosen models failed: %s", error)
            if stop.wait(settings.refresh_s):
                return

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        refresher = threading.Thread(target=refreshing, name="model-refresh", daemon=True)
        refresher.start()
        try:
            yield
        finally:
            stop.set()
            registry.close()
            engine.close()

    app = FastAPI(title="stash-pipeline scoring server", lifespan=lifespan, docs_url=None,
                  redoc_url=None, openapi_url=None)

    def authorized(request: Request) -> None:
        sent = request.headers.get("authorization", "")
        if not hmac.compare_digest(sent.encode(), f"Bearer {settings.token}".encode()):
            raise Unauthorized()

    async def score(evaluator: str, request: RewardRequest, timeout_s: float
                    ) -> tuple[str, dict[str, Any]]:
        deadline = time.monotonic() + timeout_s
        state = await asyncio.to_thread(registry.ready, evaluator, timeout_s)
        left = max(deadline - time.monotonic(), 0.001)
        future = await asyncio.to_thread(engine.submit, evaluator, request, timeout_s=left)
        try:
            # The engine answers a request it never read at its deadline, when it is next free;
            # the caller hears at the deadline (a forward in progress is not interrupted).
            answer = await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)),
                                            max(deadline - time.monotonic(), 0.001))
        except TimeoutError:
            raise ScoringTimedOut(f"no answer within {timeout_s:g} s: the scoring server is "
                                  "busy") from None
        return state.kind, answer

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models(request: Request) -> dict[str, Any]:
        authorized(request)
        return {"release": registry.release, "models": registry.states()}

    @app.get("/v1/stats")
    async def stats(request: Request) -> dict[str, Any]:
        authorized(request)
        return engine.stats.as_dict()

    @app.post(REWARDS_PATH)
    async def rewards(request: Request) -> dict[str, Any]:
        authorized(request)
        body = await _json(request)
        evaluator = body.get("evaluator") if isinstance(body, dict) else None
        if not isinstance(evaluator, str) or not evaluator:
            raise InputError("expected the evaluator's name", field="evaluator")
        timeout = body.get("timeout_s", settings.timeout_s)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise InputError("expected a positive number of seconds", field="timeout_s")
        parsed = request_from_dict(body.get("request"))
        kind, answer = await score(evaluator, parsed, min(float(timeout), settings.timeout_s))
        return {"evaluator": evaluator, "kind": kind, **answer}

    @app.post("/get_reward")
    async def get_reward(request: Request) -> dict[str, Any]:
        chosen = settings.openrlhf_model
        evaluator = registry.release if chosen == RELEASE else chosen
        if evaluator is None:
            raise NotFoundError("this server scores no model at /get_reward: start it with "
                                "--openrlhf-model ID (or release, once there is one)")
        queries, prompts = openrlhf.parse_body(await _json(request))
        traces = await asyncio.to_thread(lambda: [
            openrlhf.query_trace(q, p, f"query[{i}]")
            for i, (q, p) in enumerate(zip(queries, prompts))])
        requests, where = requests_for(traces)
        answers = [answer for _, answer in await asyncio.gather(
            *(score(evaluator, r, settings.timeout_s) for r in requests))]
        found = [reward_of(answers, w) for w in where]
        return {"rewards": [a["raw"] for a in found],
                "scores": [a["calibrated"] for a in found], "extra_logs": {}}

    _install_errors(app)
    app.add_middleware(BodyLimit, limit_for=lambda _scope: MAX_BODY_BYTES)
    return app


async def _json(request: Request) -> Any:
    try:
        return await request.json()
    except ValueError as error:
        raise InputError(f"the body is not JSON: {error}", field="body") from None


def _install_errors(app: FastAPI) -> None:
    def error(status: int, detail: str, headers: dict[str, str] | None = None,
              **extra: Any) -> JSONResponse:
        body = {"detail": detail, **{k: v for k, v in extra.items() if v is not None}}
        return JSONResponse(body, status_code=status, headers=headers)

    def unavailable(_: Request, caught: UnavailableError) -> JSONResponse:
        seconds = caught.retry_after_s
        return error(503, f"{caught} (retry in {seconds} s)", {"Retry-After": str(seconds)},
                     retryable=True)

    app.add_exception_handler(Unauthorized, lambda _r, _e: error(
        401, "missing or wrong scoring token", {"WWW-Authenticate": "Bearer"}))
    app.add_exception_handler(InputError, lambda _r, e: error(
        422, str(e), field=e.field, reason=e.reason))
    app.add_exception_handler(NotFoundError, lambda _r, e: error(404, str(e)))
    app.add_exception_handler(UnavailableError, unavailable)
