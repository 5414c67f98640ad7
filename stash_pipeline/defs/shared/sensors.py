"""Requests to train become runs of the chain (run key: the request's id, one run per request; a
new request is a new key). The release's scoring of every trace is the scoring queue's
(defs/scoring/sensors.py: ``pending_scoring``)."""

from __future__ import annotations

import dagster as dg

from stash_pipeline.defs.resources import StoreResource
from stash_pipeline.defs.sensor_cursors import REQUESTS_PER_TICK, settled_cursor, unstarted
from stash_pipeline.defs.shared.jobs import shared_training_job
from stash_pipeline.defs.worker_queue import priority_tags

SHARED_TRAINING_REQUEST_TAG = "stash/shared_training_request"
TRAINING_INTERVAL_S = 10


def request_run_key(request_id: int) -> str:
    return f"shared-training:{request_id}"


def training_run_config(base_model: str | None, epochs: int | None) -> dict:
    candidate = {key: value for key, value in (("base_model", base_model), ("epochs", epochs))
                 if value is not None}
    return {"ops": {"shared_candidate": {"config": candidate}}} if candidate else {}


@dg.sensor(job=shared_training_job, minimum_interval_seconds=TRAINING_INTERVAL_S,
           default_status=dg.DefaultSensorStatus.RUNNING,
           description="Starts the shared evaluator's chain (candidate, benchmark, gate, "
                       "release) for each `evaluator train` request, oldest first.")
def shared_training_requests(context: dg.SensorEvaluationContext,
                             database: StoreResource) -> dg.SensorResult:
    """One run of the chain per `evaluator train` request, oldest first, at most RUNS_PER_TICK a
    tick (sensor_cursors)."""
    page = database.store.shared_training_requests(after=int(context.cursor or 0),
                                                   limit=REQUESTS_PER_TICK)
    requests, covered = unstarted(context, page, lambda r: request_run_key(r.id))
    return dg.SensorResult(
        run_requests=[dg.RunRequest(run_key=request_run_key(r.id),
                                    run_config=training_run_config(r.base_model, r.epochs),
                                    tags={SHARED_TRAINING_REQUEST_TAG: str(r.id),
                                          **priority_tags("shared_training")})
                      for r in requests],
        cursor=settled_cursor(covered, lambda r: r.created_at, lambda r: str(r.id),
                              context.cursor))
