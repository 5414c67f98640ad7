"""The worker's queue: what a person asked for runs before background work, and a waiting request
says how many runs are ahead of it.

One worker at a time (the ``reward_worker`` pool, limit 1, as the seed's concurrency 1). Every run
that needs it carries a ``dagster/priority`` tag: the QueuedRunCoordinator dequeues higher
priorities first, and a step waiting for a pool slot is given it by the run's priority too. So a
request (a personal model's training, Score again) waits for at most the background chunk that
holds the worker now (auto-scoring on import, rescoring after a release: ``STASH_SCORING_BATCH``
traces a run).
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import dagster as dg

from stash_pipeline.defs.step_leases import step_lease
from stash_pipeline.defs.worker_runs import REWARD_POOL
from stash_pipeline.store import Store

PRIORITY_TAG = "dagster/priority"
PRIORITIES = {
    "request": 10,  # a person waits for it: a personal model's training, Score again
    "shared_training": 0,  # the shared evaluator's candidate (weekly, or `evaluator train`)
    "background": -10,  # nobody waits for it: auto-scoring on import, rescoring after a release
}
# The jobs with a step in the reward_worker pool: the runs that wait for the worker.
WORKER_JOBS = frozenset({"personal_reward_model_training", "trace_scoring",
                         "shared_evaluator_training"})
# Their steps in that pool: a run past the start of one no longer waits for the worker.
WORKER_STEPS = frozenset({"personal_checkpoint", "trace_scores", "shared_candidate",
                          "benchmark_results"})
WAITING = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED,
           dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED]


def priority_tags(kind: str) -> dict[str, str]:
    """The tags that place a run of this kind (``PRIORITIES``) in the worker's queue."""
    return {PRIORITY_TAG: str(PRIORITIES[kind])}


def priority(tags: Mapping[str, str]) -> int:
    """A run's priority as the coordinator reads it (0 without a tag or with a bad one)."""
    try:
        return int(tags.get(PRIORITY_TAG, "0"))
    except ValueError:
        return 0


@dataclass(frozen=True)
class Wait:
    """What a request waits for: ``run`` (the pipeline has not made its run yet) or ``worker``
    (its run waits for the worker behind ``runs_ahead`` runs)."""
    waiting_for: str
    runs_ahead: int | None = None
    run_id: str | None = None

    def text(self) -> str:
        if self.waiting_for == "worker":
            n = self.runs_ahead
            return f"waiting for the worker: {n} run{'' if n == 1 else 's'} ahead"
        return "waiting for the pipeline to start its run"

    def to_dict(self) -> dict[str, Any]:
        return {"waiting_for": self.waiting_for, "runs_ahead": self.runs_ahead,
                "run_id": self.run_id, "text": self.text()}


NOT_STARTED = Wait("run")


def ensure_worker_pool(instance: dg.DagsterInstance) -> None:
    """The worker's pool set to its limit before the first run that uses it: the run queue holds
    back a run whose pool is full only once the pool exists, so on a fresh instance it would
    launch every background chunk at once, to wait in the pool ahead of later requests."""
    storage = instance.event_log_storage
    if (storage.supports_global_concurrency_limits
            and REWARD_POOL not in storage.get_concurrency_keys()):
        storage.initialize_concurrency_limit_to_default(REWARD_POOL)


def worker_slots(instance: dg.DagsterInstance) -> int:
    """The worker pool's limit (one where the storage has no pools): how many worker steps may
    run at once, which their leases hold to (defs.step_leases)."""
    storage = instance.event_log_storage
    if not storage.supports_global_concurrency_limits:
        return 1
    info = storage.get_concurrency_info(REWARD_POOL)
    return max(1, info.slot_count or info.limit or 1)


def worker_step_lease(context: dg.AssetExecutionContext, store: Store,
                      step_key: str) -> AbstractContextManager[None]:
    """The lease of a step in the worker's pool (defs.step_leases): started at most once, and
    holding one of the pool's worker slots; a wait for a slot is told in the run's log."""
    return step_lease(store, context.run.run_id, step_key,
                      worker_slots=worker_slots(context.instance), on_wait=context.log.info)


def worker_holders(instance: dg.DagsterInstance) -> set[str]:
    """The runs whose step holds the worker now (empty where the storage has no pools)."""
    storage = instance.event_log_storage
    if not storage.supports_global_concurrency_limits:
        return set()
    return {slot.run_id for slot in storage.get_concurrency_info(REWARD_POOL).claimed_slots}


def had_worker(instance: dg.DagsterInstance, run: dg.DagsterRun) -> bool:
    """Whether a step of the run in the worker's pool has started (Dagster starts it once it
    holds the pool's slot): the run holds the worker or is done with it."""
    if run.status != dg.DagsterRunStatus.STARTED:
        return False
    records = instance.get_records_for_run(run.run_id,
                                           of_type=dg.DagsterEventType.STEP_START).records
    return any(r.event_log_entry.step_key in WORKER_STEPS for r in records)


def worker_wait(instance: dg.DagsterInstance, run_id: str) -> Wait | None:
    """The run's place in the worker's queue: the worker-using runs not finished that hold the
    worker, or would get it before this run (a higher priority, or the same and made earlier)
    and have not had it yet. None once it holds the worker, is done with it or has ended (or
    uses no worker)."""
    record = instance.get_run_record_by_id(run_id)
    if record is None or record.dagster_run.is_finished:
        return None
    run = record.dagster_run
    holders = worker_holders(instance)
    if run.job_name not in WORKER_JOBS or run_id in holders or had_worker(instance, run):
        return None
    mine = (-priority(run.tags), record.storage_id)  # storage id: the order runs were made
    ahead = 0
    for other in instance.get_run_records(filters=dg.RunsFilter(statuses=WAITING)):
        if other.dagster_run.run_id == run_id or other.dagster_run.job_name not in WORKER_JOBS:
            continue
        if other.dagster_run.run_id in holders:
            ahead += 1
        elif ((-priority(other.dagster_run.tags), other.storage_id) < mine
              and not had_worker(instance, other.dagster_run)):
            ahead += 1
    return Wait("worker", ahead, run_id)


def run_with_tags(instance: dg.DagsterInstance, tags: Mapping[str, str]) -> dg.DagsterRun | None:
    """The newest run carrying these tags (a request's run), or None before it is made."""
    runs = instance.get_runs(filters=dg.RunsFilter(tags=dict(tags)), limit=1)
    return runs[0] if runs else None


def request_wait(instance: dg.DagsterInstance, tags: Mapping[str, str]) -> Wait | None:
    """What the request whose run carries ``tags`` waits for: its run to be made, or the worker;
    None once its run holds the worker or has ended."""
    run = run_with_tags(instance, tags)
    if run is None:
        return NOT_STARTED
    return worker_wait(instance, run.run_id)
