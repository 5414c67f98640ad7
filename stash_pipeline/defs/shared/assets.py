"""The shared evaluator's chain: pairs -> split -> candidate -> benchmark -> release.

Each asset is a step of ``pipelines.shared_evaluator`` over the SQL store (MaterializeResult, no IO
manager). What a step hands the next travels through the store or the object store (the
candidate's checkpoint and training metrics, under keys computed from the candidate): no step
reads another's job directory. The release gate is the blocking check on ``benchmark_results``
(checks.py): a candidate that fails it never reaches ``shared_evaluator_release``.
"""

import dagster as dg

from stash_pipeline.compute.contract import LOSSES, job_directory, keep_only_logs
from stash_pipeline.compute.run import run_job, uploaded_checkpoint
from stash_pipeline.compute.upload import hand_over_results
from stash_pipeline.core.training_settings import DEFAULT_MAX_PAIRS
from stash_pipeline.core.trust import held_out_report
from stash_pipeline.defs import metadata
from stash_pipeline.defs.resources import (
    ComputeResource,
    ExtractionResource,
    ObjectStoreResource,
    SharedEvaluatorResource,
    StoreResource,
)
from stash_pipeline.defs.shared.candidate import CANDIDATE, current_candidate, new_candidate
from stash_pipeline.defs.shared.report import gate_metadata
from stash_pipeline.defs.traces.assets import traces
from stash_pipeline.defs.worker_queue import worker_step_lease
from stash_pipeline.defs.worker_runs import REWARD_POOL, failing_step
from stash_pipeline.objects.keys import shared_evaluator_checkpoint_key
from stash_pipeline.pipelines import shared_evaluator as steps
from stash_pipeline.pipelines.worker_io import handed_over_results, read_losses, read_results

GROUP = "shared_evaluator"
TRAIN_JOB = "train"


class SharedPairsConfig(dg.Config):
    max_pairs: int = DEFAULT_MAX_PAIRS  # cap on the candidate's training pairs (seeded sample)


class SharedCandidateConfig(dg.Config):
    base_model: str | None = None  # None: STASH_SHARED_BASE_MODEL, else Qwen/Qwen3-0.6B
    epochs: int = 1


@dg.asset(deps=[traces], group_name=GROUP, kinds={"sql"})
def shared_training_pairs(context: dg.AssetExecutionContext, config: SharedPairsConfig,
                          database: StoreResource,
                          extraction: ExtractionResource) -> dg.MaterializeResult:
    """A new candidate's data from opted-in traces: step ratings, corrections and independently
    reviewed comparisons to train on; human-reviewed and verified-outcome comparisons for the
    separate benchmark; no source trace in both (checked)."""
    candidate = new_candidate(context)
    with failing_step():
        report = steps.build_pairs(database.store, candidate, max_pairs=config.max_pairs,
                                   config=extraction.config())
    return dg.MaterializeResult(metadata={
        CANDIDATE: candidate, "incumbent": str(report["incumbent"]),
        "pairs": report["pairs"], "benchmark_pairs": report["benchmark_pairs"],
        "traces_in_both": report["traces_in_both"],
        "by_source": metadata.key_values(report["by_source"]),
        "benchmark_by_source": metadata.key_values(report["benchmark_by_source"]),
        "traces": metadata.key_values({
            "opted in": report["opted_in_traces"], "training": report["training_traces"],
            "benchmark": report["benchmark_traces"],
            "groups kept out of the benchmark (the incumbent trained on them)":
                report["kept_out_of_benchmark"],
            "source traces of training pairs": report["training_source_traces"],
            "source traces of benchmark pairs": report["benchmark_source_traces"],
            "in both": report["traces_in_both"],
            "comparisons across training and benchmark (unused)":
                report["crossing_comparisons"]}),
        "extraction": metadata.extraction(report),
        "dropped_by_max_pairs": report["dropped_by_max_pairs"],
    })


@dg.asset(deps=[shared_training_pairs], group_name=GROUP, kinds={"sql"})
def shared_split(context: dg.AssetExecutionContext,
                 database: StoreResource) -> dg.MaterializeResult:
    """The trace-level split of the candidate's training pairs: 10% of source traces held out."""
    candidate = current_candidate(context)
    with failing_step():
        counts = steps.split(database.store, candidate).counts()
    return dg.MaterializeResult(metadata={CANDIDATE: candidate, **metadata.split(counts)})


