"""The serving suite's deployment: the API and the scoring server over the real store (SQLite and
PostgreSQL), one pair of servers per module and database; every test starts with empty tables
and objects (the models the server holds are keyed by ids no later test reuses)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from stash_pipeline.store import schema
from stash_pipeline.worker.checkpoint import archive
from stash_pipeline_tests.support.serving_helpers import (
    Api,
    Deployment,
    api_server,
    local_objects,
    module_store,
    scoring_server,
)
from stash_pipeline_tests.support.tiny_models import random_head_checkpoint


@pytest.fixture(scope="session")
def checkpoints(pipeline_base_model: Path, tmp_path_factory: pytest.TempPathFactory
                ) -> dict[str, Path]:
    """reward-model.tar.gz archives of the tiny model (window 256) with a random score head: a
    personal model with action stats, one without, and a shared-evaluator release."""
    made = {}
    for name, audience, actions, seed in (("personal", "personal", True, 2),
                                          ("no_actions", "personal", False, 3),
                                          ("shared", "shared", True, 4)):
        folder = tmp_path_factory.mktemp(f"checkpoint-{name}")
        directory = random_head_checkpoint(pipeline_base_model, folder / "reward-model",
                                           audience=audience, actions=actions, seed=seed)
        made[name] = archive(directory)
    return made


@pytest.fixture(scope="module",
                params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def deployment(request: pytest.FixtureRequest,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    folder = tmp_path_factory.mktemp("serving")
    with module_store(request, folder) as store:
        objects = local_objects(folder)
        with scoring_server(store, objects) as (scoring_url, engine, registry):
            with api_server(store, objects, scoring_url) as url:
                yield Deployment(Api(url, store, objects), scoring_url, engine, registry)


@pytest.fixture
def served(deployment: Deployment) -> Deployment:
    """The deployment with empty tables and no objects."""
    store = deployment.api.store
    with store.transaction() as connection:
        for table in reversed(schema.metadata.sorted_tables):
            connection.execute(table.delete())
    root = deployment.api.objects.root
    if root.exists():
        for child in root.iterdir():
            shutil.rmtree(child) if child.is_dir() else child.unlink()
    return deployment
