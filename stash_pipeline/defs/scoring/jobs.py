"""The scoring run: one batch of traces by one saved checkpoint."""

import dagster as dg

from stash_pipeline.defs.scoring.assets import trace_scores
from stash_pipeline.defs.worker_runs import MAX_RUNTIME_S

# One step: it runs in the run's own process (Dagster's default executor would start another
# process for it, which imports Dagster and the code location again: seconds of a Score again).
trace_scoring_job = dg.define_asset_job(
    "trace_scoring", selection=[trace_scores], executor_def=dg.in_process_executor,
    tags={"dagster/max_runtime": MAX_RUNTIME_S},
    description="Score chosen traces with a release or a personal model's saved checkpoint.",
)
