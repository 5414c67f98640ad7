"""The release gate as a blocking asset check: a candidate that fails it is never released."""

import dagster as dg

from stash_pipeline.defs.resources import StoreResource
from stash_pipeline.defs.shared.assets import benchmark_results
from stash_pipeline.defs.shared.candidate import current_candidate
from stash_pipeline.defs.shared.report import gate_metadata
from stash_pipeline.pipelines import shared_evaluator as steps


@dg.asset_check(asset=benchmark_results, blocking=True,
                description="Beat the incumbent overall without a regression on a sufficiently "
                            "populated tool, domain or agent slice (the first release: reviewed "
                            "training data, a non-empty benchmark, accuracy above chance).")
def release_gate(context: dg.AssetCheckExecutionContext,
                 database: StoreResource) -> dg.AssetCheckResult:
    comparison = steps.gate_result(database.store, current_candidate(context))
    return dg.AssetCheckResult(passed=comparison.passed,
                               metadata=gate_metadata(comparison.report))
