"""The trace viewer's pages (docs/viewer.md): server-rendered HTML under ``/ui``.

Every page acts for the account of the session cookie and calls the same services as the JSON API,
so its rules are the API's: another account's trace or model is a 404 page, a bad request the
API's 422 message, shown inline beside the form that sent it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qs, urlencode, urlparse

import jinja2
import sqlalchemy as sa
from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from stash_pipeline.api.deps import ObjectsDep, StoreDep
from stash_pipeline.api.errors import error_response
from stash_pipeline.api.ui import plots, views
from stash_pipeline.api.ui.session import COOKIE, SESSION_SECONDS, Sessions, session_secret
from stash_pipeline.core.errors import (
    InputError,
    NotFoundError,
    OwnershipError,
    StorageFullError,
    UnavailableError,
)
from stash_pipeline.core.failures import reason_line
from stash_pipeline.core.feedback import ReviewedComparison, feedback_id
from stash_pipeline.core.requests import MAX_TRACE_IDS
from stash_pipeline.core.trace_search import OUTCOMES, STATES, filter_params, parse_filter
from stash_pipeline.core.training_settings import (
    DEFAULT_BASE_MODEL,
    DEFAULT_EPOCHS,
    DEFAULT_MAX_PAIRS,
)
from stash_pipeline.core.trust import held_out_summary, separation, separation_note
from stash_pipeline.services import (
    accounts,
    feedback,
    reward_models,
    scoring_requests,
    trace_bulk,
    traces,
)
from stash_pipeline.store import Account, StatusError, Store
from stash_pipeline.store.trace_pages import SORTS

HERE = Path(__file__).parent
log = logging.getLogger(__name__)
PAGE_SIZES = (25, 50, 100, 200)
# The list's sortable columns: (sort key, heading).
LIST_COLUMNS = (("mean_action_credit", "mean action credit"), ("actions_scored", "actions scored"),
                ("latest_score", "latest score"), ("scoring_state", "scoring state"),
                ("outcome", "outcome"), ("created", "created"))
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; "
                               "script-src 'self'; form-action 'self'; frame-ancestors 'none'; "
                               "base-uri 'none'",
    "X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin", "Cache-Control": "no-store",
}
MAX_FORM_FIELDS = MAX_TRACE_IDS + 20

templates = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"),
                               autoescape=True)
templates.filters["num"] = lambda v, digits=3: "" if v is None else (
    f"{v:.{digits}f}" if isinstance(v, float) else str(v))
templates.filters["pretty"] = lambda v: v if isinstance(v, str) else json.dumps(
    v, indent=2, ensure_ascii=False, default=str)
templates.filters["signed"] = lambda v: "" if v is None else f"{v:+.2f}"
templates.filters["short"] = lambda v: v if len(v) <= 14 else v[:8] + "…"  # a long id
templates.globals["credit_class"] = plots.credit_class
templates.globals["held_out_summary"] = held_out_summary

router = APIRouter(prefix="/ui", include_in_schema=False)


class LoginRequired(Exception):
    def __init__(self, target: str):
        self.target = target


class Refused(Exception):
    """A page that cannot be served: its status and a sentence for the person."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def sessions(request: Request) -> Sessions:
    return request.app.state.ui_sessions


def render(request: Request, name: str, *, status: int = 200,
           account: Account | None = None, **context: Any) -> HTMLResponse:
    cookie = request.cookies.get(COOKIE)
    csrf = sessions(request).csrf_token(cookie) if account is not None and cookie else ""
    html = templates.get_template(name).render(request=request, account=account, csrf=csrf,
                                               **context)
    return HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)


def redirect(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303, headers=SECURITY_HEADERS)


def viewer(request: Request, store: StoreDep) -> Account:
    """The session's account; a person without one is sent to the login page."""
    account = sessions(request).account(store, request.cookies.get(COOKIE))
    if account is None:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        raise LoginRequired(target)
    return account


# The session's account a page acts for (a person without one goes to the login page), as the
# JSON routes' ``account: AccountDep``: ``account: ViewerDep``.
ViewerDep = Annotated[Account, Depends(viewer)]


def _same_origin(request: Request) -> bool:
    origin = request.headers.get("origin")
    if origin is None:  # not sent by every browser on a same-origin POST
        return True
    try:
        return urlparse(origin).netloc == request.headers.get("host")
    except ValueError:  # "http://[x": not a URL, so not this site
        return False


