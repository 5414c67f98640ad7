"""Admission, not abandonment: the scoring server refuses at admission (503 with Retry-After, or
422 for what no request may ask) instead of timing out work it computed; a request whose client
left, at the API or at the server, is taken out of the queue unread; an expected refusal logs no
traceback."""

from __future__ import annotations

import json
import socket
from urllib.parse import urlsplit

import pytest

from stash_pipeline.worker.serving import Engine
from stash_pipeline_tests.support.serving_helpers import (
    LONG_TEXT,
    Api,
    Deployment,
    api_server,
    conversation,
    import_conversations,
    model_route,
    scoring_server,
    succeeded_model,
)
from stash_pipeline_tests.support.waiting import REQUEST_S, wait_until

pytestmark = pytest.mark.slow



def open_post(url: str, path: str, body: dict, key: str) -> socket.socket:
    """A POST sent on a socket of its own, its answer not read: the test closes it (the client
    leaves) when it chooses."""
    where = urlsplit(url)
    data = json.dumps(body).encode()
    sock = socket.create_connection((where.hostname, where.port))
    sock.sendall((f"POST {path} HTTP/1.1\r\nHost: {where.netloc}\r\n"
                  f"Authorization: Bearer {key}\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {len(data)}\r\n\r\n").encode() + data)
    return sock


def assert_no_traceback(capfd, caplog) -> None:
    assert "Traceback" not in capfd.readouterr().err
    assert [r.getMessage() for r in caplog.records if r.exc_info] == []


def test_a_busy_server_refuses_at_once_and_drops_what_a_departed_client_asked(
        served: Deployment, checkpoints, capfd, caplog):
    """The engine holds one request (it gathers for an hour, and its tokens in flight are full):
    another is 503 with Retry-After at once, through the API; the first one's client leaves the
    API, which closes its call, and the server takes the request out unread."""
    ana, client = served.account("ana")
    import_conversations(client, conversation("t1"))
    model_id = succeeded_model(served, client, ana, checkpoints["personal"], ["t1"])
    key = client.headers["Authorization"].split()[1]
    body = {"conversation": conversation("t1")}
    store, objects = served.api.store, served.api.objects
    engine = Engine(gather_s=3600.0, max_tokens_in_flight=1)
    with scoring_server(store, objects, engine=engine) as (scoring_url, _, registry):
        assert registry.ready(model_id, REQUEST_S).state == "ready"
        with api_server(store, objects, scoring_url) as url:
            waiting = open_post(url, model_route(model_id), body, key)
            wait_until(lambda: engine.tokens_in_flight > 0, timeout_s=REQUEST_S,
                       what="the first request to be admitted")
            busy = Api(url, store, objects).client(key).post(model_route(model_id), json=body)
            assert busy.status_code == 503, busy.text
            assert busy.json()["retryable"] is True and "busy" in busy.json()["detail"]
            assert 1 <= int(busy.headers["Retry-After"]) <= 60
            waiting.close()
            wait_until(lambda: engine.stats.cancelled == 1, timeout_s=REQUEST_S,
                       what="the departed client's request to leave the queue")
    assert engine.tokens_in_flight == 0
    assert engine.stats.as_dict() | {"tokens": 0} == {
        "requests": 0, "batches": 0, "forwards": 0, "tokens": 0, "largest_batch": 0,
        "refused": 1, "cancelled": 1}
    assert_no_traceback(capfd, caplog)


def test_what_no_request_may_ask_is_422_naming_the_field(served: Deployment, checkpoints,
                                                         capfd, caplog):
    """A conversation longer than the window, whose every action would take more tokens than a
    request may need: 422 (whatever the load), with the way out: the whole reward only, which is
    one forward of the window (256 tokens here)."""
    ana, client = served.account("ana")
    import_conversations(client, conversation("t1"))
    model_id = succeeded_model(served, client, ana, checkpoints["personal"], ["t1"])
    key = client.headers["Authorization"].split()[1]
    store, objects = served.api.store, served.api.objects
    trace = conversation("t2", text=LONG_TEXT)
    with scoring_server(store, objects, engine=Engine(max_request_tokens=300)) as (
            scoring_url, engine, _):
        with api_server(store, objects, scoring_url) as url:
            api = Api(url, store, objects).client(key)
            large = api.post(model_route(model_id), json={"conversation": trace})
            assert large.status_code == 422, large.text
            assert large.json()["field"] == "conversation"
            assert "whole reward only" in large.json()["detail"]
            whole = api.post(model_route(model_id), json={"conversation": trace,
                                                          "actions": False})
            assert whole.status_code == 200, whole.text
    assert engine.stats.refused == 1 and engine.stats.forwards == 1
    assert_no_traceback(capfd, caplog)
