"""Score again requests become scoring runs; the scoring queue (``store.scoring_work``: what the
current release and the kept-current personal models have yet to score) becomes scoring runs too,
in background chunks: one sensor, one job, one way to find what is in flight.

Run keys: a request's id (one run per request); for background chunks the sensor's tick number
with the chunk's place in it, so a failed chunk, whose traces stay queued, is handed out again
later. Chunks in flight are not handed out twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import dagster as dg

from stash_pipeline.defs.resources import SharedEvaluatorResource, StoreResource
from stash_pipeline.defs.scoring.chunks import chunk_seconds, chunk_sizes
from stash_pipeline.defs.scoring.jobs import trace_scoring_job
from stash_pipeline.defs.sensor_cursors import (
    REQUEST_INTERVAL_S,
    REQUESTS_PER_TICK,
    parse_time_cursor,
    settled_cursor,
    time_cursor,
    unstarted,
)
from stash_pipeline.defs.worker_queue import ensure_worker_pool, priority_tags
from stash_pipeline.pipelines import trace_scoring
from stash_pipeline.pipelines.trace_scoring import SCORING_REQUEST_TAG

# The evaluator a background chunk scores with (a release version or a personal model id).
BACKGROUND_TAG = "stash/background_scoring"
INTERVAL_S = 5
# Background chunks queued or running at once: the rest of the queue waits in the database. The
# reward_worker pool runs one scoring step at a time anyway; one chunk working and one ready next
# keep it busy without holding the deployment's run slots (deploy/dagster.yaml: 10) away from
# training.
MAX_SCORING_RUNS = 2
# Batches of a release's queueing a tick may work (store.scoring_work.RELEASE_QUEUE_BATCH each).
RELEASE_QUEUE_BATCHES_PER_TICK = 10
IN_FLIGHT = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED,
             dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED,
             dg.DagsterRunStatus.CANCELING]


def scoring_config(evaluator: str, actions: bool, **fields) -> dict:
    return {"ops": {"trace_scores": {"config": {"evaluator": evaluator, "actions": actions,
                                                **fields}}}}


@dg.sensor(job=trace_scoring_job, minimum_interval_seconds=REQUEST_INTERVAL_S,
           default_status=dg.DefaultSensorStatus.RUNNING,
           description="Starts a scoring run for each Score again request for chosen traces "
                       "(traces score, POST /api/v1/traces/score): the released shared evaluator "
                       "or the chosen personal model scores them again.")
def score_again_for_traces(context: dg.SensorEvaluationContext,
                           database: StoreResource) -> dg.SensorResult:
    """One scoring run per Score again request for chosen traces, oldest first, at most
    RUNS_PER_TICK a tick (sensor_cursors: the cursor moves past settled requests only)."""
    page = database.store.scoring_requests(after=request_cursor(context.cursor),
                                           limit=REQUESTS_PER_TICK)
    requests, covered = unstarted(context, page,
                                  lambda r: trace_scoring.request_run_key(r.run_ref))
    return dg.SensorResult(
        run_requests=[dg.RunRequest(run_key=trace_scoring.request_run_key(r.run_ref),
                                    run_config=scoring_config(r.evaluator, r.actions,
                                                              request=r.id),
                                    tags={SCORING_REQUEST_TAG: r.run_ref,
                                          **priority_tags("request")})
                      for r in requests],
        cursor=settled_cursor(covered, lambda r: r.created_at,
                              lambda r: time_cursor(r.created_at, r.id), context.cursor))


def request_cursor(cursor: str | None) -> tuple[datetime, str] | int | None:
    """(created at, id); a cursor kept from before migration 0012 is a request's integer id."""
    return int(cursor) if cursor and cursor.isdigit() else parse_time_cursor(cursor)


def batch_config(batch: trace_scoring.ScoringBatch) -> dict:
    """The run config of one background chunk: its traces, and the worker's work budget
    (chunks.chunk_seconds()), which bounds the chunk whatever its size's estimate."""
    return scoring_config(batch.evaluator, batch.actions, whole_traces=batch.whole_traces,
                          trace_ids=list(batch.traces), versions=list(batch.traces.values()),
                          work_seconds=float(chunk_seconds()))


@dataclass(frozen=True)
class InFlight:
    """Scoring runs not finished yet: the background chunks (``chunks``) and the (evaluator,
    trace, version) they cover; ``busy``: the models whose Score again of the owner's every
    trace is running (it scores its queue's head itself)."""

    chunks: int
    covered: set[tuple[str, str, int]]
    busy: frozenset[str]


def in_flight(instance: dg.DagsterInstance) -> InFlight:
    """The scoring runs in flight (``InFlight``)."""
    runs = instance.get_runs(filters=dg.RunsFilter(job_name=trace_scoring_job.name,
                                                   statuses=IN_FLIGHT))
    background = [run for run in runs if BACKGROUND_TAG in run.tags]
    covered: set[tuple[str, str, int]] = set()
    for run in background:
        config = run.run_config["ops"]["trace_scores"]["config"]
        covered.update((config["evaluator"], trace_id, version)
                       for trace_id, version in zip(config["trace_ids"], config["versions"]))
    busy = frozenset(config["evaluator"] for config in (
        (run.run_config.get("ops") or {}).get("trace_scores", {}).get("config", {})
        for run in runs if BACKGROUND_TAG not in run.tags) if config.get("whole_owner"))
    return InFlight(len(background), covered, busy)


@dg.sensor(job=trace_scoring_job, minimum_interval_seconds=INTERVAL_S,
           default_status=dg.DefaultSensorStatus.RUNNING,
           description="Works the scoring queue in background chunks: the current shared "
                       "release scores every trace version it has not scored (all traces after "
                       "a release, a trace again after its reimport), and each owner's most "
                       "recent succeeded models (STASH_PERSONAL_SCORING_MODELS) score the "
                       "owner's traces imported or changed after they succeeded.")
def pending_scoring(context: dg.SensorEvaluationContext, database: StoreResource,
                    shared_evaluator: SharedEvaluatorResource) -> dg.SensorResult | dg.SkipReason:
    """Background chunks for what the scoring queue holds: the personal models' oldest work
    first, then the release's, MAX_SCORING_RUNS chunks in flight at most. A tick reads one page
    of each queue whatever the number of models (store.scoring_work)."""
    store = database.store
    # A release's queueing cut short (its process killed) goes on, a bounded part a tick.
    store.settle_release_queue(max_batches=RELEASE_QUEUE_BATCHES_PER_TICK)
    running = in_flight(context.instance)
    room = max(0, MAX_SCORING_RUNS - running.chunks)
    if not room:
        return dg.SkipReason(f"{running.chunks} scoring chunks in flight, the most at once")
    batches = trace_scoring.pending_batches(
        store, batch_size=chunk_sizes(context.instance, shared_evaluator), runs=room,
        skip=running.covered, busy=running.busy)
    if not batches and store.latest_release() is None:
        return dg.SkipReason("no shared evaluator release yet: traces wait for the first release")
    tick = int(context.cursor or 0) + 1
    ensure_worker_pool(context.instance)
    return dg.SensorResult(
        run_requests=[dg.RunRequest(run_key=f"auto:{batch.evaluator}:{tick}:{index}",
                                    run_config=batch_config(batch),
                                    tags={BACKGROUND_TAG: batch.evaluator,
                                          **priority_tags("background")})
                      for index, batch in enumerate(batches)],
        cursor=str(tick))
