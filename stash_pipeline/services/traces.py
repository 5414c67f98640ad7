"""Traces as their owner sees them: import, the sorted list, one trace with its scores, opt-in.

Every function acts on the caller's own traces: another account's trace is "not found" (the API's
404), exactly like one that does not exist. Scores shown are the shared evaluator's (tagged with a
release version) and the caller's own personal models', kept apart.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stash_pipeline.core.errors import InputError, NotFoundError, OwnershipError
from stash_pipeline.core.record_ids import parse_record_id
from stash_pipeline.core.serialize import message_to_dict
from stash_pipeline.core.trace_search import FILTER_PARAMS, parse_filter
from stash_pipeline.core.traces import Trace
from stash_pipeline.core.validation import check_name
from stash_pipeline.services import reward_models
from stash_pipeline.services.imports import ImportReport, import_records
from stash_pipeline.store import Store
from stash_pipeline.store.saved_filters import SavedFilter
from stash_pipeline.store.trace_pages import SORTS, TraceFilter, TraceSummary, scoring_state

MAX_PAGE_SIZE = 500


def owned_trace(store: Store, owner: str, trace_id: str) -> Trace:
    try:
        trace = store.get_trace(trace_id)
    except NotFoundError:
        trace = None
    if trace is None or trace.owner != owner:
        raise NotFoundError(f"trace {trace_id} does not exist")
    return trace


def import_file(store: Store, owner: str, path: Path, *, format: str = "auto",
                contribute: bool = False, label: str | None = None,
                on_imported: Callable[[ImportReport], None] | None = None,
                outcome_field: str | None = None, **options: Any) -> dict[str, Any]:
    """Import one file of traces for ``owner``, all or nothing, as ``stash-pipeline import`` does.

    ``label`` names the file in errors instead of its path (the API: "request body");
    ``on_imported`` gets the report once the import is committed. ``options``: ``read_path``'s
    ``author``, ``reviewer`` and ``skip_invalid``. ``outcome_field`` None reads the default path
    quietly; a path given is counted, and ``warnings`` says when it matched no trace. Returns the
    import summary, its counts by format, owner and domain, ``skipped_invalid``, ``warnings``
    and the ids of the traces imported, in file order.
    """
    from stash_pipeline.importers import DEFAULT_OUTCOME_FIELD, read_path

    shown = label or str(path)
    ids: dict[str, None] = {}
    skipped: list[InputError] = []

    def records():
        ids.clear()
        skipped.clear()
        for record in read_path(path, format=format, owner=owner, contribute=contribute,
                                on_skipped=skipped.append,
                                outcome_field=(DEFAULT_OUTCOME_FIELD if outcome_field is None
                                               else outcome_field), **options):
            ids[record.trace.id] = None
            yield record

    try:
        report = import_records(store, records, outcome_field=outcome_field or None)
    except InputError as error:
        file = shown if error.file == str(path) else error.file
        raise InputError(error.reason.replace(str(path), shown), file=file, record=error.record,
                         field=error.field) from None
    except OwnershipError as error:
        # Say no more than that the id is taken: whose it is, is nobody else's business.
        name = "a trace id" if error.trace_id is None else f"trace id {error.trace_id}"
        raise OwnershipError(f"{name} in the {shown} is taken; give the trace another id") \
            from None
    if on_imported is not None:
        on_imported(report)
    return {**report.as_dict(), "skipped_invalid": len(skipped), "warnings": report.warnings(),
            "trace_ids": list(ids)}


def page(store: Store, owner: str, *, sort: str = "-created", limit: int = 50, offset: int = 0,
         model_id: str | None = None, where: TraceFilter | None = None) -> dict[str, Any]:
    """One page of the trace list; ``model_id`` picks which personal model's score is shown;
    ``where`` (core.trace_search) narrows it."""
    if sort not in SORTS:
        raise InputError(f"sort is one of {', '.join(SORTS)}", field="sort")
    if not 1 <= limit <= MAX_PAGE_SIZE:
        raise InputError(f"limit is 1 to {MAX_PAGE_SIZE}", field="limit")
    if offset < 0:
        raise InputError("offset is 0 or more", field="offset")
    model_ids = None
    if model_id is not None:
        model_ids = [reward_models.get(store, owner, model_id).id]
    shared = release_version(store)
    items, total = store.page_traces(owner, shared_evaluator=shared, model_ids=model_ids,
                                     sort=sort, limit=limit, offset=offset, where=where)
    return {
        "traces": [list_item_view(item) for item in items],
        "total": total, "limit": limit, "offset": offset,
        "next_offset": offset + limit if offset + limit < total else None,
        "shared_evaluator": shared,
    }


def release_version(store: Store) -> str | None:
    """The latest shared release's version: whose action credit lists and searches read."""
    release = store.latest_release()
    return release.version if release else None


