"""The trace list and one trace's page, and the trace page's forms: contribution, Score again,
a comment, a comparison with another trace. A form's 422 is shown inline on the page that sent
it; done, the page says what was done."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from stash_pipeline.api.deps import StoreDep
from stash_pipeline.api.ui import progress, views
from stash_pipeline.api.ui.frame import (
    FormDep,
    ViewerDep,
    author,
    one,
    redirect,
    render,
    viewer_page,
)
from stash_pipeline.api.ui.trace_list import trace_list
from stash_pipeline.core.errors import InputError, NotFoundError, OwnershipError
from stash_pipeline.core.feedback import ReviewedComparison, feedback_id
from stash_pipeline.services import feedback, scoring_requests, traces
from stash_pipeline.store import Account, Store

router = APIRouter(prefix="/ui", include_in_schema=False)


@router.get("/traces", response_class=HTMLResponse)
def list_page(request: Request, store: StoreDep, account: ViewerDep) -> Response:
    return trace_list(request, store, account)


def _trace_page(request: Request, store: Store, account: Account, trace_id: str, *,
                status: int = 200,
                error: InputError | None = None, form: str | None = None,
                done: str | None = None) -> HTMLResponse:
    models = views.models_of(store, account.id)
    view = views.trace_view(store, account.id, trace_id,
                            evaluator=request.query_params.get("evaluator"),
                            names={m.id: m.name for m in models})
    pending = [("comparison", f["id"]) for f in view["trace"]["feedback"]
               if f["type"] == "ReviewedComparison" and f["status"] == "pending"]
    # The review version each Approve / Reject sends back: a verdict someone made since is a 409.
    versions = {s["id"]: s["version"] for s in store.review_states(pending)} if pending else {}
    return render(request, "trace.html", status=status, account=account, trace=view["trace"],
                  view=view, models=[m for m in models if m.status == "succeeded"],
                  error=error, form=form, done=views.TRACE_DONE.get(done or ""),
                  review_versions=versions,
                  **progress.followed(request, store, account.id))


@router.get("/traces/{trace_id}", response_class=HTMLResponse)
def trace_page(trace_id: str, request: Request, store: StoreDep, account: ViewerDep,
               done: str | None = None) -> Response:
    return _trace_page(request, store, account, trace_id, done=done)


def _feedback_form(request: Request, store: Store, account: Account, trace_id: str, form: str,
                   give: Callable[[], Any], *,
                   back: str | Callable[[], str] | None = None) -> Response:
    """Do what the trace page's form asks, then go back (``back``: where, or how to find it
    once done); its 422 inline on the trace page."""
    try:
        give()
    except (InputError, OwnershipError) as error:
        shown = error if isinstance(error, InputError) else InputError(str(error))
        return _trace_page(request, store, account, trace_id, status=422, error=shown, form=form)
    if callable(back):
        back = back()
    return redirect(back or f"/ui/traces/{trace_id}?done={form}#feedback")


@router.post("/traces/{trace_id}/contribute", response_class=HTMLResponse)
def contribute(trace_id: str, request: Request, store: StoreDep, fields: FormDep,
               account: ViewerDep) -> Response:
    """Contribution on (``contribute=on``) or off for this trace."""
    flag = one(fields, "contribute") == "on"
    return _feedback_form(request, store, account, trace_id,
                          f"contribute-{'on' if flag else 'off'}",
                          lambda: traces.set_contribution(store, account.id,
                                                          trace_id, flag),
                          back=f"/ui/traces/{trace_id}?done=contribute-"
                               f"{'on' if flag else 'off'}")


@router.post("/traces/{trace_id}/score", response_class=HTMLResponse)
def score_trace(trace_id: str, request: Request, store: StoreDep, fields: FormDep,
                account: ViewerDep) -> Response:
    """Score again for this trace: the release, or (Advanced) a personal model, actions too."""

    queued: list[str] = []

    def give() -> None:
        traces.owned_trace(store, account.id, trace_id)
        try:
            queued.append(scoring_requests.request(store, account.id, [trace_id],
                                                   model_id=one(fields, "model_id"),
                                                   actions=one(fields, "actions") == "on").id)
        except NotFoundError as error:  # no release yet, or not a model of the account's
            raise InputError(str(error), field="model_id") from None

    # The page then follows the request: where it stands, until it ends (``requests_view``).
    return _feedback_form(request, store, account, trace_id, "score", give,
                          back=lambda: f"/ui/traces/{trace_id}?requests={queued[0]}#scores")


@router.post("/traces/{trace_id}/comments", response_class=HTMLResponse)
def comment(trace_id: str, request: Request, store: StoreDep, fields: FormDep,
            account: ViewerDep) -> Response:
    return _feedback_form(request, store, account, trace_id, "comment", lambda: feedback.comment(
        store, account.id, trace_id, one(fields, "text") or "",
        action=one(fields, "action_id"), author=author(account)))


@router.post("/traces/{trace_id}/comparisons", response_class=HTMLResponse)
def compare(trace_id: str, request: Request, store: StoreDep, fields: FormDep,
            account: ViewerDep) -> Response:
    """This trace against another of the account's traces: a pending comparison, as
    `feedback compare` makes one (a reviewer other than its author approves it later)."""

    def give() -> None:
        other = one(fields, "other")
        if other is None:
            raise InputError("choose the trace to compare with", field="other")
        traces.owned_trace(store, account.id, trace_id)
        try:
            traces.owned_trace(store, account.id, other)
        except NotFoundError:
            raise InputError(f"trace {other} does not exist", field="other") from None
        if other == trace_id:
            raise InputError("compare the trace with another one", field="other")
        better = one(fields, "better") != "other"
        chosen, rejected = (trace_id, other) if better else (other, trace_id)
        signed = author(account)
        rationale = one(fields, "rationale")
        store.add_feedback([ReviewedComparison(
            feedback_id("comparison", chosen, rejected, signed), chosen, rejected,
            status="pending", rationale=rationale, author=signed)], owner=account.id)

    back = one(fields, "next")  # the side-by-side page the comparison was made on
    if back:
        back = viewer_page(back)
        back += ("&" if "?" in back else "?") + "done=compare"
    return _feedback_form(request, store, account, trace_id, "compare", give, back=back)
