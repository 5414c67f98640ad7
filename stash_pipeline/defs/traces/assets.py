"""The stored traces, as an asset: every import (CLI or API) records a materialisation of it.

Traces live in the SQL store and arrive outside any run, so the asset is an external one whose
materialisations the importers report (``dagster_runs.import_history.record_traces_import``);
lineage in the UI then reads traces -> pairs -> split -> checkpoint -> scores.
"""

import dagster as dg

traces = dg.AssetSpec(
    "traces", group_name="traces", kinds={"sql"},
    description="Agent traces and their feedback in the SQL store; each import materialises it "
                "with counts by format, owner and domain.",
)
