"""Data helpers of the pipeline tests (a module of its own: no test imports a conftest)."""

from __future__ import annotations

import itertools

from stash_pipeline.importers import read_path
from stash_pipeline_tests.support.tiny_models import AGENTPROCESSBENCH


def agentprocessbench_records(count: int, owner: str = "ana") -> list:
    """The first ``count`` AgentProcessBench traces with their human step and trace ratings."""
    return list(itertools.islice(read_path(AGENTPROCESSBENCH, owner=owner), count))
