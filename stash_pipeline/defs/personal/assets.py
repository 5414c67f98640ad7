"""A personal reward model's run: pairs -> split -> checkpoint -> scores, one partition per model.

Each asset is a step of ``services.personal_training`` over the SQL store (MaterializeResult, no IO
manager). Any failure marks the model failed with its reason (for the worker: the last 2000
characters of worker.log) before the step fails, and no checkpoint of a failed attempt stays visible.
"""

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg

from stash_pipeline.compute.job import LOG, LOSSES, append_log, phase_done_line
from stash_pipeline.compute.run import run_job, run_worker_job, uploaded_checkpoint
from stash_pipeline.defs import metadata
from stash_pipeline.defs.personal.partitions import SCORE_AGAIN_TAG, personal_reward_model
from stash_pipeline.defs.resources import (
    ComputeResource, ExtractionResource, ObjectStoreResource, StoreResource,
)
from stash_pipeline.defs.traces.assets import traces
from stash_pipeline.defs.worker_runs import REWARD_POOL, failure_text
from stash_pipeline.services import personal_training as steps
from stash_pipeline.services.worker_jobs import read_losses, read_results
from stash_pipeline.store import Store

GROUP = "personal_reward_models"
EXTRACTION_SECONDS = "extraction_seconds"


@contextmanager
def model_fails_with(store: Store, model_id: str, objects: ObjectStoreResource | None = None,
                     ) -> Iterator[None]:
    """On any error: the model becomes failed with the reason, and its uploaded checkpoint goes."""
    try:
        yield
    except Exception as error:
        reason = failure_text(error)
        steps.fail(store, model_id, reason)
        if objects is not None:
            steps.discard_checkpoint(store, objects.objects, model_id)
        raise dg.Failure(description=reason) from error


@dg.asset(partitions_def=personal_reward_model, deps=[traces], group_name=GROUP, kinds={"sql"})
def personal_pairs(context: dg.AssetExecutionContext, database: StoreResource,
                   extraction: ExtractionResource) -> dg.MaterializeResult:
    """The request's traces' pairs: step and trace ratings, comparisons, outcomes and extracted
    comments, corrections and assessment, capped at max_pairs."""
    store, model_id = database.store, context.partition_key
    model = steps.start(store, model_id, context.run.run_id,
                        retry=context.run.parent_run_id is not None)
    context.log.info(f"reward model {model.name!r} (attempt {model.attempt}) is running")
    with model_fails_with(store, model_id):
        started = time.perf_counter()
        report = steps.build_pairs(store, model, extraction.config())
        seconds = time.perf_counter() - started
    return dg.MaterializeResult(metadata={
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
    store, model_id = database.store, context.partition_key
    with model_fails_with(store, model_id):
        counts = steps.split(store, store.get_reward_model(model_id)).counts()
    return dg.MaterializeResult(metadata=metadata.split(counts))


@dg.asset(partitions_def=personal_reward_model, deps=[personal_split], group_name=GROUP,
          kinds={"pytorch"}, pool=REWARD_POOL)
def personal_checkpoint(context: dg.AssetExecutionContext, database: StoreResource,
                        objects: ObjectStoreResource,
                        compute: ComputeResource) -> dg.MaterializeResult:
    """Bradley-Terry training by the worker (RM_COMPUTE), which also scores the owner's traces;
    the archive goes to the object store."""
    store, model_id = database.store, context.partition_key
    with model_fails_with(store, model_id, objects):
        model = store.get_reward_model(model_id)
        job_dir = steps.job_directory(compute.scratch, model_id, model.attempt)
        key = steps.checkpoint_key(model_id, model.attempt)
        uri, results = run_job(
            job_dir, lambda job_dir: steps.write_training_job(store, model, job_dir),
            lambda job_dir: run_worker_job(context, compute.target(), job_dir, objects.objects,
                                           upload_key=key),
            lambda job_dir: (uploaded_checkpoint(job_dir), read_results(job_dir, model_id)))
        _log_extraction(context, job_dir)
    return dg.MaterializeResult(
        metadata=metadata.training(uri, results.metrics, read_losses(job_dir / LOSSES)))


def _log_extraction(context: dg.AssetExecutionContext, job_dir: Path) -> None:
    """The pairs step's extraction, a phase of the job run before it, in the job's worker.log."""
    records = context.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=personal_pairs.key,
                              asset_partitions=[context.partition_key]), limit=1,
        ascending=False).records
    seconds = records[0].asset_materialization.metadata.get(EXTRACTION_SECONDS) if records else None
    if seconds is not None and (job_dir / LOG).is_file():
        append_log(job_dir, phase_done_line("extraction", float(seconds.value)))


@dg.asset(partitions_def=personal_reward_model, deps=[personal_checkpoint], group_name=GROUP,
          kinds={"sql"}, pool=REWARD_POOL)
def personal_scores(context: dg.AssetExecutionContext, database: StoreResource,
                    objects: ObjectStoreResource,
                    compute: ComputeResource) -> dg.MaterializeResult:
    """Every trace of the owner scored (raw and calibrated; action scores with credit when trained
    on action comparisons), stored with metrics and checkpoint as the model succeeds. In a Score
    again run: the saved checkpoint scores again, without labelling calls or retraining."""
    store, model_id = database.store, context.partition_key
    generation = context.run.tags.get(SCORE_AGAIN_TAG)
    if generation is not None:
        results = steps.score_again(store, model_id, int(generation),
                                    lambda job_dir, uri: run_worker_job(
                                        context, compute.target(), job_dir, objects.objects,
                                        checkpoint_uri=uri), compute.scratch)
    else:
        with model_fails_with(store, model_id, objects):
            model = store.get_reward_model(model_id)
            job_dir = steps.job_directory(compute.scratch, model_id, model.attempt)
            results = read_results(job_dir, model_id)
            steps.succeed(store, model_id, results, uploaded_checkpoint(job_dir))
    raw = [score.raw for score in results.scores]
    ranked = sorted(results.scores, key=lambda s: s.raw)
    top = [{"trace": s.trace_id, "raw": s.raw, "calibrated": s.calibrated}
           for s in ranked[::-1][:5]]
    bottom = [{"trace": s.trace_id, "raw": s.raw, "calibrated": s.calibrated} for s in ranked[:5]]
    return dg.MaterializeResult(metadata={
        "scored_traces": len(results.scores), "scored_actions": len(results.action_scores),
        "score_histogram": metadata.histogram(raw),
        "top_traces": metadata.table(top, ["trace", "raw", "calibrated"]),
        "bottom_traces": metadata.table(bottom, ["trace", "raw", "calibrated"]),
        "score_again": generation is not None,
    })
