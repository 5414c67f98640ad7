"""The trace viewer's pages (docs/viewer.md): server-rendered HTML under ``/ui``.

Every page acts for the account of the session cookie and calls the same services as the JSON API,
so its rules are the API's: another account's trace or model is a 404 page, a bad request the
API's 422 message, shown inline beside the form that sent it.
"""

from __future__ import annotations

import json
import logging
import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlparse

import jinja2
from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from stash_pipeline.api.errors import error_response
from stash_pipeline.api.ui import plots
from stash_pipeline.api.ui.session import COOKIE, SESSION_SECONDS, Sessions, session_secret
from stash_pipeline.core.errors import InputError, NotFoundError, OwnershipError
from stash_pipeline.core.failures import reason_line
from stash_pipeline.core.feedback import ReviewedComparison, feedback_id
from stash_pipeline.core.requests import MAX_TRACE_IDS
from stash_pipeline.core.training_settings import (
    DEFAULT_BASE_MODEL,
    DEFAULT_EPOCHS,
    DEFAULT_MAX_PAIRS,
)
from stash_pipeline.services import accounts, feedback, reward_models, traces
from stash_pipeline.store import Account, StatusError
from stash_pipeline.store.trace_pages import SORTS, STATES, TraceFilter

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
templates.globals["credit_class"] = plots.credit_class

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


def viewer(request: Request) -> Account:
    """The session's account; a person without one is sent to the login page."""
    account = sessions(request).account(request.app.state.store, request.cookies.get(COOKIE))
    if account is None:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        raise LoginRequired(target)
    return account


def _same_origin(request: Request) -> bool:
    origin = request.headers.get("origin")
    if origin is None:  # not sent by every browser on a same-origin POST
        return True
    return urlparse(origin).netloc == request.headers.get("host")


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
async def login(request: Request) -> Response:
    fields = await _read_form(request)
    target = _next(one(fields, "next"))
    account = accounts.authenticate(request.app.state.store, one(fields, "api_key"))
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
def logout(fields: dict = Depends(posted)) -> Response:
    response = redirect("/ui/login")
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
    return response


# Traces ----------------------------------------------------------------------------------------

def _models(store: Any, owner: str) -> list[Any]:
    try:
        return reward_models.list_models(store, owner)
    except NotFoundError:  # an account from before the rollout: no personal models
        return []


def _list_query(request: Request) -> dict[str, Any]:
    query = request.query_params
    sort = query.get("sort") or "-created"
    limit = query.get("limit") or "50"
    offset = query.get("offset") or "0"
    if sort not in SORTS:
        raise InputError(f"sort is one of {', '.join(SORTS)}", field="sort")
    if not limit.isdigit() or int(limit) not in PAGE_SIZES:
        raise InputError(f"limit is one of {', '.join(map(str, PAGE_SIZES))}", field="limit")
    if not offset.isdigit() or int(offset) > 2**31:
        raise InputError("offset is a whole number", field="offset")
    state = query.get("state") or None
    if state is not None and state not in STATES:
        raise InputError(f"state is one of {', '.join(STATES)}", field="state")
    return {"sort": sort, "limit": int(limit), "offset": int(offset),
            "agent": query.get("agent") or None, "domain": query.get("domain") or None,
            "model": query.get("model") or None, "state": state}


def _trace_list(request: Request, account: Account, *, status: int = 200,
                error: InputError | None = None, chosen: tuple[str, ...] = (),
                request_form: dict[str, str] | None = None) -> HTMLResponse:
    store = request.app.state.store
    try:
        query = _list_query(request)
        page = traces.page(store, account.id, sort=query["sort"], limit=query["limit"],
                           offset=query["offset"], model_id=query["model"],
                           where=TraceFilter(agent=query["agent"], domain=query["domain"],
                                             state=query["state"]))
    except InputError as bad:
        raise Refused(422, str(bad)) from None

    def link(**changes: Any) -> str:
        merged = {**query, **changes}
        return "/ui/traces?" + urlencode({k: v for k, v in merged.items() if v is not None})

    models = _models(store, account.id)
    return render(request, "traces.html", status=status, account=account, page=page,
                  query=query, link=link, columns=LIST_COLUMNS, states=STATES,
                  facets=store.trace_facets(account.id), models=models,
                  model_names={m.id: m.name for m in models}, page_sizes=PAGE_SIZES,
                  error=error, chosen=set(chosen),
                  request_form=request_form or {"base_model": DEFAULT_BASE_MODEL,
                                                "epochs": str(DEFAULT_EPOCHS),
                                                "max_pairs": str(DEFAULT_MAX_PAIRS)})


@router.get("/traces", response_class=HTMLResponse)
def trace_list(request: Request, account: Account = Depends(viewer)) -> Response:
    return _trace_list(request, account)


def _number(text: str | None) -> Any:
    """A form's number as the JSON request would carry it: digits become an int, the rest stays
    text so the request's own validation names the field."""
    return int(text) if text is not None and text.isdigit() and len(text) < 10 else text


