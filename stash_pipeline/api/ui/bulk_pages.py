"""The trace list's bulk actions and saved searches: on the traces ticked, or on every trace that
matches the search (``match=all``), resolved in SQL. Each form posts to a URL that carries the
list's query string, so the list comes back as it was, with the action's result or its 422."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response, StreamingResponse

from stash_pipeline.api.deps import StoreDep
from stash_pipeline.api.ui.frame import SECURITY_HEADERS, FormDep, ViewerDep, author, one, redirect
from stash_pipeline.api.ui.progress import MAX_FOLLOWED
from stash_pipeline.api.ui.trace_list import list_query, trace_list
from stash_pipeline.core.errors import InputError, NotFoundError
from stash_pipeline.core.trace_search import parse_filter
from stash_pipeline.services import trace_bulk, traces
from stash_pipeline.store import Account, Store

router = APIRouter(prefix="/ui", include_in_schema=False)


def selection(request: Request, store: Store, account: Account,
              fields: dict[str, list[str]]) -> list[str]:
    """The ticked traces, or (``match=all``) every trace matching the list's search."""
    if one(fields, "match") == "all":
        return trace_bulk.select(store, account.id, where=parse_filter(request.query_params))
    ticked = fields.get("trace_ids") or []
    if not ticked:
        raise InputError("tick the traces to act on, or select all that match", field="match")
    return trace_bulk.select(store, account.id, trace_ids=ticked)


def _back(request: Request, done: str, count: int, followed: Sequence[str] = ()) -> Response:
    """The list as it was, saying what was done (and following the Score again requests it
    made, ``progress.requests_view``)."""
    query = list_query(request)
    params = {"sort": query["sort"], "limit": query["limit"], "model": query["model"],
              **query["params"], "done": done, "n": count,
              "requests": ",".join(followed[:MAX_FOLLOWED]) or None}
    return redirect("/ui/traces?" + urlencode({k: v for k, v in params.items()
                                               if v is not None}))


def _refused(request: Request, store: Store, account: Account, fields: dict[str, list[str]],
             error: InputError | NotFoundError) -> Response:
    """The list again with the bulk form's 422 and its selection kept."""
    shown = error if isinstance(error, InputError) else InputError(str(error))
    return trace_list(request, store, account, status=422, error=shown,
                       chosen=tuple(fields.get("trace_ids") or ()),
                       matched=one(fields, "match") == "all", error_form="bulk")


def _bulk(request: Request, store: Store, account: Account, fields: dict[str, list[str]],
          act: Callable[[list[str]], tuple[str, int]],
          followed: Sequence[str] = ()) -> Response:
    try:
        done, count = act(selection(request, store, account, fields))
    except (InputError, NotFoundError) as error:
        return _refused(request, store, account, fields, error)
    return _back(request, done, count, followed)


@router.post("/traces/bulk/contribute", response_class=HTMLResponse)
def contribute(request: Request, store: StoreDep, fields: FormDep,
               account: ViewerDep) -> Response:
    flag = one(fields, "contribute") == "on"
    return _bulk(request, store, account, fields, lambda ids: (
        f"contribute-{'on' if flag else 'off'}",
        trace_bulk.contribute(store, account.id, ids, flag)))


@router.post("/traces/bulk/comment", response_class=HTMLResponse)
def comment(request: Request, store: StoreDep, fields: FormDep,
            account: ViewerDep) -> Response:
    return _bulk(request, store, account, fields, lambda ids: (
        "comment", trace_bulk.comment(store, account.id, ids,
                                      one(fields, "text") or "", author=author(account))))


@router.post("/traces/bulk/score", response_class=HTMLResponse)
def score(request: Request, store: StoreDep, fields: FormDep,
          account: ViewerDep) -> Response:
    followed: list[str] = []  # the list then shows where these requests stand

    def act(ids: list[str]) -> tuple[str, int]:
        try:
            queued = trace_bulk.score(store, account.id, ids,
                                      model_id=one(fields, "model_id"),
                                      actions=one(fields, "actions") == "on")
        except NotFoundError as error:  # no release yet, or not a model of the account's
            raise InputError(str(error), field="model_id") from None
        followed.extend(r.id for r in queued)
        return "score", sum(len(r.traces) for r in queued)

    return _bulk(request, store, account, fields, act, followed)


@router.post("/traces/bulk/export", response_class=HTMLResponse)
def export(request: Request, store: StoreDep, fields: FormDep,
           account: ViewerDep) -> Response:
    """The selection as a JSON Lines or CSV download."""
    kind = one(fields, "format") or "jsonl"
    try:
        trace_bulk.check_format(kind)
        ids = selection(request, store, account, fields)
    except (InputError, NotFoundError) as error:
        return _refused(request, store, account, fields, error)
    lines = trace_bulk.export_lines(store, account.id, ids, kind)
    return StreamingResponse(lines, media_type=trace_bulk.EXPORT_MEDIA_TYPES[kind], headers={
        **SECURITY_HEADERS, "Content-Disposition": f'attachment; filename="traces.{kind}"'})


@router.post("/saved-filters", response_class=HTMLResponse)
def save_filter(request: Request, store: StoreDep, fields: FormDep,
                account: ViewerDep) -> Response:
    """Keep the list's search (its query string) under a name."""
    try:
        traces.save_filter(store, account.id, one(fields, "name"),
                           dict(request.query_params))
    except InputError as error:
        return trace_list(request, store, account, status=422, error=error, error_form="save")
    return _back(request, "saved", 1)


@router.post("/saved-filters/{filter_id}/remove", response_class=HTMLResponse)
def remove_filter(filter_id: str, request: Request, store: StoreDep, fields: FormDep,
                  account: ViewerDep) -> Response:
    traces.remove_filter(store, account.id, filter_id)
    return _back(request, "removed", 1)
