"""What the command line asks of Dagster about a run, in one home: a dead run's model recorded
(what the run-failure sensors do in a deployment, and ``instance`` for a run executed here), and a
failed run's steps in their own words (``evaluator train --wait``). The CLI asks these instead of
reading Dagster's event log or a pipeline's sensors itself."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import dagster as dg

from stash_pipeline.compute.contract import job_directory, keep_only_logs
from stash_pipeline.compute.worker_log import LOG, failure_reason
from stash_pipeline.defs.personal.partitions import ATTEMPT_TAG, SCORE_AGAIN_TAG, model_id_of
from stash_pipeline.defs.resources import ComputeResource, StoreResource
from stash_pipeline.defs.step_leases import held_by_a_live_process
from stash_pipeline.pipelines import personal_training as steps


def record_dead_run(run: dg.DagsterRun, message: str, database: StoreResource,
                    compute: ComputeResource) -> str | None:
    """The model of a training run that failed or was cancelled outside the worker: failed, with
    the worker log's tail when the worker had started, and its attempt's directory cut to its logs
    (a run that died while it wrote the job's inputs is in no ``JOB_DIRS_TAG`` yet). None when
    there was nothing to record."""
    key = run.tags.get("dagster/partition")
    if not key or run.tags.get(SCORE_AGAIN_TAG) is not None:
        return None
    model_id = model_id_of(key)
    store = database.store
    if held_by_a_live_process(store, run.run_id) is not None:
        return None  # a live process works the run's step: the model is its to change
    model = store.get_reward_model(model_id)
    # Only the run of the model's current attempt speaks for it (a stale or duplicate run does not).
    current = (model.run_id == run.run_id if model.status == "running"
               else model.status == "queued" and (model.run_id == run.run_id or run.tags.get(
                   ATTEMPT_TAG) == str(model.attempt)))
    if not current:
        return None
    job_dir = job_directory(compute.scratch, model_id, steps.attempt_name(model.attempt))
    reason = f"run {run.run_id} failed: {message}"
    if (job_dir / LOG).is_file():
        reason = f"{failure_reason(job_dir)}\n{reason}"
    failed = steps.fail(store, model_id, reason)
    keep_only_logs(job_dir)
    return reason if failed else None


def dead_run_recorder(resources: Mapping[str, Any]) -> Callable[[dg.DagsterRun, str], Any]:
    """``record_dead_run`` with the definitions' own resources."""
    return lambda run, message: record_dead_run(run, message, resources["database"],
                                                resources["compute"])


def launch_failure(instance: dg.DagsterInstance, run_id: str) -> str | None:
    """Why a run failed before any step started, in the engine's words (the daemon could not
    reach the code server, after its retries), or None when a step started (the step's own
    failure says why) or the engine gave no error."""
    records = instance.get_records_for_run(
        run_id, of_type={dg.DagsterEventType.STEP_START, dg.DagsterEventType.ENGINE_EVENT},
        ascending=False, limit=200).records
    for record in records:
        event = record.event_log_entry.dagster_event
        if event.event_type == dg.DagsterEventType.STEP_START:
            return None
        error = getattr(event.event_specific_data, "error", None)
        if error is not None:
            return f"{event.message}: {error.message.strip()}"
    return None


def run_failure_reason(instance: dg.DagsterInstance, run_id: str) -> str:
    """Why a run failed: its launch failure, else its failed steps, else the run's own
    failure message."""
    reason = launch_failure(instance, run_id) or "\n".join(step_failures(instance, run_id))
    if reason:
        return reason
    failures = instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.RUN_FAILURE,
                                            ascending=False, limit=1).records
    return (failures[0].event_log_entry.dagster_event.message if failures
            else "the run failed") or "the run failed"


def step_failures(instance: dg.DagsterInstance, run_id: str) -> list[str]:
    """Every failed step of a run, in its own words: ``<step>: `` a Failure's description, else
    the error's message."""
    return [_failure_reason(event.dagster_event) for event in instance.all_logs(run_id)
            if event.dagster_event
            and event.dagster_event.event_type == dg.DagsterEventType.STEP_FAILURE]


def _failure_reason(event: Any) -> str:
    data = event.step_failure_data
    if data.user_failure_data is not None and data.user_failure_data.description:
        return f"{event.step_key}: {data.user_failure_data.description}"
    return f"{event.step_key}: {data.error.message.strip() if data.error else event.message}"
