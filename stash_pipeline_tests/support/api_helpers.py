"""Helpers of the API suite: a uvicorn server on a loopback port, accounts, traces, checkpoints."""

from __future__ import annotations

import io
import json
import socket
import ssl
import tarfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from stash_pipeline.api import create_app, server as api_server
from stash_pipeline.api.settings import ApiSettings, ServerSettings
from stash_pipeline.objects import LocalObjectStore, UrlSigner, reward_model_checkpoint_key
from stash_pipeline.services import accounts
from stash_pipeline.store import Store
from stash_pipeline_tests.support.waiting import (
    PATIENT_S,
    REQUEST_S,
    SERVER_START_S,
    bound,
    wait_until,
)

# One TLS context for every client of the suite. httpx builds one per client by default, reading
# this machine's whole CA bundle each time (45 ms of CPU), for servers here that speak plain HTTP.
TLS = ssl.create_default_context()
# Small limits, so tests reach them; a statement timeout load never reaches (the timeout's own
# tests serve the store again with a short one: ``serve_again``).
SETTINGS = ApiSettings(max_import_bytes=256 * 1024, max_json_bytes=64 * 1024, sql_max_rows=5,
                       sql_timeout_s=bound(PATIENT_S))


@dataclass
class Api:
    url: str
    store: Store
    objects: LocalObjectStore

    def client(self, key: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=bound(REQUEST_S),
                            verify=TLS)

    def account(self, name: str, *, before_rollout: bool = False) -> tuple[str, httpx.Client]:
        """A new account: its id and a client that sends its key."""
        account, key = accounts.create(self.store, name,
                                       reward_models_enabled=not before_rollout)
        return account.id, self.client(key)


@contextmanager
def module_store(request, folder: Path) -> Iterator[Store]:
    """A module's store for ``request.param``: SQLite in a file of its own under ``folder``
    (disposed afterwards), or the session's PostgreSQL database with its tables emptied first, as
    a new SQLite file is: a server the module starts on it may read it at once (the scoring
    server looks up the current release), before any test empties it, and must not find what an
    earlier module's tests left."""
    if request.param != "sqlite":
        from stash_pipeline.store import schema

        store = request.getfixturevalue("postgres_store")
        with store.transaction() as connection:
            for table in reversed(schema.metadata.sorted_tables):
                connection.execute(table.delete())
        yield store
        return
    store = Store(f"sqlite:///{folder / 'stash.db'}")
    store.migrate()
    try:
        yield store
    finally:
        store.dispose()


# The server's timeouts where a test does not exercise them (test_api_server_limits does): a
# client's kept-alive connection is never closed between two of its requests, however long a
# loaded machine takes between them, nor its request head cut short.
LIMITS = ServerSettings(header_timeout_s=bound(PATIENT_S), idle_timeout_s=bound(PATIENT_S))


def serve(app, sock: socket.socket, limits: ServerSettings = LIMITS) -> Iterator[None]:
    """Serve ``app`` on ``sock`` as ``stash-pipeline api`` does (api.server), with ``limits``."""
    server = uvicorn.Server(api_server.config(app, limits, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    wait_until(lambda: server.started or not thread.is_alive(), timeout_s=SERVER_START_S,
               what="uvicorn to start")
    if not server.started:
        raise RuntimeError("uvicorn exited before it started")
    try:
        yield
    finally:
        server.should_exit = True
        thread.join(timeout=bound(SERVER_START_S))


@contextmanager
def serve_again(store: Store, folder: Path, settings: ApiSettings) -> Iterator[tuple[Api, Any]]:
    """A second server on ``store`` with other ``settings`` (its local objects under ``folder``):
    the served ``Api`` and its app (whose ``state`` a test may read)."""
    sock = loopback_socket()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    objects = LocalObjectStore(folder / "objects", api_url=url, signer=UrlSigner(b"k" * 32))
    app = create_app(store, objects, settings)
    for _ in serve(app, sock):
        yield Api(url, store, objects), app


def loopback_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


def trace_object(trace_id: str, *, text: str = "hello", turns: int = 1) -> dict:
    """An OpenAI-format trace object with a tool call per turn."""
    messages = [{"role": "system", "content": "Follow the refund policy."},
                {"role": "user", "content": text}]
    for turn in range(turns):
        messages += [
            {"role": "assistant", "content": f"Looking {turn}", "tool_calls": [
                {"id": f"c{turn}", "type": "function",
                 "function": {"name": "get_order", "arguments": json.dumps({"n": turn})}}]},
            {"role": "tool", "tool_call_id": f"c{turn}", "content": "{\"ok\": true}"},
        ]
    messages.append({"role": "assistant", "content": "Done."})
    return {"id": trace_id, "agent": "support", "domain": "retail",
            "metadata": {"task_id": "t1"}, "messages": messages}


def import_traces(client: httpx.Client, *ids: str) -> httpx.Response:
    body = "\n".join(json.dumps(trace_object(i)) for i in ids) + "\n"
    return client.post("/api/v1/traces", content=body,
                       headers={"Content-Type": "application/x-ndjson"})


def checkpoint_archive() -> bytes:
    """A small reward-model.tar.gz with the seed's layout."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in (("config.json", b"{}"), ("reward_stats.json", b"{\"mean\": 0}")):
            info = tarfile.TarInfo(f"reward-model/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def succeed(store: Store, objects, model_id: str, tmp_path: Path) -> None:
    """Run a queued model to success as the pipeline would, with a checkpoint in the store."""
    archive = tmp_path / f"{model_id}.tar.gz"
    archive.write_bytes(checkpoint_archive())
    attempt = store.mark_running(model_id)
    uri = objects.put_file(reward_model_checkpoint_key(model_id, attempt), archive)
    store.mark_succeeded(model_id, metrics={"train_pairs": 2}, checkpoint_uri=uri)


def assert_retryable(response: httpx.Response) -> None:
    """A 503 that says to retry: Retry-After, `retryable`, one line without a traceback."""
    assert response.status_code == 503, response.text
    body = response.json()
    assert int(response.headers["Retry-After"]) >= 1
    assert body["retryable"] is True and "retry" in body["detail"]
    assert "\n" not in body["detail"] and "Traceback" not in body["detail"]
