"""Fixtures for every suite: the store on SQLite (a file per test) and the real PostgreSQL server,
and S3 on a loopback moto server.

PostgreSQL gets a fresh database per test session (``stash_test_<random>``), dropped afterwards, so
parallel runs never meet; each test starts from empty tables.
"""

from __future__ import annotations

import functools
import gc
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import boto3
import dagster as dg
import pytest
import sqlalchemy as sa
from moto.server import ThreadedMotoServer

import stash_pipeline.definitions as project_definitions
import stash_pipeline.defs.resources as project_resources
from stash_pipeline.objects import S3Settings
from stash_pipeline.store import Store, schema
from stash_pipeline.store.migration_scripts import share_revision_maps
from stash_pipeline_tests.support.dagster_storage import (
    copy_of,
    created_embedded_instance,
    created_test_instance,
)
from stash_pipeline_tests.support.object_helpers import ACCESS_KEY, REGION, SECRET_KEY
from stash_pipeline_tests.support.postgres import POSTGRES_SERVER, scratch_database

pytest_plugins = ["stash_pipeline_tests.support.module_order"]

# Under pytest-xdist (scripts/test.sh runs one worker more than cores) each worker, and every worker
# process it starts, gets its share of the cores for torch's threads: two workers with a thread
# per core each would make every OpenMP region spin against the other.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    _share = max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_name, str(_share))

# The instances tests open themselves (dg.instance_for_test) read their migration scripts once a
# process too, as the package's own instance does (store/migration_scripts.py says why).
share_revision_maps()


def pytest_collection_finish(session: pytest.Session) -> None:
    """Everything imported while collecting (torch, transformers, Dagster: millions of objects)
    leaves the garbage collector's generations, as a prefork server freezes what it loaded: each
    full collection then scans only what the tests made. The youngest generation is collected
    every 20,000 allocations rather than 700 (Dagster's events and the tests' traces churn small
    objects): a third as many collections."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 20)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    with ExitStack() as stack:
        try:
            url = stack.enter_context(scratch_database("stash_test"))
        except sa.exc.OperationalError as error:
            pytest.fail(f"PostgreSQL at {POSTGRES_SERVER} is not reachable (start it, or deselect "
                        f"with -m 'not postgres'): {error}")
        yield url


@pytest.fixture(scope="session")
def postgres_store(postgres_url: str) -> Iterator[Store]:
    store = Store(postgres_url)
    store.migrate()
    yield store
    store.dispose()


@pytest.fixture(scope="session")
def sqlite_store_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty SQLite store migrated to head, once a session: the upgrade from nothing costs
    50 ms of CPU and as much again in fsyncs, and 240 tests start from an empty store."""
    path = tmp_path_factory.mktemp("store-template") / "stash.db"
    store = Store(f"sqlite:///{path}")
    store.migrate()
    store.dispose()  # the last connection's close checkpoints the WAL into the file
    return path


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path) -> Iterator[Store]:
    if request.param == "sqlite":
        path = tmp_path / "stash.db"
        shutil.copyfile(request.getfixturevalue("sqlite_store_template"), path)
        store = Store(f"sqlite:///{path}")
        store.migrate()  # finds the schema at head, as every command's first call does
        yield store
        store.dispose()
        return
    store = request.getfixturevalue("postgres_store")
    with store.transaction() as connection:
        for table in reversed(schema.metadata.sorted_tables):
            connection.execute(table.delete())
    yield store


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def fresh_url(request: pytest.FixtureRequest, tmp_path) -> Iterator[str]:
    """The URL of a database nobody has migrated yet (on PostgreSQL, created beside the test
    session's database and dropped afterwards)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'fresh.db'}"
        return
    session: Store = request.getfixturevalue("postgres_store")
    server = session.engine.execution_options(isolation_level="AUTOCOMMIT")
    name = f"stash_fresh_{uuid.uuid4().hex[:12]}"
    with server.connect() as connection:
        connection.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        yield f"{session.url.rsplit('/', 1)[0]}/{name}"
    finally:
        with server.connect() as connection:
            connection.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def embedded_dagster_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``$STASH_HOME/dagster`` with its storage created, made once a session (dagster_storage.py
    says why): each test's STASH_HOME gets a copy."""
    return created_embedded_instance(tmp_path_factory.mktemp("dagster-template"))


