"""Data helpers of the pipeline tests (a module of its own: no test imports a conftest)."""

from __future__ import annotations

import itertools

from stash_pipeline.importers import read_path
from stash_pipeline.services import reward_models
from stash_pipeline.store import Store
from stash_pipeline_tests.support.tiny_models import AGENTPROCESSBENCH


def agentprocessbench_records(count: int, owner: str = "ana") -> list:
    """The first ``count`` AgentProcessBench traces with their human step and trace ratings."""
    return list(itertools.islice(read_path(AGENTPROCESSBENCH, owner=owner), count))


def queued_model(store: Store) -> str:
    records = agentprocessbench_records(2)
    store.import_traces(records)
    return reward_models.create(store, "ana", {
        "name": "hotpot", "trace_ids": [r.trace.id for r in records],
        "base_model": "/nonexistent"}).id


def request(store: Store, trace_ids: list[str], base_model: str, **fields) -> str:
    body = {"name": "hotpot", "trace_ids": trace_ids, "base_model": base_model, **fields}
    return reward_models.create(store, "ana", body).id