async def _read_form(request: Request) -> dict[str, list[str]]:
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise Refused(415, "forms are sent as application/x-www-form-urlencoded")
    if not _same_origin(request):
        raise Refused(403, "this form was sent from another site")
    body = (await request.body()).decode("utf-8", errors="replace")
    try:
        return parse_qs(body, keep_blank_values=True, max_num_fields=MAX_FORM_FIELDS)
    except ValueError:
        raise Refused(413, "too many form fields") from None


async def posted(request: Request) -> dict[str, list[str]]:
    """A form of a signed-in page: same origin and the session's CSRF token, or a 403 page."""
    fields = await _read_form(request)
    cookie = request.cookies.get(COOKIE)
    if not sessions(request).csrf_ok(cookie, (fields.get("csrf") or [None])[0]):
        raise Refused(403, "this form has expired or did not come from this site: reload the "
                           "page and send it again")
    return fields


# A signed-in page's form, checked (``posted``): ``fields: FormDep``.
FormDep = Annotated[dict[str, list[str]], Depends(posted)]


def one(fields: dict[str, list[str]], name: str) -> str | None:
    """A single-valued field, stripped; None when absent or empty."""
    values = fields.get(name) or [""]
    text = values[0].strip()
    return text or None


# Login ---------------------------------------------------------------------------------------

def _next(target: str | None) -> str:
    """Only a page of the viewer: never another site."""
    if not target or not target.startswith("/ui") or target.startswith("//"):
        return "/ui/traces"
    return target


@router.get("", response_class=HTMLResponse)
def home() -> Response:
    return redirect("/ui/traces")


@router.get("/login", response_class=HTMLResponse)
def login_page(request: Request, next: str | None = None) -> Response:
    return render(request, "login.html", next=_next(next), error=None)


@router.post("/login", response_class=HTMLResponse)
async def login(request: Request, store: StoreDep) -> Response:
    fields = await _read_form(request)
    target = _next(one(fields, "next"))
    account = accounts.authenticate(store, one(fields, "api_key"))
    if account is None:
        return render(request, "login.html", status=401, next=target,
                      error="That is not a valid API key (`stash-pipeline accounts key ID` "
                            "prints a new one).")
    response = redirect(target)
    response.set_cookie(COOKIE, sessions(request).issue(account), max_age=SESSION_SECONDS,
                        httponly=True, samesite="strict", path="/",
                        secure=request.url.scheme == "https")
    return response


@router.post("/logout", response_class=HTMLResponse)
def logout(request: Request, store: StoreDep, fields: FormDep) -> Response:
    """Ends the session on the server too: the account's session epoch moves on, so this cookie
    (and every other of the account's sessions) is no session any more, even replayed."""
    account = sessions(request).account(store, request.cookies.get(COOKIE))
    if account is not None:
        store.end_sessions(account.id)
    response = redirect("/ui/login")
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
    return response


# Traces ----------------------------------------------------------------------------------------

def _list_query(request: Request) -> dict[str, Any]:
    """The list's page (sort, size, offset, whose latest score) and its search."""
    query = request.query_params
    sort = query.get("sort") or "-created"
    limit = query.get("limit") or "50"
    offset = query.get("offset") or "0"
    if sort not in SORTS:
        raise InputError(f"sort is one of {', '.join(SORTS)}", field="sort")
    if not _digits(limit) or int(limit) not in PAGE_SIZES:
        raise InputError(f"limit is one of {', '.join(map(str, PAGE_SIZES))}", field="limit")
    if not _digits(offset) or int(offset) > 2**31:
        raise InputError("offset is a whole number", field="offset")
    where = parse_filter(query)
    return {"sort": sort, "limit": int(limit), "offset": int(offset),
            "model": query.get("model") or None, "where": where,
            "params": filter_params(where, query=query.get("q"))}


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


def _trace_list(request: Request, store: Store, account: Account, *, status: int = 200,
                error: InputError | None = None, chosen: tuple[str, ...] = (),
                request_form: dict[str, str] | None = None, matched: bool = False,
                error_form: str = "create") -> HTMLResponse:
    try:
        query = _list_query(request)
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
    followed = request_ids(request.query_params.get("requests"))
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
                  scoring=requests_view(store, account.id, followed),
                  followed=",".join(map(str, followed)), poll_seconds=POLL_SECONDS)


@router.get("/traces", response_class=HTMLResponse)
def trace_list(request: Request, store: StoreDep, account: ViewerDep) -> Response:
    return _trace_list(request, store, account)


