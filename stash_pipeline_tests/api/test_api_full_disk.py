"""A really full disk (a small tmpfs, full_disk.py) under every place the API and the CLI write: the
import's temporary folder, the SQLite store, a PostgreSQL tablespace, the local object store. Each
answers 507 (the API) or one line (the CLI), stores nothing, leaves nothing behind, and works again
once there is space."""

from __future__ import annotations

import json
import secrets
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from stash_pipeline.api import create_app
from stash_pipeline.cli import main
from stash_pipeline.core.errors import StorageFullError
from stash_pipeline.importers import read_path
from stash_pipeline.objects import (
    LocalObjectStore,
    ObjectStoreError,
    ObjectStoreFullError,
    UrlSigner,
)
from stash_pipeline.services import accounts
from stash_pipeline.store import Store
from stash_pipeline_tests.support.api_helpers import (
    SETTINGS,
    Api,
    loopback_socket,
    serve,
    trace_object,
)
from stash_pipeline_tests.support.full_disk import FILLER, contents, fill, small_disk

TRACES = "/api/v1/traces"


def body_of(count: int, prefix: str, *, text_kib: int = 4) -> bytes:
    """JSON Lines of ``count`` traces of about ``text_kib`` KiB of random text each (which no
    database compresses away)."""
    return b"".join(json.dumps(trace_object(f"{prefix}{i}", text=secrets.token_urlsafe(
        text_kib * 768))).encode() + b"\n" for i in range(count))


def assert_full(response: httpx.Response, *hidden: str) -> None:
    """507, one line that says the disk is full and names none of the server's paths."""
    assert response.status_code == 507, response.text
    detail = response.json()["detail"]
    assert "full" in detail and "nothing was stored" in detail and "\n" not in detail
    assert not any(path in detail for path in hidden), detail


def test_an_import_that_fills_the_temporary_folder_is_507_and_leaves_nothing(
        api: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with small_disk(tmp_path / "tmp", 1024) as disk:
        monkeypatch.setattr(tempfile, "tempdir", str(disk))
        owner, ana = api.account("ana")
        fill(disk, leave_kib=32)
        response = ana.post(TRACES, content=body_of(40, "t"),  # 160 KiB for 32 KiB of room
                            headers={"Content-Type": "application/x-ndjson"})
        assert_full(response, str(disk), str(tmp_path))
        assert contents(disk) == [] and api.store.trace_ids(owner=owner) == []
        (disk / FILLER).unlink()
        again = ana.post(TRACES, content=body_of(40, "t"),
                         headers={"Content-Type": "application/x-ndjson"})
        assert again.status_code == 200 and again.json()["imported"] == 40
        assert contents(disk) == []


def served(store: Store, tmp_path: Path) -> Iterator[Api]:
    sock = loopback_socket()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    objects = LocalObjectStore(tmp_path / "objects", api_url=url, signer=UrlSigner(b"k" * 32))
    for _ in serve(create_app(store, objects, SETTINGS), sock):
        yield Api(url, store, objects)


def check_a_full_database(store: Store, disk: Path, tmp_path: Path,
                          capsys: pytest.CaptureFixture[str],
                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The store, the CLI and the API (started before the disk filled) on a database whose disk
    is full; then, with space again, the API's import succeeds."""
    lines = tmp_path / "traces.jsonl"
    lines.write_bytes(body_of(60, "big", text_kib=8))  # 480 KiB of traces
    store.import_traces(read_path(lines, owner="ana"))
    before = store.trace_ids()
    key = accounts.issue_key(store, "ana")
    lines.write_bytes(body_of(60, "more", text_kib=8))
    request = body_of(25, "api", text_kib=8)  # under the test API's 256 KiB body limit
    for api in served(store, tmp_path):
        fill(disk, leave_kib=64)
        with pytest.raises(StorageFullError, match="the disk that holds the database is full"):
            store.import_traces(read_path(lines, owner="ana"))
        assert store.trace_ids() == before

        monkeypatch.setenv("DATABASE_URL", store.url)
        capsys.readouterr()
        assert main(["import", str(lines), "--owner", "ana"]) == 2
        captured = capsys.readouterr()
        [line] = captured.err.strip().splitlines()
        assert line.startswith("error: the disk that holds the database is full"), captured.err
        assert "Traceback" not in captured.err and store.trace_ids() == before

        with api.client(key) as ana:
            response = ana.post(TRACES, content=request,
                                headers={"Content-Type": "application/x-ndjson"})
            assert_full(response, str(disk), str(tmp_path))
            assert store.trace_ids() == before
            (disk / FILLER).unlink()
            again = ana.post(TRACES, content=request,
                             headers={"Content-Type": "application/x-ndjson"})
            assert again.status_code == 200 and again.json()["imported"] == 25, again.text


def test_sqlite_on_a_full_disk(tmp_path: Path, capsys, monkeypatch) -> None:
    with small_disk(tmp_path / "db", 8 * 1024) as disk:
        store = Store(f"sqlite:///{disk / 'stash.db'}")
        try:
            store.migrate()
            check_a_full_database(store, disk, tmp_path, capsys, monkeypatch)
        finally:
            store.dispose()


@pytest.fixture
def full_postgres(postgres_store: Store) -> Iterator[tuple[Store, Path]]:
    """A database of its own whose tablespace is a small tmpfs (the server's WAL stays on its
    own disk, so only this database's tables run out of room)."""
    folder = Path(tempfile.mkdtemp(prefix="stash-pg-full-"))
    folder.chmod(0o755)  # the server runs as postgres
    name = f"stash_full_{uuid.uuid4().hex[:10]}"
    server = postgres_store.engine.execution_options(isolation_level="AUTOCOMMIT")
    with small_disk(folder / "tablespace", 32 * 1024, owner="postgres") as disk:
        with server.connect() as connection:
            connection.exec_driver_sql(f"CREATE TABLESPACE {name} LOCATION '{disk}'")
            connection.exec_driver_sql(f'CREATE DATABASE "{name}" TABLESPACE {name}')
        store = Store(f"{postgres_store.url.rsplit('/', 1)[0]}/{name}")
        try:
            store.migrate()
            yield store, disk
        finally:
            store.dispose()
            with server.connect() as connection:
                connection.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                connection.exec_driver_sql(f"DROP TABLESPACE IF EXISTS {name}")
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.postgres
def test_postgresql_on_a_full_disk(full_postgres, tmp_path: Path, capsys, monkeypatch) -> None:
    store, disk = full_postgres
    check_a_full_database(store, disk, tmp_path, capsys, monkeypatch)


def test_the_local_object_store_on_a_full_disk(tmp_path: Path) -> None:
    with small_disk(tmp_path / "objects", 1024) as disk:
        objects = LocalObjectStore(disk)
        source = tmp_path / "reward-model.tar.gz"
        source.write_bytes(b"\1" * 200_000)
        fill(disk, leave_kib=64)
        with pytest.raises(ObjectStoreFullError, match="no space left") as caught:
            objects.put_file("reward-models/m/attempt-1/reward-model.tar.gz", source)
        assert isinstance(caught.value, ObjectStoreError)
        assert [p for p in contents(disk) if (disk / p).is_file()] == []
        (disk / FILLER).unlink()
        uri = objects.put_file("reward-models/m/attempt-1/reward-model.tar.gz", source)
        assert objects.exists(uri)
