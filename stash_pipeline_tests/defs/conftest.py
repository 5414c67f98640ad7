"""The pipeline on a test instance: a SQLite store, the local object store and a tiny base model,
all under a temporary STASH_HOME, with the real definitions reading their environment."""

from __future__ import annotations

import itertools
from pathlib import Path

import dagster as dg
import pytest

from stash_pipeline.importers import read_path
from stash_pipeline.store import Store
from tiny_models import SHARED_DATA, save_tiny_base_model

AGENTPROCESSBENCH = SHARED_DATA / "agentprocessbench" / "hotpotqa.jsonl"


@pytest.fixture(scope="session")
def tiny_base_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_base_model(tmp_path_factory.mktemp("tiny-qwen3"))


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """STASH_HOME, the database and the scratch directory of one test; extraction off."""
    monkeypatch.setenv("STASH_HOME", str(tmp_path / "stash"))
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'stash.db'}")
    monkeypatch.setenv("RM_ARTIFACT_DIR", str(tmp_path / "jobs"))
    monkeypatch.setenv("STASH_EXTRACTION", "off")
    for name in ("S3_BUCKET", "S3_ENDPOINT", "RM_COMPUTE", "DAGSTER_HOME", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


@pytest.fixture
def store(home: Path) -> Store:
    store = Store(f"sqlite:///{home / 'stash.db'}")
    store.migrate()
    yield store
    store.dispose()


def agentprocessbench_records(count: int, owner: str = "ana") -> list:
    """The first ``count`` AgentProcessBench traces with their human step and trace ratings."""
    return list(itertools.islice(read_path(AGENTPROCESSBENCH, owner=owner), count))


@pytest.fixture
def instance():
    with dg.instance_for_test() as instance:
        yield instance
