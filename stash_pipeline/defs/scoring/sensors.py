"""Score again requests become scoring runs; traces a kept-current personal model has not scored
become scoring runs too, in batches (the database is the queue, as for the shared evaluator).

Run keys: a request's id (one run per request); for auto-scoring the sensor's tick number with
the batch's place in it, so a failed batch, whose traces stay pending, is handed out again later.
Batches in flight are not handed out twice.
"""

from __future__ import annotations

import dagster as dg

from stash_pipeline.defs.resources import SharedEvaluatorResource, StoreResource
from stash_pipeline.defs.scoring.jobs import trace_scoring_job
from stash_pipeline.defs.sensor_cursors import REQUESTS_PER_TICK, settled_cursor, unstarted
from stash_pipeline.defs.shared.sensors import IN_FLIGHT, MAX_SCORING_RUNS
from stash_pipeline.defs.worker_queue import ensure_worker_pool, priority_tags
from stash_pipeline.pipelines import trace_scoring
from stash_pipeline.pipelines.trace_scoring import REQUEST_TAG

AUTO_TAG = "stash/auto_scoring"  # the personal model an auto-scoring run scores with
INTERVAL_S = 5


def scoring_config(evaluator: str, actions: bool, **fields) -> dict:
    return {"ops": {"trace_scores": {"config": {"evaluator": evaluator, "actions": actions,
                                                **fields}}}}


@dg.sensor(job=trace_scoring_job, minimum_interval_seconds=INTERVAL_S,
           default_status=dg.DefaultSensorStatus.RUNNING,
           description="Starts a scoring run for each Score again request for chosen traces "
                       "(traces score, POST /api/v1/traces/score): the released shared evaluator "
                       "or the chosen personal model scores them again.")
def score_again_for_traces(context: dg.SensorEvaluationContext,
                           database: StoreResource) -> dg.SensorResult:
    """One scoring run per Score again request for chosen traces, oldest first, at most
    RUNS_PER_TICK a tick (sensor_cursors: the cursor moves past settled requests only)."""
    page = database.store.scoring_requests(after=int(context.cursor or 0),
                                           limit=REQUESTS_PER_TICK)
    requests, covered = unstarted(context, page, lambda r: trace_scoring.request_run_key(r.id))
    return dg.SensorResult(
        run_requests=[dg.RunRequest(run_key=trace_scoring.request_run_key(r.id),
                                    run_config=scoring_config(r.evaluator, r.actions,
                                                              request_id=r.id),
                                    tags={REQUEST_TAG: str(r.id), **priority_tags("request")})
                      for r in requests],
        cursor=settled_cursor(covered, lambda r: r.created_at, lambda r: str(r.id),
                              context.cursor))


def in_flight(instance: dg.DagsterInstance) -> tuple[int, set[tuple[str, str, int]]]:
    """Auto-scoring runs not finished yet, and the (model, trace, version) they cover."""
    runs = [run for run in instance.get_runs(filters=dg.RunsFilter(
        job_name=trace_scoring_job.name, statuses=IN_FLIGHT)) if AUTO_TAG in run.tags]
    covered: set[tuple[str, str, int]] = set()
    for run in runs:
        config = run.run_config["ops"]["trace_scores"]["config"]
        covered.update((config["evaluator"], trace_id, version)
                       for trace_id, version in zip(config["trace_ids"], config["versions"]))
    return len(runs), covered


@dg.sensor(job=trace_scoring_job, minimum_interval_seconds=INTERVAL_S,
           default_status=dg.DefaultSensorStatus.RUNNING,
           description="Keeps personal scores current: each owner's most recent succeeded "
                       "models (STASH_PERSONAL_SCORING_MODELS) score, in batches, the traces "
                       "imported or changed after they succeeded.")
def pending_personal_scoring(context: dg.SensorEvaluationContext, database: StoreResource,
                             shared_evaluator: SharedEvaluatorResource
                             ) -> dg.SensorResult | dg.SkipReason:
    """Scoring runs for the trace versions a kept-current personal model has not scored: traces
    imported or changed after it succeeded. Each owner's STASH_PERSONAL_SCORING_MODELS most
    recent succeeded models are kept current. A tick reads one page of the scoring queue for all
    models at once (store.scoring_work), whatever the number of models."""
    size = shared_evaluator.batch_size()
    running, covered = in_flight(context.instance)
    room = max(0, MAX_SCORING_RUNS - running) * size
    if not room:
        return dg.SkipReason(f"{running} personal scoring runs in flight, the most at once")
    batches = trace_scoring.pending_batches(database.store, batch_size=size, room=room,
                                            skip=covered)[:MAX_SCORING_RUNS - running]
    tick = int(context.cursor or 0) + 1
    ensure_worker_pool(context.instance)
    return dg.SensorResult(
        run_requests=[dg.RunRequest(
            run_key=f"auto:{model_id}:{tick}:{index}",
            run_config=scoring_config(model_id, actions, trace_ids=[t for t, _ in batch],
                                      versions=[v for _, v in batch]),
            tags={AUTO_TAG: model_id, **priority_tags("background")})
            for index, (model_id, actions, batch) in enumerate(batches)],
        cursor=str(tick))