def _number(text: str | None) -> Any:
    """A form's number as the JSON request would carry it: digits become an int, the rest stays
    text so the request's own validation names the field."""
    return int(text) if text is not None and _digits(text) and len(text) < 10 else text


def _digits(text: str) -> bool:
    """ASCII digits only: ``str.isdigit()`` also takes "²", which ``int()`` refuses."""
    return text.isascii() and text.isdigit()


@router.post("/reward-models", response_class=HTMLResponse)
def create_model(request: Request, store: StoreDep, fields: FormDep,
                 account: ViewerDep) -> Response:
    """Create new reward model from the selected traces (or every trace that matches the
    search): the API's request, the API's 422s."""
    chosen = tuple(fields.get("trace_ids") or ())
    matched = one(fields, "match") == "all"
    ids = list(chosen)
    if matched:
        try:
            ids = trace_bulk.select(store, account.id,
                                    where=parse_filter(request.query_params))
        except InputError as error:
            return _trace_list(request, store, account, status=422, error=error, matched=True)
    body: dict[str, Any] = {"name": one(fields, "name") or "", "trace_ids": ids}
    for name in ("base_model", "epochs", "max_pairs"):
        value = one(fields, name)
        if value is not None:
            body[name] = value if name == "base_model" else _number(value)
    try:
        model = reward_models.create(store, account.id, body)
    except InputError as error:
        shown = {k: one(fields, k) or "" for k in ("name", "base_model", "epochs", "max_pairs")}
        return _trace_list(request, store, account, status=422, error=error, chosen=chosen,
                           request_form=shown, matched=matched)
    return redirect(f"/ui/reward-models/{model.id}")


# What a form on the trace page did, as the page then says it.
DONE = {
    "comment": "Saved: your comment.",
    "compare": "Saved: your comparison. It stays pending until a reviewer other than you "
               "approves it.",
    "contribute-on": "This trace now contributes to shared-evaluator training.",
    "contribute-off": "This trace no longer contributes: it is left out of future candidates "
                      "(what released weights learned stays).",
}


def _trace_page(request: Request, store: Store, account: Account, trace_id: str, *,
                status: int = 200,
                error: InputError | None = None, form: str | None = None,
                done: str | None = None) -> HTMLResponse:
    models = views.models_of(store, account.id)
    followed = request_ids(request.query_params.get("requests"))
    view = views.trace_view(store, account.id, trace_id,
                            evaluator=request.query_params.get("evaluator"),
                            names={m.id: m.name for m in models})
    return render(request, "trace.html", status=status, account=account, trace=view["trace"],
                  view=view, models=[m for m in models if m.status == "succeeded"],
                  error=error, form=form, done=DONE.get(done or ""),
                  scoring=requests_view(store, account.id, followed),
                  followed=",".join(map(str, followed)), poll_seconds=POLL_SECONDS)


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


def _author(account: Account) -> str:
    return account.name or account.id


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

    queued: list[int] = []

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
        action=one(fields, "action_id"), author=_author(account)))


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
        author = _author(account)
        rationale = one(fields, "rationale")
        store.add_feedback([ReviewedComparison(
            feedback_id("comparison", chosen, rejected, author), chosen, rejected,
            status="pending", rationale=rationale, author=author)], owner=account.id)

    back = one(fields, "next")  # the side-by-side page the comparison was made on
    if back:
        back = _next(back)
        back += ("&" if "?" in back else "?") + "done=compare"
    return _feedback_form(request, store, account, trace_id, "compare", give, back=back)


# Reward models --------------------------------------------------------------------------------

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


LIVE_STATUSES = ("queued", "running")
POLL_SECONDS = 2  # how often a live model's page asks for its progress


def _run_progress(run_id: str) -> dict[str, Any] | None:
    """The run's progress as JSON fields, or None when the Dagster instance cannot be read (the
    page then says it waits for a report; the model's status still comes from the store)."""
    from stash_pipeline.instance import run_progress

    try:
        progress = run_progress(run_id)
    except Exception as error:  # noqa: BLE001 - progress is a courtesy; the page must still load
        log.warning("the progress of run %s is unreadable: %s", run_id, error)
        return None
    return {"dagster_step": progress.dagster_step, **asdict(progress.worker)}


def wait_text(wait: dict[str, Any] | None) -> str:
    """What a queued model or Score again request waits for (``defs.worker_queue.Wait``)."""
    if wait and wait.get("waiting_for") == "worker":
        return f"Waiting for the worker: {wait['runs_ahead']} runs ahead."
    return "Waiting for the pipeline to start its run."


