"""The server's read timeouts and connection limit (api.server), over raw loopback sockets.

Each test exercises one limit: that timeout is short (a second) and every other is one load never
reaches (``PATIENT_S``), so what closed a connection is known. A test asserts the event (the
server closed the connection, silently or with its answer) and that it came no sooner than the
timeout, measured from before the client connected: a lower bound, which load cannot break. No
test asserts how soon after the timeout the server acted.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import socket
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import httpx
import pytest

from stash_pipeline.api import create_app
from stash_pipeline.api.settings import ServerSettings
from stash_pipeline.objects import LocalObjectStore, UrlSigner
from stash_pipeline.services import accounts
from stash_pipeline.store import Store
from stash_pipeline_tests.support.api_helpers import SETTINGS, loopback_socket, serve
from stash_pipeline_tests.support.waiting import PATIENT_S, REQUEST_S, bound, wait_until

SHORT_S = 1.0  # the timeout a test exercises
PATIENT = ServerSettings(header_timeout_s=bound(PATIENT_S), body_timeout_s=bound(PATIENT_S),
                         idle_timeout_s=bound(PATIENT_S), max_connections=3)
Address = tuple[str, int]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    store = Store(f"sqlite:///{tmp_path / 'stash.db'}")
    yield store
    store.dispose()


@pytest.fixture
def server(store: Store, tmp_path: Path) -> Iterator[Callable[[ServerSettings], Address]]:
    """Starts the app on a loopback port with the limits given; stopped after the test."""
    with contextlib.ExitStack() as running:
        def start(limits: ServerSettings) -> Address:
            sock = loopback_socket()
            host, port = sock.getsockname()
            objects = LocalObjectStore(tmp_path / "objects", api_url=f"http://{host}:{port}",
                                       signer=UrlSigner(b"k" * 32))
            serving = serve(create_app(store, objects, SETTINGS), sock, limits)
            next(serving)
            running.callback(serving.close)
            return host, port

        yield start


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


def trickle(conn: socket.socket, pieces: Iterable[bytes], every_s: float, until_s: float) -> float:
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


def endless(first: bytes, piece: str) -> Iterator[bytes]:
    """``first``, then ``piece`` numbered 0, 1, 2, ... for as long as the client sends."""
    return itertools.chain([first], (piece.format(i).encode() for i in itertools.count()))


def test_a_client_trickling_its_headers_is_disconnected(
        server: Callable[[ServerSettings], Address]) -> None:
    address = server(dataclasses.replace(PATIENT, header_timeout_s=SHORT_S))
    started = time.monotonic()
    with socket.create_connection(address) as conn:
        trickle(conn, endless(b"GET /api/v1/account HTTP/1.1\r\nHost: x\r\n", "X-Slow-{}: y\r\n"),
                every_s=0.1, until_s=bound(REQUEST_S))
        closed, received = closed_by_server(conn, bound(REQUEST_S))
    # The header timer's close: silent, and no sooner than the timeout.
    assert closed and received == b"", received[:200]
    assert time.monotonic() - started >= SHORT_S


def test_a_connection_that_sends_nothing_is_closed(
        server: Callable[[ServerSettings], Address]) -> None:
    address = server(dataclasses.replace(PATIENT, header_timeout_s=SHORT_S))
    started = time.monotonic()
    with socket.create_connection(address) as conn:
        closed, received = closed_by_server(conn, bound(REQUEST_S))
    assert closed and received == b"", received[:200]
    assert time.monotonic() - started >= SHORT_S


def test_a_client_trickling_its_body_gets_408_and_is_disconnected(
        server: Callable[[ServerSettings], Address], store: Store) -> None:
    address = server(dataclasses.replace(PATIENT, body_timeout_s=SHORT_S))
    key = accounts.create(store, "ana")[1]
    head = (f"POST /api/v1/traces HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
            "Content-Type: application/x-ndjson\r\nContent-Length: 100000\r\n\r\n")
    started = time.monotonic()
    with socket.create_connection(address) as conn:
        trickle(conn, endless(head.encode(), " "), every_s=0.1, until_s=bound(REQUEST_S))
        closed, received = closed_by_server(conn, bound(REQUEST_S))
    assert closed and received.startswith(b"HTTP/1.1 408 Request Timeout"), received[:200]
    assert b"did not arrive within 1 s" in received
    assert time.monotonic() - started >= SHORT_S


def test_300_silent_connections_make_room_for_a_request(
        server: Callable[[ServerSettings], Address]) -> None:
    """Past the limit (3 here), each new connection closes the one that has waited longest
    without a request: 300 that say nothing cannot keep a client out until they time out. The
    header timeout here outlasts the client's wait, so a request answered at all was answered
    before any silent connection timed out, and each one closed was closed to make room."""
    limits = dataclasses.replace(PATIENT, header_timeout_s=2 * bound(REQUEST_S))
    host, port = server(limits)
    silent = [socket.create_connection((host, port)) for _ in range(300)]
    try:
        response = httpx.get(f"http://{host}:{port}/openapi.json", timeout=bound(REQUEST_S))
        assert response.status_code == 200
        closed = [closed_by_server(conn, bound(REQUEST_S))[0]
                  for conn in silent[:-limits.max_connections]]
        assert all(closed)
    finally:
        for conn in silent:
            conn.close()


def test_past_the_limit_with_every_request_in_progress_a_new_connection_gets_503(
        server: Callable[[ServerSettings], Address], store: Store, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Connections whose requests are in progress (imports whose bodies are still arriving) are
    never closed to make room: the new connection is answered 503 with Retry-After at once, and
    closed (every timeout here is one load never reaches: only the limit answers)."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))  # where the server writes the bodies
    address = server(PATIENT)
    key = accounts.create(store, "ana")[1]
    head = (f"POST /api/v1/traces HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
            "Content-Type: application/x-ndjson\r\nContent-Length: 100000\r\n\r\n").encode()
    busy = [socket.create_connection(address) for _ in range(PATIENT.max_connections)]
    try:
        for conn in busy:
            conn.sendall(head + b" ")
        wait_until(lambda: len(list(folder.iterdir())) == len(busy), timeout_s=REQUEST_S,
                   what="the imports to be in progress")
        with socket.create_connection(address) as extra:
            closed, received = closed_by_server(extra, bound(REQUEST_S))
        assert closed and received.startswith(b"HTTP/1.1 503 Service Unavailable"), \
            received[:200]
        assert b"retry-after: 1" in received.lower() and b"request in progress" in received
        assert all(not closed_by_server(conn, 0.2)[0] for conn in busy)
    finally:
        for conn in busy:
            conn.close()


def test_an_idle_kept_alive_connection_is_closed(
        server: Callable[[ServerSettings], Address]) -> None:
    address = server(dataclasses.replace(PATIENT, idle_timeout_s=SHORT_S))
    started = time.monotonic()
    with socket.create_connection(address) as conn:
        conn.sendall(b"GET /openapi.json HTTP/1.1\r\nHost: x\r\n\r\n")
        closed, received = closed_by_server(conn, bound(REQUEST_S))
    assert received.startswith(b"HTTP/1.1 200 OK"), received[:200]
    assert closed and time.monotonic() - started >= SHORT_S
