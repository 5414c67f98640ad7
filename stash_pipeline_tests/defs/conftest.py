"""The pipeline on a test instance: a SQLite store, the local object store and a tiny base model,
all under a temporary STASH_HOME, with the real definitions reading their environment."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from stash_pipeline.store import Store
from stash_pipeline_tests.support.dagster_storage import copy_of


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, use_stash_home) -> Path:
    """STASH_HOME, the database and the scratch directory of one test; extraction off."""
    use_stash_home(tmp_path / "stash")
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'stash.db'}")
    monkeypatch.setenv("RM_ARTIFACT_DIR", str(tmp_path / "jobs"))
    monkeypatch.setenv("STASH_EXTRACTION", "off")
    for name in ("S3_BUCKET", "S3_ENDPOINT", "RM_COMPUTE", "DAGSTER_HOME", "ANTHROPIC_API_KEY",
                 "RM_RESIDENT_WORKER"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


@pytest.fixture
def store(home: Path) -> Store:
    store = Store(f"sqlite:///{home / 'stash.db'}")
    store.migrate()
    yield store
    store.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db(request: pytest.FixtureRequest, home, monkeypatch: pytest.MonkeyPatch) -> Store:
    """The pipeline's store on either database (DATABASE_URL points the definitions at it)."""
    from stash_pipeline.store import schema

    if request.param == "sqlite":
        return request.getfixturevalue("store")
    store = request.getfixturevalue("postgres_store")
    monkeypatch.setenv("DATABASE_URL", store.url)
    with store.transaction() as connection:
        for table in reversed(schema.metadata.sorted_tables):
            connection.execute(table.delete())
    return store


@pytest.fixture
def instance(tmp_path: Path, test_instance_template: Path):
    """A test instance, from a copy of storage created once a session (dagster_storage.py)."""
    folder = copy_of(test_instance_template, tmp_path / "dagster-instance")
    with dg.instance_for_test(temp_dir=str(folder)) as instance:
        yield instance


@pytest.fixture(scope="session")
def shared_checkpoint(tmp_path_factory: pytest.TempPathFactory, pipeline_base_model: Path) -> Path:
    """A tiny shared-evaluator checkpoint archive (trained on action comparisons), built once."""
    from stash_pipeline.compute.contract import ARCHIVE_NAME, JobSettings, write_job
    from stash_pipeline.compute.worker_log import failure_reason
    from stash_pipeline.core.pair_builders import build_feedback_pairs
    from stash_pipeline.worker.runner import main
    from stash_pipeline_tests.support.shared_samples import contributions

    records = contributions("airline", 3) + contributions("retail", 3)
    pairs = build_feedback_pairs([r.trace for r in records],
                                 [f for r in records for f in r.feedback], "shared")
    job_dir = tmp_path_factory.mktemp("shared-checkpoint")
    write_job(job_dir,
              JobSettings(evaluator="r1", audience="shared", base_model=str(pipeline_base_model),
                                   outputs=("checkpoint",)), train_pairs=pairs)
    assert main(str(job_dir)) == 0, failure_reason(job_dir)
    return job_dir / ARCHIVE_NAME


@pytest.fixture
def release(store: Store, shared_checkpoint: Path):
    """That checkpoint released as "r1" in this test's store and object store."""
    from stash_pipeline.objects import object_store_from_env
    from stash_pipeline.objects.keys import shared_evaluator_checkpoint_key
    from stash_pipeline.store import Release

    uri = object_store_from_env().put_file(shared_evaluator_checkpoint_key("r1"),
                                           shared_checkpoint)
    return store.save_release(Release("r1", uri, {"passed": True},
                                      {"training_traces": {}, "benchmark_traces": {}}))


@pytest.fixture
def release_in_db(shared_checkpoint: Path):
    """release_in_db(store): the tiny shared checkpoint released as "r1" in that store (either
    database) and this test's object store."""
    from stash_pipeline.objects import object_store_from_env
    from stash_pipeline.objects.keys import shared_evaluator_checkpoint_key
    from stash_pipeline.store import Release

    def release(store: Store) -> Release:
        uri = object_store_from_env().put_file(shared_evaluator_checkpoint_key("r1"),
                                               shared_checkpoint)
        return store.save_release(Release("r1", uri, {"passed": True},
                                          {"training_traces": {}, "benchmark_traces": {}}))

    return release
