"""Requests to train become runs of the chain; pending traces become scoring runs, in batches.

Run keys: a training request's id (one run per request; a new request is a new key), and for
scoring the sensor's own tick number with the batch's place in it, so a failed batch, whose traces
stay pending, is handed out again in a later tick under a new key. Batches already in flight are
not handed out twice.
"""

from __future__ import annotations

from collections.abc import Iterable

import dagster as dg

from stash_pipeline.defs.resources import SharedEvaluatorResource, StoreResource
from stash_pipeline.defs.sensor_cursors import REQUESTS_PER_TICK, settled_cursor, unstarted
from stash_pipeline.defs.shared.jobs import shared_scoring_job, shared_training_job
from stash_pipeline.defs.worker_queue import ensure_worker_pool, priority_tags

REQUEST_TAG = "stash/shared_training_request"
RELEASE_TAG = "stash/release"
TRAINING_INTERVAL_S = 10
SCORING_INTERVAL_S = 5
# Scoring runs queued or running at once: the rest of a backlog waits in the database. The
# reward_worker pool runs one scoring step at a time anyway; one run working and one ready next keep
# it busy without holding the deployment's run slots (deploy/dagster.yaml: 10) away from training.
MAX_SCORING_RUNS = 2
IN_FLIGHT = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED,
             dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED,
             dg.DagsterRunStatus.CANCELING]


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
                                    tags={REQUEST_TAG: str(r.id),
                                          **priority_tags("shared_training")})
                      for r in requests],
        cursor=settled_cursor(covered, lambda r: r.created_at, lambda r: str(r.id),
                              context.cursor))


def scoring_batch_config(release: str, batch: Iterable[tuple[str, int]]) -> dict:
    ids, versions = zip(*batch)
    return {"ops": {"shared_action_scores": {"config": {
        "release": release, "trace_ids": list(ids), "versions": list(versions)}}}}


def in_flight(instance: dg.DagsterInstance, release: str) -> tuple[int, set[tuple[str, int]]]:
    """The scoring runs of this release not finished yet, and the trace versions they cover."""
    runs = instance.get_runs(filters=dg.RunsFilter(job_name=shared_scoring_job.name,
                                                   statuses=IN_FLIGHT,
                                                   tags={RELEASE_TAG: release}))
    covered: set[tuple[str, int]] = set()
    for run in runs:
        config = run.run_config["ops"]["shared_action_scores"]["config"]
        covered.update(zip(config["trace_ids"], config["versions"]))
    return len(runs), covered


@dg.sensor(job=shared_scoring_job, minimum_interval_seconds=SCORING_INTERVAL_S,
           default_status=dg.DefaultSensorStatus.RUNNING,
           description="Scores, in batches, every trace version the current shared release has "
                       "not scored yet: all traces after a release, a trace again after its "
                       "reimport. Before the first release traces wait.")
def pending_action_scoring(context: dg.SensorEvaluationContext, database: StoreResource,
                           shared_evaluator: SharedEvaluatorResource
                           ) -> dg.SensorResult | dg.SkipReason:
    """Scoring runs for the trace versions the current release has not scored, in batches.

    Before the first release every trace waits. A new release has scored nothing, so every trace
    is pending for it; a reimport bumps the trace's version, so it is pending again.
    """
    store = database.store
    release = store.latest_release()
    if release is None:
        return dg.SkipReason("no shared evaluator release yet: traces wait for the first release")
    size = shared_evaluator.batch_size()
    running, covered = in_flight(context.instance, release.version)
    room = max(0, MAX_SCORING_RUNS - running) * size
    if not room:
        return dg.SkipReason(f"{running} scoring runs in flight, the most at once")
    pending = [(w.trace_id, w.trace_version)
               for w in store.scoring_work(personal=False, evaluator=release.version,
                                           limit=room + len(covered))
               if (w.trace_id, w.trace_version) not in covered][:room]
    tick = int(context.cursor or 0) + 1
    batches = [pending[i:i + size] for i in range(0, len(pending), size)]
    ensure_worker_pool(context.instance)
    return dg.SensorResult(
        run_requests=[dg.RunRequest(run_key=f"{release.version}:{tick}:{index}",
                                    run_config=scoring_batch_config(release.version, batch),
                                    tags={RELEASE_TAG: release.version,
                                          **priority_tags("background")})
                      for index, batch in enumerate(batches)],
        cursor=str(tick))
