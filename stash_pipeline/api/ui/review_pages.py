"""The review queue in the viewer (docs/viewer.md, "The review queue"): its overview, one item
at a time in context, and the forms that review it.

Every page and form carries the queue's query string (its search, model, assignee and kind), so
after each piece of feedback the reviewer comes back to the same item (a comment keeps the action
in focus) or goes on to the next one in the same queue. The keys (j/k, c, a/r, x, n, ?) are
ui.js's; without JavaScript the same forms are buttons.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from stash_pipeline.api.deps import StoreDep
from stash_pipeline.api.ui import views
from stash_pipeline.api.ui.frame import (
    FormDep,
    Refused,
    ViewerDep,
    author,
    one,
    redirect,
    render,
    viewer_page,
)
from stash_pipeline.core.errors import InputError, NotFoundError, ReviewConflict
from stash_pipeline.core.review_order import REASON_TEXT, REASONS
from stash_pipeline.core.trace_search import OUTCOMES, filter_params, parse_filter
from stash_pipeline.services import feedback, review
from stash_pipeline.store import Account, Store
from stash_pipeline.store.review_queue import KINDS, QueueScope

router = APIRouter(prefix="/ui/review", include_in_schema=False)
PAGE = 50
QUEUE_PARAMS = ("model", "assignee", "unassigned", "kind")
DONE = {"assigned": "Assigned.", "unassigned": "Assignment removed.",
        "empty": "Nothing left to review here: every item in this queue has been reviewed.",
        "approved": "Approved.", "rejected": "Rejected.", "comment": "Saved: your comment."}


def queue_of(request: Request, store: Store, account: Account) -> tuple[QueueScope, dict[str, str]]:
    """The queue the request's query string names, and its parameters for links and forms."""
    query = request.query_params
    try:
        where = parse_filter(query)
        kind = query.get("kind") or None
        scope = review.scope(store, account.id, reviewer=author(account),
                             where=where, model_id=query.get("model") or None,
                             assignee=query.get("assignee") or None,
                             unassigned=query.get("unassigned") == "1", kind=kind)
    except InputError as bad:
        raise Refused(422, str(bad)) from None
    params = filter_params(where, query=query.get("q"))
    params.update({name: query[name] for name in QUEUE_PARAMS if query.get(name)})
    return scope, params


def _qs(params: dict[str, Any], **more: Any) -> str:
    merged = {k: v for k, v in {**params, **more}.items() if v not in (None, "")}
    return "?" + urlencode(merged) if merged else ""


def item_url(kind: str, item_id: str, params: dict[str, str], **more: Any) -> str:
    return f"/ui/review/{'traces' if kind == 'trace' else 'comparisons'}/{item_id}" + _qs(
        params, **more)


@router.get("", response_class=HTMLResponse)
def overview(request: Request, store: StoreDep, account: ViewerDep, offset: int = 0,
             done: str | None = None) -> Response:
    """The queue: its progress, its order explained, and a page of its items."""
    scope, params = queue_of(request, store, account)
    if offset < 0 or offset > 2**31:
        raise Refused(422, "offset is a whole number")
    page = review.queue(store, scope, limit=PAGE, offset=offset)
    models = [m for m in views.models_of(store, account.id) if m.status == "succeeded"]
    return render(request, "review.html", account=account, page=page, params=params,
                  model_name=next((m.name for m in models if m.id == scope.model_id), None),
                  qs=_qs(params), item_url=item_url, next_qs=_qs(params, offset=offset + PAGE),
                  prev_qs=_qs(params, offset=max(offset - PAGE, 0)), offset=offset,
                  order=[(name, REASON_TEXT[name]) for name in REASONS],
                  facets=store.trace_facets(account.id), outcomes=OUTCOMES, kinds=KINDS,
                  models=models, done=DONE.get(done or ""))


@router.get("/next", response_class=HTMLResponse)
def next_item(request: Request, store: StoreDep, account: ViewerDep) -> Response:
    """The first item not reviewed yet, or the overview saying the queue is done."""
    scope, params = queue_of(request, store, account)
    first = review.queue(store, scope, limit=1)["items"]
    if not first:
        return redirect("/ui/review" + _qs(params, done="empty"))
    return redirect(item_url(first[0]["kind"], first[0]["id"], params))


