"""A personal reward model's run: pairs -> split -> checkpoint -> scores, one partition per model.

Each asset is a step of ``pipelines.personal_training`` over the SQL store (MaterializeResult, no IO
manager). Any failure marks the model failed with its reason (for the worker: the last 2000
characters of worker.log) before the step fails, and no checkpoint of a failed attempt stays
visible. What a step hands the next travels through the store or the object store, found by the
model id and attempt: no step reads another's job directory, so each may run in a task of its own.
A re-execution from failure resumes the model at its first step (``pipelines.personal_training
.resume``): a new attempt from the split or the training, the failed attempt itself from the
storing step, whose failure keeps that attempt's handed-over files for it.
"""

import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import dagster as dg

from stash_pipeline.compute.contract import LOSSES, job_directory, keep_only_logs
from stash_pipeline.compute.run import run_job, uploaded_checkpoint
from stash_pipeline.compute.upload import discard_results, hand_over_results
from stash_pipeline.compute.worker_log import LOG, append_log, phase_done_line
from stash_pipeline.core.trust import held_out_report
from stash_pipeline.defs import metadata
from stash_pipeline.defs.personal.partitions import model_id_of, personal_reward_model
from stash_pipeline.defs.resources import (
    ComputeResource,
    ExtractionResource,
    ObjectStoreResource,
    StoreResource,
)
from stash_pipeline.defs.scoring.chunks import next_chunk_size
from stash_pipeline.defs.step_leases import step_lease
from stash_pipeline.defs.traces.assets import traces
from stash_pipeline.defs.worker_queue import worker_step_lease
from stash_pipeline.defs.worker_runs import REWARD_POOL, failing_step, failure_text
from stash_pipeline.objects.keys import reward_model_checkpoint_key
from stash_pipeline.pipelines import personal_training as steps
from stash_pipeline.pipelines.worker_io import handed_over_results, read_losses, read_results
from stash_pipeline.store import Store

GROUP = "personal_reward_models"
EXTRACTION_SECONDS = "extraction_seconds"


@contextmanager
def model_fails_with(store: Store, model_id: str, objects: ObjectStoreResource | None = None,
                     scratch: Path | None = None) -> Iterator[None]:
    """On any error: the model becomes failed with the reason, its uploaded checkpoint goes, and
    with ``scratch`` its attempt's job directory keeps only the logs."""
    def fail_model(error: Exception) -> None:
        steps.fail(store, model_id, failure_text(error))
        if objects is not None:
            steps.discard_checkpoint(store, objects.objects, model_id)
        if scratch is not None:
            with suppress(Exception):  # best effort: never hide the failure itself
                attempt = store.get_reward_model(model_id).attempt
                keep_only_logs(job_directory(scratch, model_id, steps.attempt_name(attempt)))

    with failing_step(fail_model):
        yield


@dg.asset(partitions_def=personal_reward_model, deps=[traces], group_name=GROUP, kinds={"sql"})
def personal_pairs(context: dg.AssetExecutionContext, database: StoreResource,
                   extraction: ExtractionResource) -> dg.MaterializeResult:
    """The request's traces' pairs: step and trace ratings, comparisons, outcomes and extracted
    comments, corrections and assessment, capped at max_pairs."""
    store, model_id = database.store, model_id_of(context.partition_key)
    with failing_step(), step_lease(store, context.run.run_id, "personal_pairs"):
        model = steps.start(store, model_id, context.run.run_id,
                            retry=context.run.parent_run_id is not None)
        context.log.info(f"reward model {model.name!r} (attempt {model.attempt}) is queued: it "
                         "runs once its training step holds the worker")
        with model_fails_with(store, model_id):
            started = time.perf_counter()
            report = steps.build_pairs(store, model, extraction.config())
            seconds = time.perf_counter() - started
    return dg.MaterializeResult(metadata={
        "reward_model": f"{model.name} (owner {model.owner})",
        EXTRACTION_SECONDS: seconds,
        "pairs": report["pairs"], "dropped_by_max_pairs": report["dropped_by_max_pairs"],
        "orphaned_feedback": report["orphaned_feedback"],
        "by_source": metadata.key_values(report["by_source"]),
        "extraction": metadata.extraction(report),
        "generated_pairs": report["generated_pairs"],
    })


@dg.asset(partitions_def=personal_reward_model, deps=[personal_pairs], group_name=GROUP,
          kinds={"sql"})
def personal_split(context: dg.AssetExecutionContext,
                   database: StoreResource) -> dg.MaterializeResult:
    """The trace-level split: 10% of source traces held out, crossing pairs excluded, seed 0."""
    store, model_id = database.store, model_id_of(context.partition_key)
    with (model_fails_with(store, model_id),
          step_lease(store, context.run.run_id, "personal_split")):
        model = steps.resume(store, model_id, context.run.run_id, context.run.parent_run_id,
                             same_attempt=False)
        counts = steps.split(store, model).counts()
    return dg.MaterializeResult(metadata=metadata.split(counts))


@dg.asset(partitions_def=personal_reward_model, deps=[personal_split], group_name=GROUP,
          kinds={"pytorch"}, pool=REWARD_POOL)