@router.post("/reward-models", response_class=HTMLResponse)
def create_model(request: Request, fields: dict = Depends(posted),
                 account: Account = Depends(viewer)) -> Response:
    """Create new reward model from the selected traces: the API's request, the API's 422s."""
    chosen = tuple(fields.get("trace_ids") or ())
    body: dict[str, Any] = {"name": one(fields, "name") or "", "trace_ids": list(chosen)}
    for name in ("base_model", "epochs", "max_pairs"):
        value = one(fields, name)
        if value is not None:
            body[name] = value if name == "base_model" else _number(value)
    try:
        model = reward_models.create(request.app.state.store, account.id, body)
    except InputError as error:
        shown = {k: one(fields, k) or "" for k in ("name", "base_model", "epochs", "max_pairs")}
        return _trace_list(request, account, status=422, error=error, chosen=chosen,
                           request_form=shown)
    return redirect(f"/ui/reward-models/{model.id}")


def _evaluators(detail: dict[str, Any], names: dict[str, str]) -> list[dict[str, Any]]:
    """The evaluators with action credit on this trace: the shared release first."""
    found: dict[str, dict[str, Any]] = {}
    for score in detail["action_scores"]:
        entry = found.setdefault(score["evaluator"], {
            "id": score["evaluator"], "kind": score["kind"], "credits": {},
            "label": (f"shared evaluator {score['evaluator']}" if score["kind"] == "shared"
                      else f"personal: {names.get(score['evaluator'], score['evaluator'])}")})
        entry["credits"][score["action_id"]] = score["credit"]
    release = detail["shared_evaluator"]["release"]
    return sorted(found.values(), key=lambda e: (e["id"] != release, e["kind"] != "shared",
                                                 e["label"]))


def _trace_page(request: Request, account: Account, trace_id: str, *, status: int = 200,
                error: InputError | None = None, form: str | None = None,
                done: str | None = None) -> HTMLResponse:
    store = request.app.state.store
    detail = traces.detail(store, account.id, trace_id)
    models = _models(store, account.id)
    names = {m.id: m.name for m in models}
    evaluators = _evaluators(detail, names)
    wanted = request.query_params.get("evaluator")
    selected = next((e for e in evaluators if e["id"] == wanted), None) or (
        evaluators[0] if evaluators else None)
    credits = selected["credits"] if selected else {}
    by_message: dict[int, list[dict[str, Any]]] = defaultdict(list)
    cells = []
    for action in detail["actions"]:
        credit = credits.get(action["id"])
        cell = {**action, "credit": credit,
                "label": action["tool_name"] and f"{action['local_id']} {action['tool_name']}"
                or action["local_id"]}
        by_message[action["message_index"]].append(cell)
        cells.append(cell)
    scored = [c["credit"] for c in cells if c["credit"] is not None]
    others = [t for t in traces.page(store, account.id, limit=200)["traces"]
              if t["id"] != trace_id]
    return render(request, "trace.html", status=status, account=account, trace=detail,
                  evaluators=evaluators, selected=selected, cells=cells,
                  by_message=by_message,
                  mean_credit=sum(scored) / len(scored) if scored else None,
                  names=names, models=[m for m in models if m.status == "succeeded"],
                  others=others, error=error, form=form, done=done)


@router.get("/traces/{trace_id}", response_class=HTMLResponse)
def trace_page(trace_id: str, request: Request, done: str | None = None,
               account: Account = Depends(viewer)) -> Response:
    return _trace_page(request, account, trace_id, done=done)


def _feedback_form(request: Request, account: Account, trace_id: str, form: str,
                   give: Callable[[], Any]) -> Response:
    try:
        give()
    except (InputError, OwnershipError) as error:
        shown = error if isinstance(error, InputError) else InputError(str(error))
        return _trace_page(request, account, trace_id, status=422, error=shown, form=form)
    return redirect(f"/ui/traces/{trace_id}?done={form}#feedback")


def _author(account: Account) -> str:
    return account.name or account.id


@router.post("/traces/{trace_id}/ratings", response_class=HTMLResponse)
def rate(trace_id: str, request: Request, fields: dict = Depends(posted),
         account: Account = Depends(viewer)) -> Response:
    def give() -> None:
        text = one(fields, "value")
        try:
            value = float(text) if text is not None else None
        except ValueError:
            value = None
        if value is None or not math.isfinite(value):
            raise InputError(f"a rating is a finite number, got {text!r}", field="value")
        feedback.rate(request.app.state.store, account.id, trace_id, value,
                      action=one(fields, "action_id"), author=_author(account))

    return _feedback_form(request, account, trace_id, "rate", give)


@router.post("/traces/{trace_id}/comments", response_class=HTMLResponse)
def comment(trace_id: str, request: Request, fields: dict = Depends(posted),
            account: Account = Depends(viewer)) -> Response:
    return _feedback_form(request, account, trace_id, "comment", lambda: feedback.comment(
        request.app.state.store, account.id, trace_id, one(fields, "text") or "",
        action=one(fields, "action_id"), author=_author(account)))