def _progress(store: Store, scope: QueueScope) -> dict[str, Any]:
    return review.queue(store, scope, limit=1)


def _version(store: Store, kind: str, item_id: str) -> int:
    """The item's review version now, which its forms send back (a change since: 409)."""
    return store.review_states([(kind, item_id)])[0]["version"]


@router.get("/traces/{trace_id}", response_class=HTMLResponse)
def trace_item(trace_id: str, request: Request, store: StoreDep, account: ViewerDep,
               focus: str | None = None, done: str | None = None) -> Response:
    """One trace of the queue in context: why it is here, the action to look at first."""
    return _trace_item(trace_id, request, store, account, focus=focus, done=done)


def _trace_item(trace_id: str, request: Request, store: Store, account: Account, *,
                focus: str | None = None, done: str | None = None,
                conflict: ReviewConflict | None = None) -> Response:
    scope, params = queue_of(request, store, account)
    why = review.trace_focus(store, scope, trace_id)
    view = views.trace_view(store, account.id, trace_id, evaluator=scope.release)
    locals_ = {c["local_id"]: c for c in view["cells"]}
    focused = focus if focus in locals_ else (
        why["focus_action"].rsplit("/", 1)[-1] if why["focus_action"] else None)
    return render(request, "review_item.html", account=account, kind="trace", view=view,
                  trace=view["trace"], why=why, focus=focused, params=params, qs=_qs(params),
                  page=_progress(store, scope), done=DONE.get(done or ""),
                  version=_version(store, "trace", trace_id), error=conflict,
                  status=409 if conflict else 200,
                  model_name=next((m.name for m in views.models_of(store, account.id)
                                   if m.id == scope.model_id), scope.model_id))


@router.get("/comparisons/{comparison_id}", response_class=HTMLResponse)
def comparison_item(comparison_id: str, request: Request, store: StoreDep,
                    account: ViewerDep, done: str | None = None) -> Response:
    """A comparison waiting for review: its two sides side by side, approve or reject."""
    return _comparison_item(comparison_id, request, store, account, done=done)


def _comparison_item(comparison_id: str, request: Request, store: Store, account: Account, *,
                     done: str | None = None,
                     conflict: ReviewConflict | None = None) -> Response:
    scope, params = queue_of(request, store, account)
    if comparison_id not in store.owned_comparisons([comparison_id], account.id):
        raise NotFoundError(f"no comparison {comparison_id}")
    comparison = store.comparisons([comparison_id])[comparison_id]
    names = {m.id: m.name for m in views.models_of(store, account.id)}
    chosen = views.trace_view(store, account.id, comparison["chosen_trace_id"],
                              evaluator=scope.release, names=names)
    rejected = views.trace_view(store, account.id, comparison["rejected_trace_id"],
                                evaluator=scope.release, names=names)

    def local(action: str | None) -> str | None:
        return action.rsplit("/", 1)[-1] if action else None

    return render(request, "review_item.html", account=account, kind="comparison",
                  comparison=comparison, chosen=chosen, rejected=rejected,
                  chosen_focus=local(comparison["chosen_action_id"]),
                  rejected_focus=local(comparison["rejected_action_id"]),
                  mine=comparison["author"] == author(account), params=params,
                  qs=_qs(params), page=_progress(store, scope), done=DONE.get(done or ""),
                  version=_version(store, "comparison", comparison_id), error=conflict,
                  status=409 if conflict else 200)