@pytest.fixture(scope="session")
def test_instance_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The storage of ``dg.instance_for_test``, made once a session."""
    return created_test_instance(tmp_path_factory.mktemp("test-instance-template"))


@pytest.fixture
def use_stash_home(monkeypatch: pytest.MonkeyPatch,
                   embedded_dagster_template: Path) -> Callable[[Path], Path]:
    """Makes a folder this test's STASH_HOME, its Dagster instance storage already created."""
    def use(folder: Path) -> Path:
        copy_of(embedded_dagster_template, folder / "dagster")
        monkeypatch.setenv("STASH_HOME", str(folder))
        return folder

    return use


@pytest.fixture(autouse=True)
def _stash_home_outside_the_project(tmp_path_factory: pytest.TempPathFactory,
                                    monkeypatch: pytest.MonkeyPatch,
                                    use_stash_home: Callable[[Path], Path]) -> None:
    """No test writes ./.stash or a Dagster instance into the checkout (tests may set their own)."""
    use_stash_home(tmp_path_factory.mktemp("stash-home"))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)


@pytest.fixture(scope="session")
def tiny_base_models(tmp_path_factory: pytest.TempPathFactory) -> Callable[[int], Path]:
    """Path to a saved tiny Qwen3 base model + tokenizer of a given context (its positions),
    loadable with from_pretrained: each built once a session, for every suite."""
    from stash_pipeline_tests.support.tiny_models import save_tiny_base_model

    @functools.cache
    def of_context(context: int) -> Path:
        return save_tiny_base_model(tmp_path_factory.mktemp(f"tiny-qwen3-{context}"), context)

    return of_context


@pytest.fixture(scope="session")
def tiny_base_model(tiny_base_models: Callable[[int], Path]) -> Path:
    """The tiny base model whose context (2,048 positions) leaves the worker the seed's window of
    1,024 tokens: for the tests of windows, truncation and what is read inside them."""
    return tiny_base_models(2048)


@pytest.fixture(scope="session")
def pipeline_base_model(tiny_base_models: Callable[[int], Path]) -> Path:
    """The tiny base model for the pipelines' tests (``defs/``, ``cli/``: runs, retries, storage,
    commands), whose 256 positions make the worker's window 256 tokens: a forward of the tiny
    model costs about a quarter of its linear layers' work and a sixteenth of its attention's at
    1,024 tokens (docs/testing.md has the measurement)."""
    return tiny_base_models(256)


# The suites whose pipelines run the worker in this process unless a test is marked
# ``worker_process`` (in_process_compute.py says why).
IN_PROCESS_WORKER_SUITES = ("defs", "cli")


_load_project_definitions = project_definitions.defs


@functools.cache
def _loaded_project_definitions() -> dg.Definitions:
    """The project's definitions, loaded once a session as a code server loads them once for all
    its runs (each load costs 0.1-0.2 s of CPU, and the suites load them 150 times)."""
    return _load_project_definitions()


@pytest.fixture(autouse=True)
def _definitions_loaded_once(request: pytest.FixtureRequest,
                             monkeypatch: pytest.MonkeyPatch) -> None:
    from stash_pipeline_tests.support.in_process_compute import (
        InProcessComputeResource,
        with_resources,
    )

    suite = request.path.relative_to(Path(__file__).parent).parts[0]
    worker_in_process = (suite in IN_PROCESS_WORKER_SUITES
                         and not request.node.get_closest_marker("worker_process"))

    @dg.definitions
    def defs() -> dg.Definitions:
        # Resources as each load makes them: new, so each reads this test's environment when first
        # used (StoreResource keeps the Store it opened).
        fresh = dict(project_resources.resources().resources)
        if worker_in_process:
            fresh["compute"] = InProcessComputeResource()
        return with_resources(_loaded_project_definitions(), fresh)

    monkeypatch.setattr(project_definitions, "defs", defs)


# S3 for every suite: moto's server mode on loopback, reached with a real boto3 client; one server
# per session, a fresh bucket per test.
@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3_settings(s3_endpoint: str) -> S3Settings:
    """A fresh, empty bucket on the loopback server."""
    bucket = f"stash-objects-{uuid.uuid4().hex[:12]}"
    admin = boto3.client("s3", endpoint_url=s3_endpoint, region_name=REGION,
                         aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY)
    admin.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": REGION})
    return S3Settings(bucket=bucket, region=REGION, access_key=ACCESS_KEY, secret_key=SECRET_KEY,
                      endpoint=s3_endpoint)
