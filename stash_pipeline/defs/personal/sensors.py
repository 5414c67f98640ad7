"""Queued models become partitions and runs; Score again requests become runs; a run that dies
outside the worker still leaves its model failed with a reason."""

import dagster as dg

from stash_pipeline.defs.abandoned_runs import fail_abandoned_runs, prune_job_dirs
from stash_pipeline.defs.personal.jobs import personal_training_job
from stash_pipeline.defs.personal.partitions import (
    ATTEMPT_TAG,
    MODEL_NAME_TAG,
    MODEL_TAG,
    SCORE_AGAIN_TAG,
    model_id_of,
    model_partition_key,
    personal_reward_model,
)
from stash_pipeline.defs.resources import ComputeResource, StoreResource
from stash_pipeline.defs.runs import launch_failure, record_dead_run
from stash_pipeline.defs.scoring.jobs import trace_scoring_job
from stash_pipeline.defs.sensor_cursors import (
    REQUEST_INTERVAL_S,
    REQUESTS_PER_TICK,
    parse_time_cursor,
    settled_cursor,
    time_cursor,
    unstarted,
)
from stash_pipeline.defs.stuck_models import end_stuck_models
from stash_pipeline.defs.worker_queue import priority_tags
from stash_pipeline.services import reward_models
from stash_pipeline.store import RewardModelRecord

INTERVAL_S = 10
ABANDONED_INTERVAL_S = 30


@dg.sensor(job=personal_training_job, minimum_interval_seconds=INTERVAL_S,
           default_status=dg.DefaultSensorStatus.RUNNING,
           description="Starts a training run for each queued personal reward model (one per "
                       "model and attempt; its partition is named by the model's name and id, "
                       "its run tags name the model).")
def queued_reward_models(context: dg.SensorEvaluationContext,
                         database: StoreResource) -> dg.SensorResult:
    """One run per queued model and attempt: the run key names both, so a retry (a new attempt)
    is never blocked by the key of the attempt before it. A tick reads the models queued since
    its cursor, REQUESTS_PER_TICK at most, and asks for the runs of RUNS_PER_TICK of them that
    have none (sensor_cursors), so a model whose run never starts holds up no other."""
    page = database.store.queued_models(parse_time_cursor(context.cursor), REQUESTS_PER_TICK)
    queued, covered = unstarted(context, page, training_run_key)
    return dg.SensorResult(
        cursor=settled_cursor(covered, lambda m: m.queued_at,
                              lambda m: time_cursor(m.queued_at, m.id), context.cursor),
        run_requests=[dg.RunRequest(partition_key=model_partition_key(m),
                                    run_key=training_run_key(m),
                                    tags={MODEL_TAG: m.id, MODEL_NAME_TAG: m.name[:200],
                                          ATTEMPT_TAG: str(m.attempt),
                                          **priority_tags("request")})
                      for m in queued],
        dynamic_partitions_requests=_partitions_to_add(
            context, [model_partition_key(m) for m in queued]),
    )


def training_run_key(model: RewardModelRecord) -> str:
    """The run key of the model's training run at its current attempt."""
    return f"{model.id}:{model.attempt}"


@dg.sensor(job=trace_scoring_job, minimum_interval_seconds=REQUEST_INTERVAL_S,
           default_status=dg.DefaultSensorStatus.RUNNING,
           description="Starts a scoring run for each Score again request of a succeeded "
                       "personal model: it queues the owner's every trace for the model's saved "
                       "checkpoint and scores the first bounded chunk; the scoring queue's "
                       "chunks (pending_scoring) score the rest.")
