"""The one scoring path: scores of chosen traces by one saved checkpoint (a release or a personal
model), in the reward pool. Score again for selected traces, Score again of a model's whole owner
set, and the background chunks of the scoring queue: the current release's action credit of every
trace version it has not scored, and the kept-current personal models' scores of their owners'
traces."""

import time

import dagster as dg

from stash_pipeline.compute.contract import budget_stop_line
from stash_pipeline.defs import metadata
from stash_pipeline.defs.resources import ComputeResource, ObjectStoreResource, StoreResource
from stash_pipeline.defs.scoring import chunks
from stash_pipeline.defs.traces.assets import traces
from stash_pipeline.defs.worker_queue import worker_step_lease
from stash_pipeline.defs.worker_runs import REWARD_POOL, failing_step
from stash_pipeline.pipelines import trace_scoring as steps
from stash_pipeline.pipelines.worker_io import JobResults

GROUP = "scoring"


class TraceScoringConfig(dg.Config):
    evaluator: str  # a release version or a personal model id
    actions: bool  # Score actions too
    whole_traces: bool = True  # whole-trace scores (a release's background chunks: actions only)
    trace_ids: list[str] = []
    versions: list[int] = []  # the version of each trace when the run was asked for
    request: str | None = None  # a Score again request (its id): its traces
    request_id: int | None = None  # the same, in runs asked for before 0012 (integer ids)
    whole_owner: bool = False  # every trace of the model's owner (`rm score`)
    # The worker's work budget (chunks.chunk_seconds() for a background chunk): it stops
    # between groups of traces once spent; the traces it did not start stay queued.
    work_seconds: float | None = None


def _request(config: TraceScoringConfig) -> str | int | None:
    return config.request if config.request is not None else config.request_id


def batch_traces(instance: dg.DagsterInstance, database: StoreResource,
                 config: TraceScoringConfig) -> dict[str, int]:
    """The traces this run scores: a request's, the first chunk of a Score again of the owner's
    every trace (the rest queued), or a background chunk's."""
    store = database.store
    if _request(config) is not None:
        return store.get_scoring_request(_request(config)).traces
    if config.whole_owner:
        return steps.owner_traces(store, config.evaluator,
                                  chunks.next_chunk_size(instance, evaluator=config.evaluator))
    return dict(zip(config.trace_ids, config.versions))


def work_budget(config: TraceScoringConfig) -> float | None:
    """The worker's budget: the config's (a background chunk's), a Score again of the owner's
    every trace's first chunk as any chunk's; None for a request for chosen traces."""
    if config.work_seconds is None and config.whole_owner:
        return float(chunks.chunk_seconds())
    return config.work_seconds


@dg.asset(deps=[traces], group_name=GROUP, kinds={"pytorch"}, pool=REWARD_POOL)
def trace_scores(context: dg.AssetExecutionContext, config: TraceScoringConfig,
                 database: StoreResource, objects: ObjectStoreResource,
                 compute: ComputeResource) -> dg.MaterializeResult:
    """Whole-trace scores and action credit, as the config asks, of one batch of traces by one
    saved checkpoint: a fresh run, without labelling calls or retraining."""
    started = time.perf_counter()
    with failing_step(), worker_step_lease(context, database.store, "trace_scores"):
        results = steps.score(
            database.store, config.evaluator, batch_traces(context.instance, database, config),
            actions=config.actions, whole_traces=config.whole_traces,
            run=compute.worker(context, objects), artifact_dir=compute.scratch,
            name=context.run.run_id, work_seconds=work_budget(config))
    stop = budget_stop(results)
    if stop:
        context.log.info(stop)
    raw = [score.raw for score in results.scores]
    credits = [score.credit for score in results.action_scores if score.credit is not None]
    return dg.MaterializeResult(metadata={
        "evaluator": config.evaluator,
        chunks.SCORED_TRACES: len(results.finished if results.finished is not None
                                  else results.scored or results.scores),
        **({"budget_stop": stop} if stop else {}),
        chunks.WORK_SECONDS: time.perf_counter() - started,
        "scored_actions": len(results.action_scores),
        **({"score_histogram": metadata.histogram(raw)} if raw else {}),
        **({"credit_histogram": metadata.histogram(credits, title="Action credit",
                                                   x_label="credit")} if credits else {}),
        "request": str(_request(config) or (chunks.CHUNK_RUNS[1] if config.whole_owner
                                            else chunks.CHUNK_RUNS[0])),
        **({"queued_for_score_again": database.store.score_again_queued(config.evaluator)}
           if config.whole_owner else {}),
        **_trust(context, database, config),
    })


def budget_stop(results: JobResults) -> str | None:
    """The worker's line when its work budget stopped it before every trace (None otherwise)."""
    left = results.metrics.get("unfinished_traces") or 0
    if not left or results.finished is None:
        return None
    return budget_stop_line(len(results.finished), len(results.finished) + left,
                            results.metrics.get("work_seconds_budget") or 0)


def _trust(context: dg.AssetExecutionContext, database: StoreResource,
           config: TraceScoringConfig) -> dict:
    """Score again asked by a person: the evaluator's trust report on their traces, made now.
    Auto-scoring's batches leave it to the next look (each would read the owner's every trace)."""
    store = database.store
    if _request(config) is not None:
        owner = store.get_scoring_request(_request(config)).owner
    elif config.whole_owner:
        owner = store.get_reward_model(config.evaluator).owner
    else:
        return {}
    return metadata.saved_trust(store, owner, config.evaluator, context.log.warning)
