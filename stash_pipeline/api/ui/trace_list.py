"""The trace list as its page shows it (``templates/traces.html``): its query (sort, page,
search), its columns, and the list rendered again with what a form on it did or refused. The list
page, its Create new reward model form and its bulk actions all come back to it."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from fastapi import Request
from fastapi.responses import HTMLResponse

from stash_pipeline.api.ui import progress, views
from stash_pipeline.api.ui.frame import Refused, digits, render
from stash_pipeline.core.errors import InputError
from stash_pipeline.core.trace_search import OUTCOMES, STATES, filter_params, parse_filter
from stash_pipeline.core.training_settings import (
    DEFAULT_BASE_MODEL,
    DEFAULT_EPOCHS,
    DEFAULT_MAX_PAIRS,
)
from stash_pipeline.services import traces
from stash_pipeline.store import Account, Store
from stash_pipeline.store.trace_pages import SORTS

PAGE_SIZES = (25, 50, 100, 200)
# The list's sortable columns: (sort key, heading).
LIST_COLUMNS = (("mean_action_credit", "mean action credit"), ("actions_scored", "actions scored"),
                ("latest_score", "latest score"), ("scoring_state", "scoring state"),
                ("outcome", "outcome"), ("created", "created"))

# What a bulk action on the list did, as the list then says it ({n}: how many traces).
LIST_DONE = {
    "contribute-on": "{n} trace(s) now contribute to shared-evaluator training.",
    "contribute-off": "{n} trace(s) no longer contribute: they are left out of future "
                      "candidates (what released weights learned stays).",
    "comment": "Saved: your comment on {n} trace(s).",
    "score": "Score again was requested for {n} trace(s).",
    "saved": "Saved this search.",
    "removed": "Removed the saved search.",
}


def list_query(request: Request) -> dict[str, Any]:
    """The list's page (sort, size, offset, whose latest score) and its search."""
    query = request.query_params
    sort = query.get("sort") or "-created"
    limit = query.get("limit") or "50"
    offset = query.get("offset") or "0"
    if sort not in SORTS:
        raise InputError(f"sort is one of {', '.join(SORTS)}", field="sort")
    if not digits(limit) or int(limit) not in PAGE_SIZES:
        raise InputError(f"limit is one of {', '.join(map(str, PAGE_SIZES))}", field="limit")
    if not digits(offset) or int(offset) > 2**31:
        raise InputError("offset is a whole number", field="offset")
    where = parse_filter(query)
    return {"sort": sort, "limit": int(limit), "offset": int(offset),
            "model": query.get("model") or None, "where": where,
            "params": filter_params(where, query=query.get("q"))}


def trace_list(request: Request, store: Store, account: Account, *, status: int = 200,
               error: InputError | None = None, chosen: tuple[str, ...] = (),
               request_form: dict[str, str] | None = None, matched: bool = False,
               error_form: str = "create") -> HTMLResponse:
    """The list page of the request's query, with ``error`` beside the form that sent it
    (``error_form``) and that form's ticked traces and fields kept."""
    try:
        query = list_query(request)
        page = traces.page(store, account.id, sort=query["sort"], limit=query["limit"],
                           offset=query["offset"], model_id=query["model"],
                           where=query["where"])
    except InputError as bad:
        raise Refused(422, str(bad)) from None

    def link(**changes: Any) -> str:
        merged = {"sort": query["sort"], "limit": query["limit"], "offset": query["offset"],
                  "model": query["model"], **query["params"], **changes}
        return "/ui/traces?" + urlencode({k: v for k, v in merged.items() if v is not None})

    models = views.models_of(store, account.id)
    done = LIST_DONE.get(request.query_params.get("done") or "")
    count = request.query_params.get("n") or ""
    form = {"base_model": DEFAULT_BASE_MODEL, "epochs": str(DEFAULT_EPOCHS),
            "max_pairs": str(DEFAULT_MAX_PAIRS)}
    return render(request, "traces.html", status=status, account=account, page=page,
                  query=query, link=link, columns=LIST_COLUMNS, states=STATES,
                  outcomes=OUTCOMES, facets=store.trace_facets(account.id), models=models,
                  model_names={m.id: m.name for m in models}, page_sizes=PAGE_SIZES,
                  error=error, error_form=error_form, chosen=set(chosen), matched=matched,
                  done=done.format(n=count if count.isdigit() else "some") if done else None,
                  saved=store.saved_filters(account.id),
                  here=link().removeprefix("/ui/traces"),
                  request_form={**form, **(request_form or {})},
                  **progress.followed(request, store, account.id))
