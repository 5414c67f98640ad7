"""The API served by uvicorn on a loopback port, over the real store (SQLite and PostgreSQL).

One server per module and database: it starts on a database of its own and a local object store
whose signed download URLs point at that server, and every test begins with empty tables and no
objects (the ``store`` fixture here is the served one, emptied). Clients are httpx over real HTTP.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from stash_pipeline.api import create_app
from stash_pipeline.objects import LocalObjectStore, UrlSigner
from stash_pipeline.store import Store, schema
from stash_pipeline_tests.support.api_helpers import (
    SETTINGS,
    Api,
    loopback_socket,
    module_store,
    serve,
    serve_again,
)

SHORT_SQL_TIMEOUT_S = 1.0


@pytest.fixture(scope="module",
                params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def served(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    """The module's server, on SQLite (a file of its own) or the session's PostgreSQL database."""
    folder = tmp_path_factory.mktemp("api")
    with module_store(request, folder) as store:
        sock = loopback_socket()
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        objects = LocalObjectStore(folder / "objects", api_url=url, signer=UrlSigner(b"k" * 32))
        for _ in serve(create_app(store, objects, SETTINGS), sock):
            yield Api(url, store, objects)


@pytest.fixture
def store(served: Api) -> Store:
    """The served store with empty tables and an empty object store: each test starts afresh."""
    with served.store.transaction() as connection:
        for table in reversed(schema.metadata.sorted_tables):
            connection.execute(table.delete())
    for child in served.objects.root.iterdir():
        shutil.rmtree(child) if child.is_dir() else child.unlink()
    return served.store


@pytest.fixture
def api(served: Api, store: Store) -> Api:
    return served


@pytest.fixture
def short_sql_timeout(api: Api, tmp_path: Path) -> Iterator[Api]:
    """The module's store served again with a 1 s statement timeout, for the tests of the timeout
    itself (every other server's is one load never reaches: ``SETTINGS``)."""
    settings = dataclasses.replace(SETTINGS, sql_timeout_s=SHORT_SQL_TIMEOUT_S)
    with serve_again(api.store, tmp_path, settings) as (served, _):
        yield served
