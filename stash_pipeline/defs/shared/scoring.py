"""Auto-scoring: the current release scores every action of every imported or updated trace.

The database is the queue (a trace version the release has not scored is pending); the
``pending_action_scoring`` sensor hands out batches, and each run scores one.
"""

import dagster as dg

from stash_pipeline.defs import metadata
from stash_pipeline.defs.resources import ComputeResource, ObjectStoreResource, StoreResource
from stash_pipeline.defs.shared.assets import GROUP, shared_evaluator_release
from stash_pipeline.defs.traces.assets import traces
from stash_pipeline.defs.worker_runs import REWARD_POOL, failing_step
from stash_pipeline.pipelines import shared_evaluator as steps


class ScoringBatchConfig(dg.Config):
    release: str  # the release version whose checkpoint scores
    trace_ids: list[str]
    versions: list[int]  # the version of each trace that was pending when the batch was made


@dg.asset(deps=[shared_evaluator_release, traces], group_name=GROUP, kinds={"pytorch"},
          pool=REWARD_POOL)
def shared_action_scores(context: dg.AssetExecutionContext, config: ScoringBatchConfig,
                         database: StoreResource, objects: ObjectStoreResource,
                         compute: ComputeResource) -> dg.MaterializeResult:
    """Action credit of one batch of traces by the current release: each assistant action and
    tool call scored from its preceding context only."""
    batch = steps.ScoringBatch(config.release, dict(zip(config.trace_ids, config.versions)))
    with failing_step():
        results = steps.score_batch(database.store, batch, compute.worker(context, objects),
                                    compute.scratch, context.run.run_id)
    credits = [score.credit for score in results.action_scores if score.credit is not None]
    return dg.MaterializeResult(metadata={
        "release": config.release, "scored_traces": len(results.scored),
        "scored_actions": len(results.action_scores),
        "credit_histogram": metadata.histogram(credits, title="Action credit",
                                               x_label="credit"),
    })
