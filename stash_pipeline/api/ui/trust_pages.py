"""The viewer's trust reports (docs/viewer.md, docs/trust.md): how far to trust a personal model
or a release on the signed-in account's traces it did not train on, with its charts.

The report is the API's (``services.trust``), so its rules are the API's: another account's
model, an unfinished one, an unknown release is a 404 page.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from stash_pipeline.api.deps import StoreDep
from stash_pipeline.api.ui.frame import ViewerDep, render
from stash_pipeline.core.trust import CHARTS, NOT_A_PROBABILITY, charts
from stash_pipeline.services import trust
from stash_pipeline.store import Account

router = APIRouter(prefix="/ui", include_in_schema=False)
# Each figure's heading on the page, in the report's order.
HEADINGS = {
    "heldout_accuracy": "Held-out pairwise accuracy",
    "outcome_auc_trace_score": "AUC of the whole-trace score against verified outcomes",
    "baseline_length_auc": "Baseline: the trace-length rule's AUC on the same traces",
    "baseline_untrained_auc": "Baseline: the untrained base's AUC on the same traces",
    "within_task_accuracy_trace_score": "Within a task: how often a succeeded trace outscores a "
                                        "failed one",
    "baseline_length_within_task": "Baseline: the trace-length rule within a task",
    "baseline_untrained_within_task": "Baseline: the untrained base within a task",
    "outcome_auc_mean_action_credit": "AUC of mean action credit against verified outcomes",
    "baseline_length_auc_mean_action_credit": "Baseline: the trace-length rule's AUC on the "
                                              "same traces (those with action credit)",
    "within_task_accuracy_mean_action_credit": "Within a task, by mean action credit",
    "baseline_length_within_task_mean_action_credit": "Baseline: the trace-length rule within "
                                                      "a task (traces with action credit)",
    "spearman_trace_rating": "Spearman correlation of the whole-trace score with trace ratings",
    "spearman_trace_rating_mean_credit": "Spearman correlation of mean action credit with trace "
                                         "ratings",
    "spearman_step_rating": "Spearman correlation of action credit with step ratings",
    "success_rate_by_calibrated_score": "Verified success rate by calibrated score",
    "truncated_traces": "Scored traces cut to the window",
    "truncated_actions": "Scored actions read in a cut window",
}


def _page(request: Request, account: Account, report: dict[str, Any], *, title: str,
          back: tuple[str, str]) -> HTMLResponse:
    tables: dict[str, list[dict[str, Any]]] = {}
    for figure in report["figures"]:
        tables.setdefault(figure["metric"], []).append(figure)
    return render(request, "trust.html", account=account, report=report, title=title,
                  back=back, charts=charts(report), tables=tables, headings=HEADINGS,
                  axis=CHARTS, not_a_probability=NOT_A_PROBABILITY)


@router.get("/reward-models/{model_id}/trust", response_class=HTMLResponse)
def model_trust(model_id: str, request: Request, store: StoreDep,
                account: ViewerDep) -> Response:
    report = trust.model_report(store, account.id, model_id)
    return _page(request, account, report, title=f"How far to trust {report['name']}",
                 back=(f"/ui/reward-models/{model_id}", report["name"]))


@router.get("/releases/{version}/trust", response_class=HTMLResponse)
def release_trust(version: str, request: Request, store: StoreDep,
                  account: ViewerDep) -> Response:
    report = trust.release_report(store, account.id, version)
    return _page(request, account, report,
                 title=f"How far to trust release {report['evaluator']}",
                 back=("/ui/releases", "Releases"))