@router.post("/traces/{trace_id}/comparisons", response_class=HTMLResponse)
def compare(trace_id: str, request: Request, fields: dict = Depends(posted),
            account: Account = Depends(viewer)) -> Response:
    """This trace against another of the account's traces: a pending comparison, as
    `feedback compare` makes one (a reviewer other than its author approves it later)."""
    store = request.app.state.store

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

    return _feedback_form(request, account, trace_id, "compare", give)


# Reward models --------------------------------------------------------------------------------

@router.get("/reward-models", response_class=HTMLResponse)
def model_list(request: Request, account: Account = Depends(viewer)) -> Response:
    models = reward_models.list_models(request.app.state.store, account.id)
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


def progress_text(status: str, progress: dict[str, Any] | None) -> str:
    """The sentence a live model's page shows of its progress."""
    if status == "queued":
        return "Waiting for the pipeline to start its run."
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
    progress = (_run_progress(model.run_id) if model.status == "running" and model.run_id
                else None)
    return {"id": model.id, "status": model.status, "attempt": model.attempt,
            "live": model.status in LIVE_STATUSES, "progress": progress,
            "text": progress_text(model.status, progress)}


@router.get("/reward-models/{model_id}/progress")
def model_progress(model_id: str, request: Request) -> Response:
    """The model page's live progress as JSON, for the session's account: 401 without a
    session, 404 for a model that is not the account's (or none), like the page itself."""
    store = request.app.state.store
    account = sessions(request).account(store, request.cookies.get(COOKIE))
    if account is None:
        return error_response(401, "not signed in: log in to the viewer again",
                              headers=SECURITY_HEADERS)
    try:
        model = reward_models.get(store, account.id, model_id)
    except NotFoundError as error:
        return error_response(404, str(error), headers=SECURITY_HEADERS)
    return JSONResponse(live_view(model), headers=SECURITY_HEADERS)


@router.get("/reward-models/{model_id}", response_class=HTMLResponse)
def model_page(model_id: str, request: Request, account: Account = Depends(viewer)) -> Response:
    store = request.app.state.store
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
        top=scores[:5], bottom=scores[-5:][::-1] if len(scores) > 5 else [],
        live=live_view(model) if model.status in LIVE_STATUSES else None,
        poll_seconds=POLL_SECONDS)


@router.get("/reward-models/{model_id}/weights", response_class=HTMLResponse)
def weights(model_id: str, request: Request, account: Account = Depends(viewer)) -> Response:
    """Download weights: a redirect to the five-minute signed URL."""
    state = request.app.state
    return redirect(reward_models.weights_url(state.store, state.objects, account.id, model_id))


@router.post("/reward-models/{model_id}/score", response_class=HTMLResponse)
def score_again(model_id: str, request: Request, fields: dict = Depends(posted),
                account: Account = Depends(viewer)) -> Response:
    reward_models.score_again(request.app.state.store, account.id, model_id)
    return redirect(f"/ui/reward-models/{model_id}")


@router.post("/reward-models/{model_id}/retry", response_class=HTMLResponse)
def retry(model_id: str, request: Request, fields: dict = Depends(posted),
          account: Account = Depends(viewer)) -> Response:
    reward_models.retry(request.app.state.store, account.id, model_id)
    return redirect(f"/ui/reward-models/{model_id}")


# Releases -------------------------------------------------------------------------------------

@router.get("/releases", response_class=HTMLResponse)
def releases(request: Request, account: Account = Depends(viewer)) -> Response:
    """The shared evaluator's releases and every gate decision, each with its report per slice."""
    store = request.app.state.store
    released = {r.version: r for r in store.list_releases()}
    decisions = sorted(store.list_benchmark_comparisons(), key=lambda c: c.created_at,
                       reverse=True)
    return render(request, "releases.html", account=account, released=released,
                  decisions=decisions)


# Errors ---------------------------------------------------------------------------------------

def install(app: FastAPI) -> None:
    """Serve the viewer from ``app``: its pages, its static files, its error pages. Call it after
    ``errors.install``: on ``/ui`` paths the API's JSON errors become pages."""
    app.state.ui_sessions = Sessions(session_secret())
    app.include_router(router)
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
            code = status
            if isinstance(error, Refused):
                code = error.status
            elif isinstance(error, StarletteHTTPException):
                code = error.status_code
            shown = message or (str(error.detail) if isinstance(error, StarletteHTTPException)
                                else str(error))
            return page(code, shown)(request, error)

        app.add_exception_handler(kind, handle)

    on_ui(LoginRequired, None)
    on_ui(Refused, None)
    on_ui(NotFoundError, 404, "Not found: there is no such page of yours.")
    on_ui(InputError, 422)
    on_ui(StatusError, 409)
    on_ui(StarletteHTTPException, None)
