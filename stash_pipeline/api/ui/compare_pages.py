"""Side by side: two traces, or one trace under two evaluators (``/ui/compare``), and the
searchable list Compare picks the other trace from (``/ui/traces/{id}/compare``)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from stash_pipeline.api.deps import StoreDep
from stash_pipeline.api.ui import views
from stash_pipeline.api.ui.frame import Refused, ViewerDep, render
from stash_pipeline.core.errors import InputError
from stash_pipeline.core.trace_search import filter_params, parse_filter
from stash_pipeline.services import traces
from stash_pipeline.store import Account

router = APIRouter(prefix="/ui", include_in_schema=False)
PICK_LIMIT = 25  # traces the picker lists


@router.get("/traces/{trace_id}/compare", response_class=HTMLResponse)
def pick(trace_id: str, request: Request, store: StoreDep, account: ViewerDep) -> Response:
    """The traces to compare this one with, found by the list's search (text, task, tool...)."""
    trace = traces.detail(store, account.id, trace_id)
    try:
        where = parse_filter(request.query_params)
    except InputError as bad:
        raise Refused(422, str(bad)) from None
    found = traces.page(store, account.id, sort="-created", limit=PICK_LIMIT + 1, where=where)
    others = [t for t in found["traces"] if t["id"] != trace_id][:PICK_LIMIT]
    return render(request, "compare_pick.html", account=account, trace=trace, others=others,
                  total=found["total"],
                  params=filter_params(where, query=request.query_params.get("q")),
                  facets=store.trace_facets(account.id))


def _side(store: Any, account: Account, trace_id: str, evaluator: str | None,
          names: dict[str, str]) -> dict[str, Any]:
    # Any evaluator that scored the trace, so a personal model that scored whole traces only is
    # shown as that (its whole-trace score, no credit), never replaced by another evaluator.
    return views.trace_view(store, account.id, trace_id, evaluator=evaluator, names=names,
                            whole_trace_only=True)


@router.get("/compare", response_class=HTMLResponse)
def side_by_side(request: Request, store: StoreDep, account: ViewerDep, a: str,
                 b: str | None = None, ea: str | None = None, eb: str | None = None,
                 done: str | None = None) -> Response:
    """Two traces side by side (``a``, ``b``), each under an evaluator (``ea``, ``eb``); the
    same trace twice under two evaluators when ``b`` is ``a`` or absent."""
    names = {m.id: m.name for m in views.models_of(store, account.id)}
    b = b or a
    left = _side(store, account, a, ea, names)
    right = _side(store, account, b, eb, names)
    if a == b and eb is None and len(right["evaluators"]) > 1:  # one trace: two evaluators
        right = _side(store, account, b, right["evaluators"][1]["id"], names)
    here = "/ui/compare?" + urlencode({k: v for k, v in (
        ("a", a), ("b", b), ("ea", left["selected"] and left["selected"]["id"]),
        ("eb", right["selected"] and right["selected"]["id"])) if v})
    return render(request, "compare.html", account=account, left=left, right=right,
                  same=a == b, here=here, done=views.TRACE_DONE.get(done or ""))