def progress_text(status: str, progress: dict[str, Any] | None,
                  wait: dict[str, Any] | None = None) -> str:
    """The sentence a live model's page shows of its progress (while queued: what it waits for,
    the worker with the runs ahead of it, or its run)."""
    if status == "queued":
        return wait_text(wait)
    if status != "running":
        return f"The model is {status}."
    progress = progress or {}
    parts = []
    if progress.get("dagster_step"):
        parts.append(f"Dagster step {progress['dagster_step']}")
    if progress.get("phase"):
        parts.append(f"phase {progress['phase']}")
    if progress.get("step") is not None:
        parts.append(f"training step {progress['step']}/{progress['total']}")
    if progress.get("loss") is not None:
        parts.append(f"loss {progress['loss']:.4f}")
    if progress.get("pairs_per_second") is not None:
        parts.append(f"{progress['pairs_per_second']:.2f} pairs/s")
    line = progress.get("line") or ""
    if line and not line.startswith(("step ", "phase ")):  # a phase's counts and time left
        parts.append(line)
    return " · ".join(parts) if parts else "Running: waiting for the run's first report."


def live_view(model: Any) -> dict[str, Any]:
    """What a model's page polls while the model is queued or running: its status and attempt,
    the run's progress as the worker reports it, and the sentence the page shows."""
    from stash_pipeline.instance import model_queue_fields

    progress = (_run_progress(model.run_id) if model.status == "running" and model.run_id
                else None)
    wait = model_queue_fields(model)["wait"] if model.status == "queued" else None
    return {"id": model.id, "status": model.status, "attempt": model.attempt,
            "live": model.status in LIVE_STATUSES, "progress": progress, "wait": wait,
            "text": progress_text(model.status, progress, wait)}


def live_json(request: Request, store: Store,
              view: Callable[[Store, Account], dict[str, Any]]) -> Response:
    """What a live page polls, as JSON for the session's account (``view(store, account)``):
    401 without a session, 404 for what is not the account's (or none), like the page itself."""
    account = sessions(request).account(store, request.cookies.get(COOKIE))
    if account is None:
        return error_response(401, "not signed in: log in to the viewer again",
                              headers=SECURITY_HEADERS)
    try:
        shown = view(store, account)
    except NotFoundError as error:
        return error_response(404, str(error), headers=SECURITY_HEADERS)
    return JSONResponse(shown, headers=SECURITY_HEADERS)


@router.get("/reward-models/{model_id}/progress")
def model_progress(model_id: str, request: Request, store: StoreDep) -> Response:
    """The model page's live progress."""
    return live_json(request, store, lambda store, account: live_view(
        reward_models.get(store, account.id, model_id)))


# The Score again requests a page follows after Score again (``requests=5,6``): a bulk action
# makes one request per MAX_TRACES_PER_REQUEST traces; the page follows its first ones.
MAX_FOLLOWED = 20
REQUEST_TEXT = {"running": "Running: the worker is scoring it.",
                "succeeded": "Done: the page shows its new scores."}


def request_ids(text: str | None) -> list[int]:
    """The requests of a page's ``requests`` parameter; none for a malformed one."""
    ids = []
    for part in (text or "").split(",")[:MAX_FOLLOWED]:
        if not _digits(part) or len(part) > 10 or not 1 <= int(part) < 2**31:
            return []
        ids.append(int(part))
    return ids


def request_text(state: dict[str, Any]) -> str:
    """The sentence of a Score again request's state (``routes.traces.request_state_of``)."""
    if state["status"] is None:
        return "Queued; where it stands in the run queue cannot be read just now."
    if state["status"] == "queued":
        return wait_text(state["wait"])
    if state["status"] == "failed":
        return f"Failed: {reason_line(state['error']) or 'its run failed'}"
    return REQUEST_TEXT[state["status"]]


def requests_view(store: Store, owner: str, ids: Sequence[int]) -> dict[str, Any] | None:
    """What a page shows of the Score again requests it follows: each one's status and sentence,
    the status that leads (running, queued, failed, succeeded), and whether any is still live
    (queued or running: the page polls it as a model's page polls the model). None for none;
    NotFoundError for a request that is not the owner's."""
    from stash_pipeline.api.routes.traces import request_state_of

    if not ids:
        return None
    shown = []
    for request_id in ids:
        scoring_requests.get(store, owner, request_id)
        state = request_state_of(request_id)
        shown.append({"request_id": request_id, "status": state["status"],
                      "text": request_text(state)})
    order = ("running", "queued", None, "failed", "succeeded")
    status = min((s["status"] for s in shown), key=order.index) or "queued"
    return {"requests": shown, "status": status,
            "live": any(s["status"] in (*LIVE_STATUSES, None) for s in shown),
            "text": " ".join(f"Score again request {s['request_id']}: {s['text']}"
                             for s in shown)}


