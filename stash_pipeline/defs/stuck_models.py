"""No model stuck: a queued or running model whose run has ended (or is gone) without storing it,
and whose step no live process holds (defs.step_leases), is failed with a one-line reason, so
`rm retry` can queue it again. The run-failure and run-cancel sensors do this as a run ends; this
catches what they cannot see (a run ended while the daemon was down, a run worker's duplicate
that Dagster failed after the lease's holder died, a run deleted), a page of models a tick."""

from __future__ import annotations

import dagster as dg

from stash_pipeline.defs.sensor_cursors import parse_time_cursor, time_cursor
from stash_pipeline.defs.step_leases import held_by_a_live_process
from stash_pipeline.pipelines import personal_training as steps
from stash_pipeline.store import RewardModelRecord, Store

# Models a tick looks at: the in-progress ones, from its cursor on, round and round.
MODELS_PER_TICK = 200


def run_ended_reason(model: RewardModelRecord, run: dg.DagsterRun | None) -> str:
    if run is None:
        return (f"its run {model.run_id} no longer exists and did not store the model; "
                "rm retry queues it again")
    return (f"its run {model.run_id} ended ({run.status.value.lower()}) without storing the "
            "model; rm retry queues it again")


def end_stuck_models(instance: dg.DagsterInstance, store: Store,
                     cursor: str | None) -> tuple[list[str], str | None]:
    """One page of in-progress models from ``cursor`` on: those whose run has ended or is gone,
    with no live holder of its steps, failed. Returns the ids failed and the next cursor (None
    after the last page: the next tick starts over)."""
    page = store.models_with_runs(parse_time_cursor(cursor), MODELS_PER_TICK)
    runs = {run.run_id: run for run in instance.get_runs(filters=dg.RunsFilter(
        run_ids=[m.run_id for m in page]))} if page else {}
    failed = []
    for model in page:
        run = runs.get(model.run_id)
        if run is not None and not run.is_finished:
            continue
        if held_by_a_live_process(store, model.run_id) is not None:
            continue  # a live process still works it (defs.step_leases)
        if steps.fail(store, model.id, run_ended_reason(model, run)):
            failed.append(model.id)
    last = page[-1] if len(page) == MODELS_PER_TICK else None
    return failed, time_cursor(last.queued_at, last.id) if last else None
