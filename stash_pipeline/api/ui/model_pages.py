"""The evaluators' pages: the account's reward models (created from the trace list, each with its
metrics, scores and live progress, Score again, Retry and its weights) and the shared evaluator's
releases with their gate decisions."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from stash_pipeline.api.deps import ObjectsDep, StoreDep
from stash_pipeline.api.ui import plots, progress
from stash_pipeline.api.ui.frame import FormDep, ViewerDep, digits, one, redirect, render
from stash_pipeline.api.ui.trace_list import trace_list
from stash_pipeline.core.errors import InputError
from stash_pipeline.core.failures import reason_line
from stash_pipeline.core.trace_search import parse_filter
from stash_pipeline.core.trust import held_out_summary, separation, separation_note, verdict_line
from stash_pipeline.services import reward_models, trace_bulk, trust

router = APIRouter(prefix="/ui", include_in_schema=False)


def _number(text: str | None) -> Any:
    """A form's number as the JSON request would carry it: digits become an int, the rest stays
    text so the request's own validation names the field."""
    return int(text) if text is not None and digits(text) and len(text) < 10 else text


@router.post("/reward-models", response_class=HTMLResponse)
def create_model(request: Request, store: StoreDep, fields: FormDep,
                 account: ViewerDep) -> Response:
    """Create new reward model from the selected traces (or every trace that matches the
    search): the API's request, the API's 422s, shown on the trace list."""
    chosen = tuple(fields.get("trace_ids") or ())
    matched = one(fields, "match") == "all"
    ids = list(chosen)
    if matched:
        try:
            ids = trace_bulk.select(store, account.id,
                                    where=parse_filter(request.query_params))
        except InputError as error:
            return trace_list(request, store, account, status=422, error=error, matched=True)
    body: dict[str, Any] = {"name": one(fields, "name") or "", "trace_ids": ids}
    for name in ("base_model", "epochs", "max_pairs"):
        value = one(fields, name)
        if value is not None:
            body[name] = value if name == "base_model" else _number(value)
    try:
        model = reward_models.create(store, account.id, body)
    except InputError as error:
        shown = {k: one(fields, k) or "" for k in ("name", "base_model", "epochs", "max_pairs")}
        return trace_list(request, store, account, status=422, error=error, chosen=chosen,
                          request_form=shown, matched=matched)
    return redirect(f"/ui/reward-models/{model.id}")


@router.get("/reward-models", response_class=HTMLResponse)
def model_list(request: Request, store: StoreDep, account: ViewerDep) -> Response:
    models = reward_models.list_models(store, account.id)
    return render(request, "models.html", account=account, models=models)


def eval_unavailable(metrics: dict[str, Any]) -> str | None:
    """Why held-out accuracy is null, when it is (the seed: no usable independent split)."""
    if metrics.get("eval_accuracy") is not None:
        return None
    given = metrics.get("eval_unavailable_reason")
    if given:
        return str(given)
    excluded = metrics.get("excluded_cross_trace_pairs") or 0
    return ("no usable independent split: the held-out traces gave no pairs"
            + (f" ({excluded} pairs spanning both partitions were excluded)" if excluded else "")
            + ". Annotate more traces so some can be held out.")


@router.get("/reward-models/{model_id}", response_class=HTMLResponse)
def model_page(model_id: str, request: Request, store: StoreDep, account: ViewerDep) -> Response:
    model = reward_models.get(store, account.id, model_id)
    metrics = dict(model.metrics or {})
    losses = metrics.pop("loss_curve", None) or []
    phases = metrics.pop("phases", None) or {}
    scores = store.scores_of_evaluator(model.id) if model.status == "succeeded" else []
    verdict = (trust.model_verdict(store, account.id, model.id) if model.status == "succeeded"
               else None)
    return render(
        request, "model.html", account=account, model=model, metrics=metrics, phases=phases,
        loss_plot=plots.line_plot(losses, title="Bradley-Terry loss per step",
                                  x_label="training step"),
        histogram=plots.histogram([s.raw for s in scores], title="Whole-trace scores",
                                  x_label="raw reward"),
        reason=reason_line(model.error),
        unavailable=eval_unavailable(metrics) if model.status == "succeeded" else None,
        # Never a bare 1.0 on three pairs; and whether its calibrated scores mean anything.
        held_out=held_out_summary(metrics) if model.status == "succeeded" else None,
        separation=separation_note(separation([s.raw for s in scores]), "scores", verdict),
        verdict=verdict_line(verdict) if verdict else None,
        top=scores[:5], bottom=scores[-5:][::-1] if len(scores) > 5 else [],
        # A Score again of the owner's every trace works in bounded chunks: what is left of it.
        queued=(store.score_again_queued(model.id)
                if model.status == "succeeded" and model.score_generation else 0),
        live=progress.live_view(model) if model.status in progress.LIVE_STATUSES else None,
        poll_seconds=progress.POLL_SECONDS)


@router.get("/reward-models/{model_id}/weights", response_class=HTMLResponse)
def weights(model_id: str, request: Request, store: StoreDep, objects: ObjectsDep,
            account: ViewerDep) -> Response:
    """Download weights: a redirect to the five-minute signed URL."""
    return redirect(reward_models.weights_url(store, objects, account.id, model_id))


@router.post("/reward-models/{model_id}/score", response_class=HTMLResponse)
def score_again(model_id: str, request: Request, store: StoreDep, fields: FormDep,
                account: ViewerDep) -> Response:
    reward_models.score_again(store, account.id, model_id)
    return redirect(f"/ui/reward-models/{model_id}")


@router.post("/reward-models/{model_id}/retry", response_class=HTMLResponse)
def retry(model_id: str, request: Request, store: StoreDep, fields: FormDep,
          account: ViewerDep) -> Response:
    reward_models.retry(store, account.id, model_id)
    return redirect(f"/ui/reward-models/{model_id}")


# Releases -------------------------------------------------------------------------------------

@router.get("/releases", response_class=HTMLResponse)
def releases(request: Request, store: StoreDep, account: ViewerDep) -> Response:
    """The shared evaluator's releases and every gate decision, each with its report per slice."""
    released = {r.version: r for r in store.list_releases()}
    decisions = sorted(store.list_benchmark_comparisons(), key=lambda c: c.created_at,
                       reverse=True)
    return render(request, "releases.html", account=account, released=released,
                  decisions=decisions)
