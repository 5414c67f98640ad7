"""Faults and load through the API (issue 22): a retryable condition answers 503 with Retry-After
and says so, never 500; parallel writers wait and succeed or answer 503; nothing is lost.

Before: a rating while another writer held the SQLite lock past the busy timeout answered 500,
every route answered 500 while the database was down, `weights` 500 while S3 was down, 2 of 20
parallel imports 500 and 2 of 20 parallel reward-model requests 422.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from stash_pipeline.api import create_app
from stash_pipeline.objects import LocalObjectStore, S3ObjectStore, UrlSigner
from stash_pipeline.store import Store
from stash_pipeline.store.engine import SQLITE_BUSY_TIMEOUT_ENV
from stash_pipeline_tests.support.api_helpers import (
    SETTINGS,
    Api,
    assert_retryable,
    import_traces,
    loopback_socket,
    serve,
    succeed,
)

RM = "/api/v1/rm/reward-models"
PARALLEL = 20


def in_parallel(calls: list[Callable[[], httpx.Response]]) -> list[httpx.Response]:
    barrier = threading.Barrier(len(calls))
    responses: list[httpx.Response | BaseException] = [None] * len(calls)  # type: ignore

    def run(index: int) -> None:
        barrier.wait()
        try:
            responses[index] = calls[index]()
        except BaseException as error:  # noqa: BLE001 - reported below
            responses[index] = error

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    errors = [r for r in responses if isinstance(r, BaseException)]
    assert not errors, errors
    return responses  # type: ignore[return-value]


def serving(api: Api):
    sock = loopback_socket()
    api.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    return serve(create_app(api.store, api.objects, SETTINGS), sock)


def test_a_sqlite_lock_held_past_the_busy_timeout_is_503_then_the_retry_succeeds(
        tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(SQLITE_BUSY_TIMEOUT_ENV, "0.5")
    database = tmp_path / "stash.db"
    store = Store(f"sqlite:///{database}")
    store.migrate()
    api = Api("", store, LocalObjectStore(tmp_path / "objects", api_url="http://x",
                                          signer=UrlSigner(b"k" * 32)))
    for _ in serving(api):
        _, ana = api.account("ana")
        assert import_traces(ana, "t1").status_code == 200
        holder = sqlite3.connect(database, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # another writer, holding the write lock
        try:
            assert_retryable(ana.post("/api/v1/traces/t1/ratings", json={"value": 1}))
            assert_retryable(import_traces(ana, "t2"))
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert ana.post("/api/v1/traces/t1/ratings", json={"value": 1}).status_code == 201
        assert import_traces(ana, "t2").status_code == 200
    store.dispose()


def test_20_parallel_imports_wait_and_succeed_or_answer_503(api: Api) -> None:
    _, ana = api.account("ana")
    batches = [[f"b{n}-t{i}" for i in range(50)] for n in range(PARALLEL)]
    responses = in_parallel([lambda ids=ids: import_traces(ana, *ids) for ids in batches])
    codes = [r.status_code for r in responses]
    assert set(codes) <= {200, 503}, [r.text for r in responses if r.status_code not in (200, 503)]
    for response in responses:
        if response.status_code == 503:
            assert_retryable(response)
    stored = set(api.store.trace_ids())
    for ids, response in zip(batches, responses):
        # All or nothing per request: a 200's traces are all there, a 503's none of them.
        assert (set(ids) <= stored) if response.status_code == 200 else not (set(ids) & stored)
    assert codes.count(200) >= PARALLEL // 2


def test_20_parallel_reward_model_requests_all_succeed(api: Api) -> None:
    _, ana = api.account("ana")
    assert import_traces(ana, "t1", "t2").status_code == 200
    responses = in_parallel([
        lambda n=n: ana.post(RM, json={"name": f"m{n}", "trace_ids": ["t1", "t2"]})
        for n in range(PARALLEL)])
    assert [r.status_code for r in responses] == [201] * PARALLEL, \
        [r.text for r in responses if r.status_code != 201]
    assert len(ana.get(RM).json()["reward_models"]) == PARALLEL


@pytest.mark.parametrize("store", ["sqlite"], indirect=True)
def test_weights_while_the_object_store_is_down_is_503(store: Store, tmp_path: Path,
                                                       s3_settings) -> None:
    from dataclasses import replace

    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    settings = replace(s3_settings, endpoint=f"http://{host}:{port}")
    objects = S3ObjectStore(settings)
    # moto's servers share one in-process backend: the fixture's bucket is there already.
    api = Api("", store, objects)  # type: ignore[arg-type]
    try:
        for _ in serving(api):
            _, ana = api.account("ana")
            assert import_traces(ana, "t1").status_code == 200
            model = ana.post(RM, json={"name": "m", "trace_ids": ["t1"]}).json()
            succeed(store, objects, model["id"], tmp_path)
            assert ana.get(f"{RM}/{model['id']}/weights").status_code == 200
            viewer = api.client()
            key = ana.headers["Authorization"].split()[1]
            assert viewer.post("/ui/login", data={"api_key": key}).status_code == 303
            server.stop()
            assert_retryable(ana.get(f"{RM}/{model['id']}/weights"))
            detail = ana.get(f"{RM}/{model['id']}/weights").json()["detail"]
            # The endpoint's host and port are the operator's (the server log), not the client's.
            assert "object store" in detail and f":{port}" not in detail and host not in detail
            # The viewer's Download weights answers with a page that says so, not the JSON.
            page = viewer.get(f"/ui/reward-models/{model['id']}/weights")
            assert page.status_code == 503 and page.headers["content-type"].startswith(
                "text/html") and "object store is unavailable" in page.text
            assert int(page.headers["Retry-After"]) >= 1 and f":{port}" not in page.text
    finally:
        server.stop()


@pytest.mark.parametrize("store", ["sqlite"], indirect=True)
def test_a_bug_is_a_one_line_500_without_a_traceback(api: Api, monkeypatch) -> None:
    from stash_pipeline.services import reward_models

    def broken(*_args, **_kwargs):
        raise RuntimeError("a server-side detail\nTraceback-like second line")

    monkeypatch.setattr(reward_models, "list_models", broken)
    _, ana = api.account("ana")
    response = ana.get(RM)
    assert response.status_code == 500
    assert response.json() == {"detail": "internal error: the server failed to answer this "
                                         "request; the error is logged"}
