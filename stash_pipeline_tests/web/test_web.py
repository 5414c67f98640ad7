"""The web module both HTTP apps stand on: one error shape for the typed errors, request ids,
JSON bodies under a nesting limit, the body limit. An app of its own here (in process); the API's
and the scoring server's suites hold the same through their real servers."""

from __future__ import annotations

import asyncio
import logging
from typing import Annotated

import httpx
import pytest
from fastapi import FastAPI
from pydantic import BaseModel

from stash_pipeline.core.errors import InputError, NotFoundError, UnavailableError
from stash_pipeline.web import errors
from stash_pipeline.web.bodies import MAX_BODY_DEPTH, typed_body
from stash_pipeline.web.errors import Unauthorized
from stash_pipeline.web.limits import BodyLimit
from stash_pipeline.web.request_ids import RequestIds


class Busy(UnavailableError):
    retry_after_s = 7


class Item(BaseModel):
    name: str
    count: int = 0


def app() -> FastAPI:
    made = FastAPI()
    failures = {"input": InputError("too long", field="name"), "missing": NotFoundError("no item"),
                "busy": Busy("the queue is full"), "who": Unauthorized("missing key"),
                "bug": RuntimeError("a bug")}

    @made.get("/fail/{kind}")
    async def fail(kind: str) -> None:
        raise failures[kind]

    @made.post("/items")
    async def items(item: Annotated[Item, typed_body(Item)]) -> Item:
        return item

    errors.install(made)
    made.add_middleware(BodyLimit, limit_for=lambda _scope: 1000)
    made.add_middleware(RequestIds)
    return made


def call(method: str, path: str, **options) -> httpx.Response:
    async def run() -> httpx.Response:
        transport = httpx.ASGITransport(app=app(), raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
            return await client.request(method, path, **options)
    return asyncio.run(run())


@pytest.mark.parametrize("kind, status, body, headers", [
    ("input", 422, {"detail": "field 'name': too long", "field": "name"}, {}),
    ("missing", 404, {"detail": "no item"}, {}),
    ("busy", 503, {"detail": "the queue is full (retry in 7 s)", "retryable": True},
     {"Retry-After": "7"}),
    ("who", 401, {"detail": "missing key"}, {"WWW-Authenticate": "Bearer"}),
    ("bug", 500, {"detail": "internal error: the server failed to answer this request; the "
                            "error is logged"}, {}),
])
def test_typed_errors_have_one_shape(kind, status, body, headers, caplog):
    with caplog.at_level(logging.ERROR, logger="stash_pipeline.web.errors"):
        response = call("GET", f"/fail/{kind}", headers={"X-Request-ID": "client-42"})
    assert response.status_code == status and response.json() == body
    assert all(response.headers[name] == value for name, value in headers.items())
    assert response.headers["X-Request-ID"] == "client-42"
    assert ("request client-42 (GET /fail/bug) failed: RuntimeError" in caplog.text) == (
        kind == "bug")


def test_request_ids_are_the_callers_when_sane():
    made = call("GET", "/fail/missing").headers["X-Request-ID"]
    assert len(made) == 32 and int(made, 16) >= 0
    for insane in ("has spaces", "x" * 129, "semi;colon"):
        replaced = call("GET", "/fail/missing", headers={"X-Request-ID": insane})
        assert replaced.headers["X-Request-ID"] != insane
        assert len(replaced.headers["X-Request-ID"]) == 32


def test_bodies_are_read_under_the_nesting_limit_then_typed():
    assert call("POST", "/items", json={"name": "a", "count": 2}).json() == {"name": "a",
                                                                             "count": 2}
    deep = b'{"name": ' + b"[" * (MAX_BODY_DEPTH + 1) + b"]" * (MAX_BODY_DEPTH + 1) + b"}"
    refused = call("POST", "/items", content=deep)
    assert refused.status_code == 422 and refused.json()["field"] == "body"
    assert "nested deeper" in refused.json()["detail"]
    garbage = call("POST", "/items", content=b"{not json")
    assert garbage.status_code == 422 and garbage.json()["field"] == "body"
    typed = call("POST", "/items", json={"name": "a", "count": "many"})
    assert typed.status_code == 422 and typed.json()["field"] == "count"
    large = call("POST", "/items", json={"name": "a" * 2000})
    assert large.status_code == 413 and "limit of 1000 bytes" in large.json()["detail"]
    assert large.headers["X-Request-ID"]