def list_item_view(item: TraceSummary) -> dict[str, Any]:
    data = dataclasses.asdict(item)
    data["created_at"] = item.created_at.isoformat()
    data["updated_at"] = item.updated_at.isoformat()
    return data


def detail(store: Store, owner: str, trace_id: str) -> dict[str, Any]:
    """One trace: messages, actions, scores of each evaluator and the shared evaluator's state."""
    trace = owned_trace(store, owner, trace_id)
    personal = {m.id for m in store.list_reward_models(owner=owner)}
    shared = {r.version for r in store.list_releases()}
    release = store.latest_release()
    # Seed: "Until then, traces wait for the first release".
    state = scoring_state(release.version if release else None,
                          store.scored_version(trace.id, release.version) if release else None,
                          trace.version)

    def kind(evaluator: str) -> str | None:
        return "personal" if evaluator in personal else "shared" if evaluator in shared else None

    created, updated = store.trace_times(trace.id)
    tool_names = {a.id: (trace.tool_call(a).name if a.is_tool_call else None)
                  for a in trace.actions()}
    return {
        "id": trace.id, "agent": trace.agent, "domain": trace.domain, "task_id": trace.task_id,
        "metadata": trace.metadata, "tools": list(trace.tools), "contribute": trace.contribute,
        "version": trace.version, "created_at": created.isoformat(),
        "updated_at": updated.isoformat(),
        "messages": [{"index": i, **message_to_dict(m)} for i, m in enumerate(trace.messages)],
        "actions": [{"id": a.id, "local_id": a.local_id, "message_index": a.message_index,
                     "call_index": a.call_index, "tool_name": tool_names[a.id]}
                    for a in trace.actions()],
        "shared_evaluator": {"release": release.version if release else None, "status": state},
        "scores": [{"evaluator": s.evaluator, "kind": kind(s.evaluator), "raw": s.raw,
                    "calibrated": s.calibrated}
                   for s in store.scores_for(trace.id) if kind(s.evaluator)],
        "action_scores": [{"action_id": s.action_id, "evaluator": s.evaluator,
                           "kind": kind(s.evaluator), "raw": s.raw, "credit": s.credit}
                          for s in store.action_scores_for(trace.id) if kind(s.evaluator)],
        "feedback": [{"type": type(f).__name__, **dataclasses.asdict(f)}
                     for f in store.feedback_for([trace.id])],
    }


def set_contribution(store: Store, owner: str, trace_id: str, contribute: Any) -> dict[str, Any]:
    """Opt a trace in or out of shared-evaluator training. Opting out excludes it from future
    candidates; it cannot remove what released weights have learned."""
    if not isinstance(contribute, bool):
        raise InputError(f"contribute is true or false, got {contribute!r}", field="contribute")
    owned_trace(store, owner, trace_id)
    store.set_contribute(trace_id, contribute, owner)
    return {"id": trace_id, "contribute": contribute}


def save_filter(store: Store, owner: str, name: Any, params: dict[str, str]) -> SavedFilter:
    """Keep a search of the trace list under ``name`` (saving it again replaces the search); a
    search that does not parse is refused, never kept."""
    check_name(name, "name", optional=False)
    parse_filter(params)
    kept = {key: value for key, value in params.items() if key in FILTER_PARAMS and value}
    return store.save_filter(owner, name, kept)


def remove_filter(store: Store, owner: str, filter_id: str | int) -> None:
    """Remove the owner's saved filter by its id as given (a URL's text: its UUID, or the integer
    id of one saved before 0012); InputError for text that is neither, NotFoundError for another
    account's."""
    store.remove_filter(owner, parse_record_id(filter_id, field="filter_id",
                                               what="a saved filter"))
