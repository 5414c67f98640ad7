"""Throughput of an import through the API: POST /api/v1/traces with a body of --mib MiB.

Small OpenAI-format traces (about 470 bytes each, the shape of the issue-22 probe's 98 MiB body of
220,169 traces) as JSON Lines, posted over loopback HTTP to uvicorn serving the app over a fresh
SQLite file (or a fresh PostgreSQL database with --server). Prints the time of the whole request
(receiving the body, reading and storing every trace in one transaction); the last line is
``api_import_mib_per_s: N``. docs/api.md turns it into the time of a body near the limit.

    .venv/bin/python benchmarks/api_import.py [--mib 10] [--server URL]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import sqlalchemy as sa

# The repository root, for the API suite's helpers (stash_pipeline_tests.support.api_helpers).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from stash_pipeline.api import create_app
from stash_pipeline.api.settings import ApiSettings
from stash_pipeline.objects import LocalObjectStore, UrlSigner
from stash_pipeline.store import Store
from stash_pipeline_tests.support.api_helpers import Api, loopback_socket, serve, trace_object


def body_of(mib: float) -> tuple[bytes, int]:
    lines, size, limit = [], 0, int(mib * 1024 * 1024)
    while size < limit:
        line = (json.dumps(trace_object(f"t{len(lines)}")) + "\n").encode()
        lines.append(line)
        size += len(line)
    return b"".join(lines), len(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=float, default=10.0)
    parser.add_argument("--server", help="a PostgreSQL server URL (default: a SQLite file)")
    args = parser.parse_args()
    body, traces = body_of(args.mib)
    print(f"body: {len(body) / 2**20:.1f} MiB, {traces} traces")

    folder = Path(tempfile.mkdtemp(prefix="stash-bench-api-"))
    os.environ["STASH_HOME"] = str(folder / "home")  # the Dagster record of the import goes here
    os.environ.pop("DAGSTER_HOME", None)
    name = f"stash_bench_{uuid.uuid4().hex[:10]}"
    admin = None
    if args.server:
        admin = sa.create_engine(f"{args.server}/postgres", isolation_level="AUTOCOMMIT")
        with admin.connect() as connection:
            connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
        store = Store(f"{args.server}/{name}")
    else:
        store = Store(f"sqlite:///{folder / 'stash.db'}")
    store.migrate()
    sock = loopback_socket()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    objects = LocalObjectStore(folder / "objects", api_url=url, signer=UrlSigner(b"k" * 32))
    api = Api(url, store, objects)
    settings = ApiSettings(max_import_bytes=max(len(body) + 1, 100 * 2**20))
    try:
        for _ in serve(create_app(store, objects, settings), sock):
            _, client = api.account("bench")
            client.timeout = httpx.Timeout(3600)
            start = time.perf_counter()
            response = client.post("/api/v1/traces", content=body,
                                   headers={"Content-Type": "application/x-ndjson"})
            seconds = time.perf_counter() - start
            assert response.status_code == 200, response.text
            assert response.json()["traces"] == traces
    finally:
        store.dispose()
        shutil.rmtree(folder, ignore_errors=True)
        if admin is not None:
            with admin.connect() as connection:
                connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            admin.dispose()
    print(f"seconds: {seconds:.1f}")
    print(f"traces_per_s: {traces / seconds:.0f}")
    print(f"api_import_mib_per_s: {len(body) / 2**20 / seconds:.2f}")


if __name__ == "__main__":
    main()
