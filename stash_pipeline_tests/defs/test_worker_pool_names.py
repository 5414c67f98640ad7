"""The worker queue's names (WORKER_JOBS, WORKER_STEPS) are the jobs and steps that hold the
reward_worker pool: a job or asset added to the pool without them would never be counted as
waiting for the worker, and a name left behind would count a run that does not wait."""

from __future__ import annotations

from stash_pipeline.dagster_runs.instance import definitions
from stash_pipeline.defs.worker_queue import WORKER_JOBS, WORKER_STEPS
from stash_pipeline.defs.worker_runs import REWARD_POOL


def pooled_nodes() -> dict[str, set[str]]:
    """Each job (not Dagster's implicit asset job) with the names of its steps in the pool."""
    repository = definitions().get_repository_def()
    pooled: dict[str, set[str]] = {}
    for job in repository.get_all_jobs():
        if job.name.startswith("__"):
            continue
        for node in job.graph.iterate_node_defs():
            if getattr(node, "pool", None) == REWARD_POOL:
                pooled.setdefault(job.name, set()).add(node.name)
    return pooled


def test_worker_jobs_and_steps_are_the_pools_jobs_and_steps():
    pooled = pooled_nodes()
    assert set(pooled) == WORKER_JOBS
    assert set().union(*pooled.values()) == WORKER_STEPS
