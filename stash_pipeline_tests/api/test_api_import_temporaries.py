"""No temporary file of an import outlives its request (issue 22): whether the import succeeds,
is refused, is over the limit, or the client goes away halfway through the body."""

from __future__ import annotations

import socket
import tempfile
from pathlib import Path

import httpx
import pytest

from stash_pipeline_tests.support.api_helpers import SETTINGS, Api, import_traces
from stash_pipeline_tests.support.waiting import REQUEST_S, wait_until

TRACES = "/api/v1/traces"


@pytest.fixture
def temporaries(tmp_path: Path, monkeypatch) -> Path:
    """The server's temporary folder (it runs in this process), empty to start with."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def left_behind(folder: Path) -> list[str]:
    """What is still there once the server finished the request: nothing, once it removed its
    temporaries (awaited, up to a request's bound); else what it left."""
    try:
        wait_until(lambda: not any(folder.iterdir()), timeout_s=REQUEST_S,
                   what="the request's temporaries to be removed")
    except AssertionError:
        pass
    return sorted(p.name for p in folder.iterdir())


def test_every_kind_of_import_request_leaves_no_temporary(api: Api, temporaries: Path) -> None:
    _, ana = api.account("ana")
    assert import_traces(ana, "t1").status_code == 200
    assert left_behind(temporaries) == []
    refused = ana.post(TRACES, content=b'{"id": "t2", "messages": "nope"}\n',
                       headers={"Content-Type": "application/x-ndjson"})
    assert refused.status_code == 422
    assert left_behind(temporaries) == []

    def too_large():  # chunked: no Content-Length, counted as it arrives
        for _ in range(SETTINGS.max_import_bytes // 65536 + 2):
            yield b" " * 65536

    assert ana.post(TRACES, content=too_large()).status_code == 413
    assert left_behind(temporaries) == []


def test_a_client_gone_halfway_through_the_body_leaves_no_temporary(api: Api,
                                                                    temporaries: Path) -> None:
    account_id, ana = api.account("ana")
    key = ana.headers["Authorization"]
    host, port = httpx.URL(api.url).host, httpx.URL(api.url).port
    with socket.create_connection((host, port)) as client:
        client.sendall(f"POST {TRACES} HTTP/1.1\r\nHost: {host}\r\nAuthorization: {key}\r\n"
                       "Content-Type: application/x-ndjson\r\nContent-Length: 100000\r\n\r\n"
                       .encode() + b"x" * 5000)
        wait_until(lambda: any(temporaries.iterdir()), timeout_s=REQUEST_S,
                   what="the server to begin writing the body")
    assert left_behind(temporaries) == []
    assert api.store.trace_ids(owner=account_id) == []
