"""The shared evaluator's run: the training chain (weekly, on request, or by hand). Its release
scores every trace through the one scoring path (defs/scoring)."""

import dagster as dg

from stash_pipeline.defs.shared.assets import (
    benchmark_results,
    shared_candidate,
    shared_evaluator_release,
    shared_split,
    shared_training_pairs,
)
from stash_pipeline.defs.worker_runs import MAX_RUNTIME_S

shared_training_job = dg.define_asset_job(
    "shared_evaluator_training",
    selection=[shared_training_pairs, shared_split, shared_candidate, benchmark_results,
               shared_evaluator_release],
    tags={"dagster/max_runtime": MAX_RUNTIME_S},
    description="Train a shared-evaluator candidate, benchmark it against the incumbent and "
                "release it if it passes the gate.",
)
