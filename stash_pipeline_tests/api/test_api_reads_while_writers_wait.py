"""Reads answer while dozens of writers wait for a lock (both databases).

The test holds the lock every rating write needs (SQLite's write lock; on PostgreSQL an EXCLUSIVE
lock on ``ratings``, which blocks writes and lets reads through), sends 45 ratings, and waits until
the server holds all of them (eight in threads waiting for the lock, the rest waiting for a write
slot on the event loop). Then the API's and the viewer's reads must answer while every writer is
still waiting: none has been answered yet. Once the lock goes, every writer succeeds.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sqlite3
import threading
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from stash_pipeline.api import create_app
from stash_pipeline.objects import LocalObjectStore, UrlSigner
from stash_pipeline.store import Store
from stash_pipeline_tests.support.api_helpers import (
    SETTINGS,
    Api,
    import_traces,
    loopback_socket,
    serve,
)
from stash_pipeline_tests.support.waiting import PROCESS_EXIT_S, wait_until

WRITERS = 45
WRITE_SLOTS = 8


@pytest.fixture
def own_server(api: Api, tmp_path) -> Iterator[tuple[Api, object]]:
    """A server of the test's own (its app's write slots are read) on the module's store."""
    sock = loopback_socket()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    objects = LocalObjectStore(tmp_path / "objects", api_url=url, signer=UrlSigner(b"k" * 32))
    app = create_app(api.store, objects,
                     dataclasses.replace(SETTINGS, write_concurrency=WRITE_SLOTS))
    for _ in serve(app, sock):
        yield Api(url, api.store, objects), app


@contextlib.contextmanager
def writers_blocked(store: Store) -> Iterator[None]:
    if store.engine.dialect.name == "sqlite":
        holder = sqlite3.connect(store.engine.url.database, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # the write lock; WAL readers go on reading
        try:
            yield
        finally:
            holder.rollback()
            holder.close()
        return
    with store.engine.connect() as connection, connection.begin():
        connection.execute(sa.text("LOCK TABLE ratings IN EXCLUSIVE MODE"))
        yield


def test_reads_answer_while_45_writers_wait_for_a_lock(own_server) -> None:
    api, app = own_server
    _, client = api.account("ana")
    key = client.headers["Authorization"].split()[1]
    assert import_traces(client, "t1").status_code == 200
    answered: list[int] = []

    def rate(n: int) -> None:
        with api.client(key) as own:
            response = own.post("/api/v1/traces/t1/ratings",
                                json={"value": n % 3 - 1, "author": f"writer{n}"}, timeout=600)
            answered.append(response.status_code)

    threads = [threading.Thread(target=rate, args=(n,)) for n in range(WRITERS)]
    with writers_blocked(api.store):
        for thread in threads:
            thread.start()

        def all_waiting() -> bool:
            slots = getattr(app.state, "write_slots", None)
            return slots is not None and slots.value == 0 and \
                slots.statistics().tasks_waiting == WRITERS - WRITE_SLOTS

        wait_until(all_waiting, timeout_s=PROCESS_EXIT_S, what="45 writers waiting")
        reads = [client.get("/api/v1/account"), client.get("/api/v1/traces"),
                 client.get("/api/v1/traces/t1")]
        viewer = api.client()
        reads.append(viewer.post("/ui/login", data={"api_key": key, "next": "/ui/traces"}))
        reads.append(viewer.get("/ui/traces"))
        assert [r.status_code for r in reads] == [200, 200, 200, 303, 200], \
            [r.text[:200] for r in reads]
        assert answered == [], "a writer was answered while the lock was still held"
    for thread in threads:
        thread.join(timeout=PROCESS_EXIT_S)
    assert answered == [201] * WRITERS
    ratings = api.store.feedback_for(["t1"])
    assert len(ratings) == WRITERS


def test_which_requests_take_a_write_slot() -> None:
    from stash_pipeline.api.write_slots import writes

    assert writes("POST", "/api/v1/traces/t1/ratings") and writes("PATCH", "/api/v1/traces/t")
    assert writes("POST", "/ui/logout") and writes("POST", "/api/v1/feedback/")
    assert not writes("GET", "/api/v1/account") and not writes("HEAD", "/ui/traces")
    assert not writes("POST", "/api/v1/sql") and not writes("POST", "/ui/login")
    assert not writes("POST", "/api/v1/traces")  # the import takes its slot after its body