def personal_checkpoint(context: dg.AssetExecutionContext, database: StoreResource,
                        objects: ObjectStoreResource,
                        compute: ComputeResource) -> dg.MaterializeResult:
    """Bradley-Terry training by the worker (RM_COMPUTE), which then scores one background
    chunk's worth of the owner's traces (defs.scoring.chunks; the rest are queued as the model
    succeeds); the archive goes to the object store, and beside it the job's metrics and scores
    for ``personal_scores``. The job directory keeps its logs only."""
    store, model_id = database.store, model_id_of(context.partition_key)
    with (model_fails_with(store, model_id, objects, compute.scratch),
          worker_step_lease(context, store, "personal_checkpoint")):
        steps.resume(store, model_id, context.run.run_id, context.run.parent_run_id,
                     same_attempt=False)
        # This step's body runs once it holds the reward_worker slot: the model is running now.
        model = steps.hold_worker(store, model_id, context.run.run_id)
        if model.attempt > 1:  # a failed storing step kept the attempt before's files
            steps.discard_attempt(objects.objects, model_id, model.attempt - 1)
        job_dir = job_directory(compute.scratch, model_id, steps.attempt_name(model.attempt))
        key = reward_model_checkpoint_key(model_id, steps.attempt_name(model.attempt))
        uri, results = run_job(
            job_dir, lambda job_dir: steps.write_training_job(
                store, model, job_dir, score_limit=next_chunk_size(context.instance)),
            compute.worker(context, objects, upload_key=key),
            lambda job_dir: (uploaded_checkpoint(job_dir), read_results(job_dir, model_id)))
        hand_over_results(objects.objects, job_dir, key)
        losses = read_losses(job_dir / LOSSES)
        _log_extraction(context, job_dir)
    keep_only_logs(job_dir)  # the weights and results are in the object store now
    return dg.MaterializeResult(metadata={
        **metadata.training(uri, results.metrics, losses),
        **metadata.trust(held_out_report(model_id, "personal", results.metrics))})


def _log_extraction(context: dg.AssetExecutionContext, job_dir: Path) -> None:
    """The pairs step's extraction, a phase of the job run before it, in the job's worker.log."""
    records = context.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=personal_pairs.key,
                              asset_partitions=[context.partition_key]), limit=1,
        ascending=False).records
    seconds = records[0].asset_materialization.metadata.get(EXTRACTION_SECONDS) if records else None
    if seconds is not None and (job_dir / LOG).is_file():
        append_log(job_dir, phase_done_line("extraction", float(seconds.value)))


# No pool: storing needs no worker, so a model whose worker is done is succeeded at once, not after
# the next model's training, which holds the reward_worker slot (issue 18).
@dg.asset(partitions_def=personal_reward_model, deps=[personal_checkpoint], group_name=GROUP,
          kinds={"sql"})
def personal_scores(context: dg.AssetExecutionContext, database: StoreResource,
                    objects: ObjectStoreResource) -> dg.MaterializeResult:
    """The training job's scores (raw and calibrated; action scores with credit when trained on
    action comparisons), stored with metrics and checkpoint as the model succeeds; the owner's
    other traces, Score again and traces imported later are scored by ``trace_scores`` runs
    (defs/scoring), the first in background chunks of the scoring queue.

    It reads what ``personal_checkpoint`` handed over beside the attempt's checkpoint in the object
    store, so it runs in a task of its own (a re-execution, a step launcher) as well. Its failure
    keeps those files and the archive (not visible: a failed model has no checkpoint), so a
    re-execution from failure stores them without training again."""
    store, model_id = database.store, model_id_of(context.partition_key)
    with (model_fails_with(store, model_id),
          step_lease(store, context.run.run_id, "personal_scores")):
        model = steps.resume(store, model_id, context.run.run_id, context.run.parent_run_id,
                             same_attempt=True)
        key = reward_model_checkpoint_key(model_id, steps.attempt_name(model.attempt))
        results = handed_over_results(objects.objects, key, model_id)
        steps.succeed(store, model_id, results, objects.objects.uri_for(key))
    discard_results(objects.objects, key)  # their rows are in the store now
    trust = metadata.saved_trust(store, model.owner, model_id, context.log.warning)
    raw = [score.raw for score in results.scores]
    ranked = sorted(results.scores, key=lambda s: s.raw)
    top = [{"trace": s.trace_id, "raw": s.raw, "calibrated": s.calibrated}
           for s in ranked[::-1][:5]]
    bottom = [{"trace": s.trace_id, "raw": s.raw, "calibrated": s.calibrated} for s in ranked[:5]]
    return dg.MaterializeResult(metadata={
        "scored_traces": len(results.scores), "scored_actions": len(results.action_scores),
        "score_histogram": metadata.histogram(raw, title="Whole-trace scores",
                                              x_label="raw reward"),
        "top_traces": metadata.table(top, ["trace", "raw", "calibrated"]),
        "bottom_traces": metadata.table(bottom, ["trace", "raw", "calibrated"]),
        **trust,
    })