@dg.asset(deps=[shared_split], group_name=GROUP, kinds={"pytorch"}, pool=REWARD_POOL)
def shared_candidate(context: dg.AssetExecutionContext, config: SharedCandidateConfig,
                     database: StoreResource, objects: ObjectStoreResource,
                     compute: ComputeResource,
                     shared_evaluator: SharedEvaluatorResource) -> dg.MaterializeResult:
    """Bradley-Terry training by the worker (RM_COMPUTE) on the shared rendering (system
    instructions and metadata.evaluation_context); the archive goes to the object store, and
    beside it the job's metrics for ``benchmark_results``. The job directory keeps its logs only."""
    candidate = current_candidate(context)
    job_dir = job_directory(compute.scratch, steps.SHARED_DIR, candidate, TRAIN_JOB)
    key = shared_evaluator_checkpoint_key(candidate)
    with failing_step(), worker_step_lease(context, database.store, "shared_candidate"):
        try:
            uri, metrics = run_job(
                job_dir, lambda job_dir: steps.write_training_job(
                    database.store, candidate, job_dir,
                    base_model=config.base_model or shared_evaluator.default_base_model(),
                    epochs=config.epochs),
                compute.worker(context, objects, upload_key=key),
                lambda job_dir: (uploaded_checkpoint(job_dir),
                                 read_results(job_dir, candidate).metrics))
            hand_over_results(objects.objects, job_dir, key)
            losses = read_losses(job_dir / LOSSES)
        finally:
            keep_only_logs(job_dir)  # the weights and metrics are in the object store, or it failed
    return dg.MaterializeResult(metadata={
        CANDIDATE: candidate, **metadata.training(uri, metrics, losses),
        **metadata.trust(held_out_report(candidate, "shared", metrics))})


@dg.asset(deps=[shared_candidate], group_name=GROUP, kinds={"pytorch"}, pool=REWARD_POOL)
def benchmark_results(context: dg.AssetExecutionContext, database: StoreResource,
                      objects: ObjectStoreResource,
                      compute: ComputeResource) -> dg.MaterializeResult:
    """The candidate and the incumbent score the separate benchmark; the release gate's report,
    overall and per tool, domain and agent slice (checks.py decides on it). The candidate's
    checkpoint and training metrics come from the object store, so this runs in a task of its
    own (a re-execution, a step launcher) as well."""
    store, candidate = database.store, current_candidate(context)
    key = shared_evaluator_checkpoint_key(candidate)
    incumbent = store.latest_release()

    def rewards(evaluator: str, uri: str) -> dict:
        return steps.benchmark_rewards(store, candidate, evaluator, uri,
                                       compute.worker(context, objects), compute.scratch)

    # The handed-over metrics stay: it can run again (as a new run).
    with failing_step(), worker_step_lease(context, store, "benchmark_results"):
        ours = rewards(candidate, objects.objects.uri_for(key))
        theirs = rewards(incumbent.version, incumbent.checkpoint_uri) if incumbent else {}
        metrics = handed_over_results(objects.objects, key, candidate).metrics
        comparison = steps.decide(store, candidate, incumbent=incumbent, candidate_rewards=ours,
                                  incumbent_rewards=theirs, metrics=metrics)
    reasons = comparison.report.get("reasons") or []
    context.log.info(f"candidate {candidate}: {'passes' if comparison.passed else 'blocked'}"
                     + "".join(f"\n- {reason}" for reason in reasons))
    return dg.MaterializeResult(metadata={CANDIDATE: candidate,
                                          **gate_metadata(comparison.report)})


@dg.asset(deps=[benchmark_results], group_name=GROUP, kinds={"sql"})
def shared_evaluator_release(context: dg.AssetExecutionContext, database: StoreResource,
                             objects: ObjectStoreResource) -> dg.MaterializeResult:
    """The candidate becomes the released evaluator: every trace is scored again by it (the
    auto-scoring sensor), and the next candidates are compared with it."""
    store, candidate = database.store, current_candidate(context)
    with failing_step():
        release = steps.release(store, candidate,
                                objects.objects.uri_for(shared_evaluator_checkpoint_key(candidate)))
    overall = release.benchmark_report["overall"]
    return dg.MaterializeResult(metadata={
        "version": release.version, "checkpoint_uri": dg.MetadataValue.path(release.checkpoint_uri),
        "benchmark_accuracy": overall["candidate"], "benchmark_pairs": overall["pairs"],
        "training_traces": len(release.data_snapshot["training_traces"]),
        "benchmark_traces": len(release.data_snapshot["benchmark_traces"]),
        "traces_to_score": len(store.traces_pending_scoring(release.version)),
        # Before it scores anyone's traces: its benchmark, and its training inputs' truncation.
        **metadata.trust(held_out_report(
            release.version, "shared", release.benchmark_report.get("candidate_metrics") or {},
            benchmark=release.benchmark_report)),
    })