def score_again_requests(context: dg.SensorEvaluationContext,
                         database: StoreResource) -> dg.SensorResult:
    """A scoring run of the owner's every trace for each Score again request of a succeeded
    model (one run key per request), with actions when it was trained on action comparisons:
    it queues them all and scores the first chunk (defs.scoring.assets.batch_traces).
    A tick reads the models asked since its cursor, through an index, and asks for the runs of
    RUNS_PER_TICK of them that have none (sensor_cursors)."""
    page = database.store.score_again_requested(parse_time_cursor(context.cursor),
                                                REQUESTS_PER_TICK)
    models, covered = unstarted(context, page, reward_models.score_again_run_key)
    return dg.SensorResult(cursor=settled_cursor(
        covered, lambda m: m.score_requested_at,
        lambda m: time_cursor(m.score_requested_at, m.id), context.cursor), run_requests=[
        dg.RunRequest(run_key=reward_models.score_again_run_key(m),
                      run_config={"ops": {"trace_scores": {"config": {
                          "evaluator": m.id, "whole_owner": True,
                          "actions": bool((m.metrics or {}).get("action_scoring_version"))}}}},
                      tags={MODEL_TAG: m.id, MODEL_NAME_TAG: m.name[:200],
                            SCORE_AGAIN_TAG: str(m.score_generation),
                            **priority_tags("request")})
        for m in models])


def _partitions_to_add(context: dg.SensorEvaluationContext,
                       keys: list[str]) -> list[dg.AddDynamicPartitionsRequest]:
    """The partitions of these keys the instance still lacks (a model's runs need its
    partition): one lookup for them all, never the list of every partition."""
    existing = context.instance.get_existing_dynamic_partitions(personal_reward_model.name, keys)
    new = [key for key in keys if key not in existing]
    return [personal_reward_model.build_add_request(new)] if new else []


@dg.run_failure_sensor(monitored_jobs=[personal_training_job],
                       default_status=dg.DefaultSensorStatus.RUNNING,
                       description="Marks a personal reward model failed when its training run "
                                   "dies outside a step (a crash, run monitoring, a launch "
                                   "that failed after the run queue's retries), with the "
                                   "reason; a model a step already failed is left as it is. "
                                   "The run's job directories keep only their logs.")
def failed_reward_model_runs(context: dg.RunFailureSensorContext, database: StoreResource,
                             compute: ComputeResource) -> None:
    # A run that failed before it started (its code server unreachable after the coordinator's
    # retries) says so in the engine's words.
    message = (launch_failure(context.instance, context.dagster_run.run_id)
               or context.failure_event.message or "the run failed")
    reason = record_dead_run(context.dagster_run, message, database, compute)
    prune_job_dirs(context.dagster_run)
    if reason:
        key = context.dagster_run.tags["dagster/partition"]
        context.log.info(f"reward model {model_id_of(key)} failed")


@dg.run_status_sensor(run_status=dg.DagsterRunStatus.CANCELED,
                      monitored_jobs=[personal_training_job],
                      default_status=dg.DefaultSensorStatus.RUNNING,
                      description="Marks a personal reward model failed when its training run "
                                  "is cancelled, so it never stays running; the run's job "
                                  "directories keep only their logs.")
def cancelled_reward_model_runs(context: dg.RunStatusSensorContext, database: StoreResource,
                                compute: ComputeResource) -> None:
    record_dead_run(context.dagster_run, "the run was cancelled", database, compute)
    prune_job_dirs(context.dagster_run)


@dg.sensor(minimum_interval_seconds=ABANDONED_INTERVAL_S,
           default_status=dg.DefaultSensorStatus.RUNNING,
           description="Ends stuck requests: fails runs whose launching command died (a killed "
                       "--wait: the run failed with the reason, its reward_worker slot freed, "
                       "its job directories pruned to their logs, its model or Score again "
                       "failed), and fails a model whose run ended without storing it, so rm "
                       "retry works.")
def abandoned_runs(context: dg.SensorEvaluationContext, database: StoreResource,
                   compute: ComputeResource) -> dg.SensorResult:
    """Runs a `--wait` command started on this host whose command died (SIGKILL): failed, their
    pool slots freed, their models failed with the reason; then a page of in-progress models
    whose run has ended without storing them, failed (defs.stuck_models); within this sensor's
    interval."""
    failed = fail_abandoned_runs(context.instance, None, lambda run, message: record_dead_run(
        run, message, database, compute))
    ended, cursor = end_stuck_models(context.instance, database.store, context.cursor)
    said = [f"failed {len(failed)} run(s) whose command died" if failed
            else "no run lost its command"]
    if ended:
        said.append(f"failed {len(ended)} model(s) whose run ended without storing them")
    return dg.SensorResult(skip_reason="; ".join(said), cursor=cursor)
