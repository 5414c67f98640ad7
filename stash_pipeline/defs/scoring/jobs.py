"""The scoring run: one batch of traces by one saved checkpoint."""

import dagster as dg

from stash_pipeline.defs.scoring.assets import trace_scores
from stash_pipeline.defs.worker_runs import MAX_RUNTIME_S

trace_scoring_job = dg.define_asset_job(
    "trace_scoring", selection=[trace_scores],
    tags={"dagster/max_runtime": MAX_RUNTIME_S},
    description="Score chosen traces with a release or a personal model's saved checkpoint.",
)
