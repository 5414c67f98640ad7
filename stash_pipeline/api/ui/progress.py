"""What the viewer shows of work in flight, and what its pages poll without a reload (ui.js): a
queued or running model's progress (``live_view``), the Score again requests a page follows
(``requests_view``), each with the sentence the page shows. The model page and the trace pages
render these; ``progress_pages`` serves them as JSON."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from fastapi import Request

from stash_pipeline.core.errors import InputError
from stash_pipeline.core.failures import reason_line
from stash_pipeline.core.record_ids import parse_record_id
from stash_pipeline.services import scoring_requests
from stash_pipeline.store import Store

log = logging.getLogger(__name__)
LIVE_STATUSES = ("queued", "running")
POLL_SECONDS = 2  # how often a live page asks for its progress


def _run_progress(run_id: str) -> dict[str, Any] | None:
    """The run's progress as JSON fields, or None when the Dagster instance cannot be read (the
    page then says it waits for a report; the model's status still comes from the store)."""
    from stash_pipeline.dagster_runs import run_progress

    try:
        progress = run_progress(run_id)
    except Exception as error:  # noqa: BLE001 - progress is a courtesy; the page must still load
        log.warning("the progress of run %s is unreadable: %s", run_id, error)
        return None
    return {"dagster_step": progress.dagster_step, **asdict(progress.worker)}


def wait_text(wait: dict[str, Any] | None) -> str:
    """What a queued model or Score again request waits for (``defs.worker_queue.Wait``)."""
    if wait and wait.get("waiting_for") == "worker":
        n = wait["runs_ahead"]
        return f"Waiting for the worker: {n} run{'' if n == 1 else 's'} ahead."
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
    from stash_pipeline.dagster_runs import model_queue_fields

    progress = (_run_progress(model.run_id) if model.status == "running" and model.run_id
                else None)
    wait = model_queue_fields(model)["wait"] if model.status == "queued" else None
    return {"id": model.id, "status": model.status, "attempt": model.attempt,
            "live": model.status in LIVE_STATUSES, "progress": progress, "wait": wait,
            "text": progress_text(model.status, progress, wait)}


# The Score again requests a page follows after Score again (``requests=<id>,<id>``, UUIDs or the
# integer ids of requests made before them): a bulk action makes one request per
# MAX_TRACES_PER_REQUEST traces; the page follows its first ones.
MAX_FOLLOWED = 20
REQUEST_TEXT = {"running": "Running: the worker is scoring it.",
                "succeeded": "Done: the page shows its new scores."}


def request_ids(text: str | None) -> list[str]:
    """The requests of a page's ``requests`` parameter (core.record_ids); none for a malformed
    one."""
    try:
        return [str(parse_record_id(part, field="requests", what="a Score again request"))
                for part in text.split(",")[:MAX_FOLLOWED]] if text else []
    except InputError:
        return []


def request_text(state: dict[str, Any]) -> str:
    """The sentence of a Score again request's state (``routes.traces.request_state_of``)."""
    if state["status"] is None:
        return "Queued; where it stands in the run queue cannot be read just now."
    if state["status"] == "queued":
        return wait_text(state["wait"])
    if state["status"] == "failed":
        return f"Failed: {reason_line(state['error']) or 'its run failed'}"
    return REQUEST_TEXT[state["status"]]


def requests_view(store: Store, owner: str, ids: Sequence[str]) -> dict[str, Any] | None:
    """What a page shows of the Score again requests it follows: each one's status and sentence,
    the status that leads (running, queued, failed, succeeded), and whether any is still live
    (queued or running: the page polls it as a model's page polls the model). None for none;
    NotFoundError for a request that is not the owner's."""
    from stash_pipeline.api.routes.traces import request_state_of

    if not ids:
        return None
    shown = []
    for request_id in ids:
        state = request_state_of(scoring_requests.get(store, owner, request_id))
        shown.append({"request_id": request_id, "status": state["status"],
                      "text": request_text(state)})
    order = ("running", "queued", None, "failed", "succeeded")
    status = min((s["status"] for s in shown), key=order.index) or "queued"
    return {"requests": shown, "status": status,
            "live": any(s["status"] in (*LIVE_STATUSES, None) for s in shown),
            "text": " ".join(f"Score again request {s['request_id']}: {s['text']}"
                             for s in shown)}


def followed(request: Request, store: Store, owner: str) -> dict[str, Any]:
    """A page's context for the Score again requests its ``requests`` parameter follows."""
    ids = request_ids(request.query_params.get("requests"))
    return {"scoring": requests_view(store, owner, ids), "followed": ",".join(ids),
            "poll_seconds": POLL_SECONDS}
