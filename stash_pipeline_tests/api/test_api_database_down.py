"""The database stopped under a running API and CLI (issue 22): every route answers 503 with
Retry-After, the CLI says so in one line, and once the database is back both work again.

The database is a throwaway PostgreSQL server of this test's own (initdb and pg_ctl from
/usr/lib/postgresql/*/bin, as the postgres user when the tests run as root), on its own port, so
stopping it disturbs no other test.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from stash_pipeline.api import create_app
from stash_pipeline.objects import LocalObjectStore, UrlSigner
from stash_pipeline.store import Store
from stash_pipeline_tests.support.api_helpers import (
    SETTINGS,
    Api,
    assert_retryable,
    import_traces,
    loopback_socket,
    serve,
)
from stash_pipeline_tests.support.waiting import PROCESS_EXIT_S, REQUEST_S, bound, wait_until

pytestmark = pytest.mark.postgres
REPO = Path(__file__).resolve().parents[2]


class Postgres:
    def __init__(self, folder: Path, port: int):
        self.folder, self.port = folder, port
        self.bin = Path(sorted(glob.glob("/usr/lib/postgresql/*/bin"))[-1])
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"

    def command(self, *args: str) -> None:
        runner = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*runner, *args], check=True, capture_output=True,
                       timeout=bound(PROCESS_EXIT_S))

    def start(self) -> None:
        self.command(str(self.bin / "pg_ctl"), "-D", str(self.folder / "data"), "-w", "-l",
                     str(self.folder / "log"), "-o",
                     f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1", "start")

    def stop(self) -> None:
        self.command(str(self.bin / "pg_ctl"), "-D", str(self.folder / "data"), "-w", "-m",
                     "fast", "stop")


@pytest.fixture
def postgres() -> Iterator[Postgres]:
    if not glob.glob("/usr/lib/postgresql/*/bin/initdb"):
        pytest.fail("no PostgreSQL server binaries in /usr/lib/postgresql/*/bin")
    # Not under pytest's tmp_path: its parents are private to root, the server runs as postgres.
    folder = Path(tempfile.mkdtemp(prefix="stash-pg-down-"))
    folder.chmod(0o777)
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres", "postgres")
    sock = loopback_socket()
    port = sock.getsockname()[1]
    sock.close()
    server = Postgres(folder, port)
    server.command(str(server.bin / "initdb"), "-D", str(folder / "data"), "-U", "postgres",
                   "--auth=trust", "--no-sync")
    server.start()
    try:
        yield server
    finally:
        try:
            server.stop()
        except subprocess.CalledProcessError:
            pass  # stopped by the test already
        shutil.rmtree(folder, ignore_errors=True)


def eventually_ok(call) -> httpx.Response:
    """The first requests after a restart may meet connections the pool still held: 503s. The
    first answer that is not one (asked again up to a request's bound)."""
    responses: list[httpx.Response] = []
    wait_until(lambda: responses.append(call()) or responses[-1].status_code != 503,
               timeout_s=REQUEST_S, what="an answer other than 503 after the restart",
               interval_s=0.5)
    return responses[-1]


def test_the_database_stopped_is_503_everywhere_then_it_works_again(postgres: Postgres,
                                                                    tmp_path: Path) -> None:
    store = Store(postgres.url)
    store.migrate()
    objects = LocalObjectStore(tmp_path / "objects", api_url="http://x",
                               signer=UrlSigner(b"k" * 32))
    sock = loopback_socket()
    api = Api(f"http://127.0.0.1:{sock.getsockname()[1]}", store, objects)
    try:
        for _ in serve(create_app(store, objects, SETTINGS), sock):
            _, ana = api.account("ana")
            assert import_traces(ana, "t1").status_code == 200
            key = ana.headers["Authorization"].split()[1]
            signed_in = api.client()
            assert signed_in.post("/ui/login", data={"api_key": key}).status_code == 303
            postgres.stop()
            # The probe's route reads no database: the process is alive and answers the others.
            assert api.client().get("/health").json() == {"status": "ok"}
            for response in (ana.get("/api/v1/account"), ana.get("/api/v1/traces"),
                             ana.get("/api/v1/traces/t1"), import_traces(ana, "t2"),
                             ana.post("/api/v1/traces/t1/ratings", json={"value": 1}),
                             ana.get("/api/v1/rm/reward-models")):
                assert_retryable(response)
                detail = response.json()["detail"]
                assert "database is unavailable" in detail
                assert str(postgres.port) not in detail and "127.0.0.1" not in detail, detail
            # The viewer answers with pages: its login, and a signed-in page.
            for page in (api.client().post("/ui/login", data={"api_key": key}),
                         signed_in.get("/ui/traces")):
                assert page.status_code == 503, page.text
                assert page.headers["content-type"].startswith("text/html")
                assert "database is unavailable" in page.text
                assert str(postgres.port) not in page.text and int(page.headers["Retry-After"])

            cli = subprocess.run(
                [sys.executable, "-m", "stash_pipeline", "traces", "list"], cwd=REPO,
                capture_output=True, text=True, timeout=bound(PROCESS_EXIT_S),
                env={**os.environ, "DATABASE_URL": postgres.url,
                     "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])})
            assert cli.returncode == 2 and "Traceback" not in cli.stderr, cli.stderr
            [line] = cli.stderr.strip().splitlines()
            assert line.startswith("error: the database is unavailable") and "again" in line

            postgres.start()
            assert eventually_ok(lambda: import_traces(ana, "t2")).status_code == 200
            assert ana.get("/api/v1/traces/t2").status_code == 200
    finally:
        store.dispose()
