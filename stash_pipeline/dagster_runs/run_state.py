"""Where a request, a model or a run stands, read from the run queue: what the API, the viewer and
the CLI show of work in flight (``defs.worker_queue`` counts the waits)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import dagster as dg

from stash_pipeline.dagster_runs.instance import get_instance

log = logging.getLogger(__name__)


def request_state(tags: Mapping[str, str],
                  instance: dg.DagsterInstance | None = None) -> dict[str, Any]:
    """Where the request whose run carries ``tags`` (a Score again request's) stands, from its
    run: ``status`` queued (no run yet, or its run waits for the worker), running (its run holds
    the worker), succeeded or failed (``error``: why, in the engine's or the step's words);
    ``wait`` what it waits for (``defs.worker_queue.Wait``), ``run_id``."""
    from stash_pipeline.defs.runs import run_failure_reason
    from stash_pipeline.defs.worker_queue import NOT_STARTED, run_with_tags, worker_wait

    instance = instance or get_instance()
    run = run_with_tags(instance, tags)
    if run is None:
        return {"status": "queued", "error": None, "wait": NOT_STARTED.to_dict(), "run_id": None}
    if run.is_finished:
        error = None if run.is_success else (
            "the run was cancelled" if run.status == dg.DagsterRunStatus.CANCELED
            else run_failure_reason(instance, run.run_id))
        return {"status": "succeeded" if run.is_success else "failed", "error": error,
                "wait": None, "run_id": run.run_id}
    wait = worker_wait(instance, run.run_id)
    return {"status": "queued" if wait else "running", "error": None,
            "wait": wait.to_dict() if wait else None, "run_id": run.run_id}


def model_wait(model: Any, instance: dg.DagsterInstance | None = None) -> dict[str, Any] | None:
    """What a queued personal model waits for (its run to be made, or the worker, with the runs
    ahead of it); None for a model that is not queued."""
    from stash_pipeline.defs.personal.partitions import ATTEMPT_TAG, MODEL_TAG
    from stash_pipeline.defs.worker_queue import request_wait, worker_wait

    if model.status != "queued":
        return None
    instance = instance or get_instance()
    wait = (worker_wait(instance, model.run_id) if model.run_id else
            request_wait(instance, {MODEL_TAG: model.id, ATTEMPT_TAG: str(model.attempt)}))
    return wait.to_dict() if wait else None


def model_queue_fields(model: Any, score_again_queued: int = 0) -> dict[str, Any]:
    """A model's JSON fields from the run queue: ``wait`` (``model_wait``) and ``score_again``
    (its latest Score again request's ``request_state``, with its number and ``queued_traces``,
    the owner's traces still queued for it, ``score_again_queued``; None before one). The
    request's run scores the first chunk and queues the rest: it reads running until the queue's
    chunks have scored them all. The model's own status comes from the store: an unreadable
    instance leaves these None."""
    from stash_pipeline.defs.personal.partitions import MODEL_TAG, SCORE_AGAIN_TAG

    fields: dict[str, Any] = {"wait": None, "score_again": None}
    try:
        fields["wait"] = model_wait(model)
        if model.score_generation:
            state = request_state({MODEL_TAG: model.id,
                                   SCORE_AGAIN_TAG: str(model.score_generation)})
            if state["status"] == "succeeded" and score_again_queued:
                state["status"] = "running"  # its first chunk is done, the rest queued
            fields["score_again"] = {"request": model.score_generation, **state,
                                     "queued_traces": score_again_queued}
    except Exception as error:  # noqa: BLE001 - the queue's view is a courtesy
        log.warning("the run queue is unreadable: %s", error)
    return fields


def training_run_result(run_id: str) -> tuple[str | None, list[str]]:
    """A shared-training run's candidate (None before it made one) and its failed steps, each in
    its own words."""
    from stash_pipeline.defs.runs import step_failures
    from stash_pipeline.defs.shared.candidate import candidate_of_run

    instance = get_instance()
    return candidate_of_run(instance, run_id), step_failures(instance, run_id)
