"""The server's read timeouts and connection limit (api.server), over raw loopback sockets.

Short limits here (about a second); every loop is bounded, and a connection counts as closed when
the server ends it (EOF or reset), measured from when the client began.
"""

from __future__ import annotations

import dataclasses
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from stash_pipeline.api import create_app
from stash_pipeline.api.settings import ServerSettings
from stash_pipeline.objects import LocalObjectStore, UrlSigner
from stash_pipeline.services import accounts
from stash_pipeline.store import Store
from stash_pipeline_tests.support.api_helpers import SETTINGS, loopback_socket, serve
from stash_pipeline_tests.support.waiting import REQUEST_S, wait_until

LIMITS = ServerSettings(header_timeout_s=1.0, body_timeout_s=1.5, idle_timeout_s=1.0,
                        max_connections=3)
SLACK_S = 4.0  # a loaded machine's scheduling delay on top of a timeout


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    store = Store(f"sqlite:///{tmp_path / 'stash.db'}")
    yield store
    store.dispose()


@pytest.fixture
def key(store: Store, address: tuple[str, int]) -> str:
    return accounts.create(store, "ana")[1]


@pytest.fixture
def address(store: Store, tmp_path: Path) -> Iterator[tuple[str, int]]:
    sock = loopback_socket()
    host, port = sock.getsockname()
    objects = LocalObjectStore(tmp_path / "objects", api_url=f"http://{host}:{port}",
                               signer=UrlSigner(b"k" * 32))
    for _ in serve(create_app(store, objects, SETTINGS), sock, LIMITS):
        yield host, port


def closed_by_server(conn: socket.socket, timeout_s: float) -> tuple[bool, bytes]:
    """Read until the server closes (True) or ``timeout_s`` passes (False); what it sent."""
    received = b""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        conn.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = conn.recv(65536)
        except TimeoutError:
            break
        except ConnectionResetError:
            return True, received
        if not chunk:
            return True, received
        received += chunk
    return False, received


def trickle(conn: socket.socket, pieces: list[bytes], every_s: float, until_s: float) -> float:
    """Send ``pieces`` one by one every ``every_s`` until the server closes or ``until_s`` passes;
    returns when it stopped accepting (seconds from the start)."""
    started = time.monotonic()
    for piece in pieces:
        if time.monotonic() - started > until_s:
            break
        try:
            conn.sendall(piece)
        except (BrokenPipeError, ConnectionResetError):
            break
        conn.settimeout(every_s)
        try:
            if conn.recv(65536, socket.MSG_PEEK) == b"":
                break
        except TimeoutError:
            pass
        except ConnectionResetError:
            break
    return time.monotonic() - started


def test_a_client_trickling_its_headers_is_disconnected(address: tuple[str, int]) -> None:
    with socket.create_connection(address) as conn:
        started = time.monotonic()
        pieces = [b"GET /api/v1/account HTTP/1.1\r\nHost: x\r\n"] + [
            f"X-Slow-{i}: y\r\n".encode() for i in range(200)]
        trickle(conn, pieces, every_s=0.1, until_s=LIMITS.header_timeout_s + SLACK_S)
        closed, _ = closed_by_server(conn, 2.0)
        elapsed = time.monotonic() - started
    assert closed and elapsed < LIMITS.header_timeout_s + SLACK_S, elapsed


def test_a_connection_that_sends_nothing_is_closed(address: tuple[str, int]) -> None:
    with socket.create_connection(address) as conn:
        started = time.monotonic()
        closed, _ = closed_by_server(conn, LIMITS.header_timeout_s + SLACK_S)
        assert closed and time.monotonic() - started < LIMITS.header_timeout_s + SLACK_S


def test_a_client_trickling_its_body_gets_408_and_is_disconnected(
        address: tuple[str, int], key: str) -> None:
    with socket.create_connection(address) as conn:
        started = time.monotonic()
        head = (f"POST /api/v1/traces HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
                "Content-Type: application/x-ndjson\r\nContent-Length: 100000\r\n\r\n")
        trickle(conn, [head.encode()] + [b" "] * 500, every_s=0.1,
                until_s=LIMITS.body_timeout_s + SLACK_S)
        closed, received = closed_by_server(conn, 2.0)
        elapsed = time.monotonic() - started
    assert closed and elapsed < LIMITS.body_timeout_s + SLACK_S, elapsed
    assert received.startswith(b"HTTP/1.1 408 Request Timeout"), received[:200]
    assert b"did not arrive within 1.5 s" in received


def test_300_silent_connections_make_room_for_a_request(address: tuple[str, int]) -> None:
    """Past the limit (3 here), each new connection closes the one that has waited longest
    without a request: 300 that say nothing cannot keep a client out until they time out."""
    silent = [socket.create_connection(address) for _ in range(300)]
    try:
        started = time.monotonic()
        response = httpx.get(f"http://{address[0]}:{address[1]}/openapi.json", timeout=30)
        assert response.status_code == 200
        # Served before the header timeout could have closed a single silent connection.
        assert time.monotonic() - started < LIMITS.header_timeout_s
        closed = [closed_by_server(conn, 0.5)[0] for conn in silent[:-LIMITS.max_connections]]
        assert all(closed)
    finally:
        for conn in silent:
            conn.close()


def test_past_the_limit_with_every_request_in_progress_a_new_connection_gets_503(
        store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Connections whose requests are in progress (imports whose bodies are still arriving) are
    never closed to make room: the new connection is answered 503 with Retry-After at once, and
    closed."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))  # where the server writes the bodies
    sock = loopback_socket()
    address = sock.getsockname()
    objects = LocalObjectStore(tmp_path / "objects", api_url="http://x",
                               signer=UrlSigner(b"k" * 32))
    patient = dataclasses.replace(LIMITS, body_timeout_s=120.0)
    head = (b"POST /api/v1/traces HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer KEY\r\n"
            b"Content-Type: application/x-ndjson\r\nContent-Length: 100000\r\n\r\n")
    for _ in serve(create_app(store, objects, SETTINGS), sock, patient):
        key = accounts.create(store, "ana")[1]
        head = head.replace(b"KEY", key.encode())
        busy = [socket.create_connection(address) for _ in range(LIMITS.max_connections)]
        try:
            for conn in busy:
                conn.sendall(head + b" ")
            wait_until(lambda: len(list(folder.iterdir())) == len(busy), timeout_s=REQUEST_S,
                       what="the imports to be in progress")
            with socket.create_connection(address) as extra:
                started = time.monotonic()
                closed, received = closed_by_server(extra, LIMITS.header_timeout_s + SLACK_S)
                assert closed and time.monotonic() - started < LIMITS.header_timeout_s
            assert received.startswith(b"HTTP/1.1 503 Service Unavailable"), received[:200]
            assert b"retry-after: 1" in received.lower() and b"request in progress" in received
            assert all(not closed_by_server(conn, 0.2)[0] for conn in busy)
        finally:
            for conn in busy:
                conn.close()


def test_an_idle_kept_alive_connection_is_closed(address: tuple[str, int]) -> None:
    with socket.create_connection(address) as conn:
        conn.sendall(b"GET /openapi.json HTTP/1.1\r\nHost: x\r\n\r\n")
        started = time.monotonic()
        closed, received = closed_by_server(conn, LIMITS.idle_timeout_s + SLACK_S)
    assert received.startswith(b"HTTP/1.1 200 OK")
    assert closed and time.monotonic() - started < LIMITS.idle_timeout_s + SLACK_S