@router.get("/score-requests/progress")
def requests_progress(request: Request, store: StoreDep, requests: str = "") -> Response:
    """The followed Score again requests' state (``requests_view``), as a page polls it."""
    ids = request_ids(requests)

    def view(store: Store, account: Account) -> dict[str, Any]:
        if not ids:
            raise NotFoundError("no such scoring request")
        return requests_view(store, account.id, ids) or {}

    return live_json(request, store, view)


@router.get("/reward-models/{model_id}", response_class=HTMLResponse)
def model_page(model_id: str, request: Request, store: StoreDep, account: ViewerDep) -> Response:
    model = reward_models.get(store, account.id, model_id)
    metrics = dict(model.metrics or {})
    losses = metrics.pop("loss_curve", None) or []
    phases = metrics.pop("phases", None) or {}
    scores = store.scores_of_evaluator(model.id) if model.status == "succeeded" else []
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
        separation=separation_note(separation([s.raw for s in scores])),
        top=scores[:5], bottom=scores[-5:][::-1] if len(scores) > 5 else [],
        live=live_view(model) if model.status in LIVE_STATUSES else None,
        poll_seconds=POLL_SECONDS)


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


# Errors ---------------------------------------------------------------------------------------

def install(app: FastAPI, first: Sequence[APIRouter] = ()) -> None:
    """Serve the viewer from ``app``: its pages (``first``'s routes before this module's), its
    static files, its error pages. Call it after ``errors.install``: on ``/ui`` paths the API's
    JSON errors become pages."""
    app.state.ui_sessions = Sessions(session_secret())
    for routes in first:
        app.include_router(routes)
    app.include_router(router)
    # The API's root is where a browser lands first: it leads to the viewer.
    app.add_api_route("/", home, methods=["GET"], include_in_schema=False)
    app.mount("/ui/static", StaticFiles(directory=HERE / "static"), name="ui-static")

    def page(status: int, message: str) -> Callable[[Request, Exception], Any]:
        return lambda request, error: render(
            request, "error.html", status=status, account=None, status_code=status,
            message=message or str(error))

    def on_ui(kind: type[Exception], status: int | None, message: str = "") -> None:
        json_handler = app.exception_handlers.get(kind)

        async def handle(request: Request, error: Exception) -> Response:
            if not request.url.path.startswith("/ui"):
                if json_handler is None:
                    raise error
                result = json_handler(request, error)
                return await result if hasattr(result, "__await__") else result
            if isinstance(error, LoginRequired):
                return redirect("/ui/login?" + urlencode({"next": error.target}))
            if status is None and not isinstance(error, (Refused, StarletteHTTPException)):
                # A database or disk error: the page says what the API's JSON would.
                answer = json_handler(request, error)
                answer = await answer if hasattr(answer, "__await__") else answer
                shown = json.loads(answer.body)["detail"]
                response = page(answer.status_code, shown)(request, error)
                if "retry-after" in answer.headers:
                    response.headers["Retry-After"] = answer.headers["retry-after"]
                return response
            code = status
            if isinstance(error, Refused):
                code = error.status
            elif isinstance(error, StarletteHTTPException):
                code = error.status_code
            shown = message or (str(error.detail) if isinstance(error, StarletteHTTPException)
                                else str(error))
            response = page(code, shown)(request, error)
            if isinstance(error, UnavailableError):
                response.headers["Retry-After"] = str(error.retry_after_s)
            return response

        app.add_exception_handler(kind, handle)

    on_ui(LoginRequired, None)
    on_ui(Refused, None)
    on_ui(NotFoundError, 404, "Not found: there is no such page of yours.")
    on_ui(InputError, 422)
    on_ui(StatusError, 409)
    on_ui(StarletteHTTPException, None)
    # Outages and full disks are pages too, in the JSON handler's words (which name no host).
    on_ui(UnavailableError, 503)
    on_ui(StorageFullError, 507)
    on_ui(sa.exc.DBAPIError, None)
    on_ui(OSError, None)
