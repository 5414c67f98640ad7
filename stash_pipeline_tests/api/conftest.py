"""The API served by uvicorn on a loopback port, over the real store (SQLite and PostgreSQL).

Each test gets a fresh server on the ``store`` fixture's database and a local object store whose
signed download URLs point at that server; clients are httpx over real HTTP.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from api_helpers import SETTINGS, Api, loopback_socket, serve

from stash_pipeline.api import create_app
from stash_pipeline.objects import LocalObjectStore, UrlSigner
from stash_pipeline.store import Store


@pytest.fixture
def api(store: Store, tmp_path: Path) -> Iterator[Api]:
    sock = loopback_socket()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    objects = LocalObjectStore(tmp_path / "objects", api_url=url, signer=UrlSigner(b"k" * 32))
    yield from _serving(Api(url, store, objects), sock)


def _serving(api: Api, sock: socket.socket) -> Iterator[Api]:
    for _ in serve(create_app(api.store, api.objects, SETTINGS), sock):
        yield api


