"""The benchmark report as a person reads it in the UI: the decision, overall and per slice."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dagster as dg

from stash_pipeline.defs import metadata

SLICE_COLUMNS = ["slice", "value", "pairs", "candidate", "incumbent", "candidate_low",
                 "candidate_high", "tolerance", "populated", "decision"]
OVERALL_COLUMNS = ["pairs", "candidate", "incumbent", "candidate_low", "candidate_high",
                   "decision"]


def gate_metadata(report: Mapping[str, Any]) -> dict[str, Any]:
    decision = "passed: release" if report["passed"] else "blocked"
    reasons = "\n".join(f"- {reason}" for reason in report["reasons"]) or "- none"
    rule = report["rule"]
    return {
        "decision": dg.MetadataValue.md(
            f"**{decision}** (candidate {report.get('candidate')}, incumbent "
            f"{report['incumbent'] or 'none: first release'})\n\nBlocking reasons:\n{reasons}\n\n"
            f"Rule: beat the incumbent overall; a slice of at least {rule['min_slice_pairs']} "
            f"pairs regresses when the incumbent's accuracy lies above the candidate's "
            f"{rule['confidence']:.0%} Wilson interval."),
        "passed": report["passed"],
        "overall": metadata.table([report["overall"]], OVERALL_COLUMNS),
        "slices": metadata.table(report["slices"], SLICE_COLUMNS),
        "benchmark_pairs": report["overall"]["pairs"],
        **{f"{who}_accuracy": report["overall"][who] for who in ("candidate", "incumbent")
           if isinstance(report["overall"][who], float)},
    }