@router.post("/traces/{trace_id}/comments", response_class=HTMLResponse)
def comment(trace_id: str, request: Request, store: StoreDep, fields: FormDep,
            account: ViewerDep) -> Response:
    """A comment on the action in focus (or the trace); the reviewer stays on the item, on the
    same action, and the item counts as reviewed."""
    scope, params = queue_of(request, store, account)
    action = one(fields, "action_id")
    try:
        feedback.comment(store, account.id, trace_id, one(fields, "text") or "", action=action,
                         author=author(account))
    except InputError as error:
        view = views.trace_view(store, account.id, trace_id, evaluator=scope.release)
        why = review.trace_focus(store, scope, trace_id)
        return render(request, "review_item.html", status=422, account=account, kind="trace",
                      view=view, trace=view["trace"], why=why, focus=action, params=params,
                      qs=_qs(params), page=_progress(store, scope), error=error,
                      text=one(fields, "text") or "", model_name=scope.model_id, done=None)
    return redirect(item_url("trace", trace_id, params, focus=action, done="comment"))


def _after(fields: dict[str, list[str]], params: dict[str, str], done: str | None = None
           ) -> Response:
    """Where a review form goes next: the page it names (``next``), else the queue's next item."""
    back = one(fields, "next")
    if back:
        target = viewer_page(back)
        return redirect(target + (("&" if "?" in target else "?") + f"done={done}"
                                  if done else ""))
    return redirect("/ui/review/next" + _qs(params))


@router.post("/{kind}/{item_id}/{action}", response_class=HTMLResponse)
def act(kind: str, item_id: str, action: str, request: Request, store: StoreDep,
        fields: FormDep, account: ViewerDep) -> Response:
    """``done`` (reviewed, next), ``skip`` (to the end of the queue, next), and for a comparison
    ``approve`` or ``reject`` (its review by this reviewer, next)."""
    _, params = queue_of(request, store, account)
    kinds = {"traces": "trace", "comparisons": "comparison"}
    if kind not in kinds or action not in ("done", "skip", "approve", "reject") or (
            action in ("approve", "reject") and kind != "comparisons"):
        raise NotFoundError("no such form")
    version = _form_version(one(fields, "version"))
    try:
        if action in ("approve", "reject"):
            if item_id not in store.owned_comparisons([item_id], account.id):
                raise NotFoundError(f"no comparison {item_id}")
            store.decide_comparison(item_id, reviewer=author(account),
                                    status="approved" if action == "approve" else "rejected",
                                    owner=account.id, version=version)
            return _after(fields, params, "approved" if action == "approve" else "rejected")
        review.set_status(store, account.id, [(kinds[kind], item_id)],
                          "reviewed" if action == "done" else "skipped",
                          reviewer=author(account),
                          expected=None if version is None else {(kinds[kind], item_id): version})
    except ReviewConflict as conflict:
        # Someone else changed it since this page was loaded: the item as it is now, saying so.
        if kind == "traces":
            return _trace_item(item_id, request, store, account, conflict=conflict)
        return _comparison_item(item_id, request, store, account, conflict=conflict)
    return _after(fields, params)


def _form_version(value: str | None) -> int | None:
    """A form's ``version`` field (none: the change applies whatever changed since)."""
    if value is None or value == "":
        return None
    if not value.isdigit() or len(value) > 10:
        raise Refused(422, f"version is a whole number, got {value[:20]!r}")
    return int(value)


@router.post("/assign", response_class=HTMLResponse)
def assign(request: Request, store: StoreDep, fields: FormDep,
           account: ViewerDep) -> Response:
    """Assign the ticked items to a reviewer's name (or, ``unassign``, to nobody)."""
    _, params = queue_of(request, store, account)
    items, expected = [], {}
    for value in fields.get("items") or []:  # kind:id@version, as the queue's page lists them
        kind, _, item_id = value.partition(":")
        named, _, version = item_id.rpartition("@")
        if named and version.isdigit() and len(version) <= 10:
            item_id = named
            expected[(kind, item_id)] = int(version)
        items.append((kind, item_id))
    assignee = None if one(fields, "unassign") else one(fields, "assignee")
    if assignee is None and not one(fields, "unassign"):
        raise Refused(422, "name the reviewer to assign the items to")
    try:
        review.assign(store, account.id, items, assignee, expected=expected)
    except InputError as error:
        raise Refused(422, str(error)) from None
    return redirect("/ui/review" + _qs(params, done="assigned" if assignee else "unassigned"))
