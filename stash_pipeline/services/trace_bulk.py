"""Actions on many traces at once: chosen ones, or every trace that matches a search.

The viewer's bulk form, the API's /api/v1/traces/bulk/... routes and `traces export` take a
selection (``select``) and act on all of it in one transaction where the store allows (contribution,
comments), or in requests of at most MAX_TRACES_PER_REQUEST (Score again). "All that match" is
resolved to ids in SQL, never by reading the traces.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator, Sequence
from typing import Any

from stash_pipeline.core.errors import InputError, NotFoundError
from stash_pipeline.core.serialize import openai_message_dict
from stash_pipeline.core.trace_search import TraceFilter
from stash_pipeline.core.validation import check_trace_id
from stash_pipeline.pipelines.trace_scoring import NEEDS_ACTION_TRAINING
from stash_pipeline.services import scoring_requests
from stash_pipeline.services.feedback import MAX_COMMENT_LENGTH, comment_item
from stash_pipeline.services.traces import list_item_view, release_version
from stash_pipeline.store import Store
from stash_pipeline.store.scoring_requests import ScoringRequest

MAX_BULK_TRACES = 50_000  # one bulk action's selection
EXPORT_CHUNK = 200  # traces read at a time while exporting
EXPORT_MEDIA_TYPES = {"jsonl": "application/x-ndjson", "csv": "text/csv; charset=utf-8"}
EXPORT_FORMATS = tuple(EXPORT_MEDIA_TYPES)
# The CSV's columns: the trace list's, in its order.
CSV_COLUMNS = ("id", "agent", "domain", "task_id", "preview", "outcome", "mean_action_credit",
               "min_action_credit", "actions_scored", "actions", "latest_score",
               "latest_score_model_id", "scoring_state", "personal_state", "contribute",
               "version", "created_at", "updated_at")


def select(store: Store, owner: str, *, trace_ids: Sequence[Any] | None = None,
           where: TraceFilter | None = None) -> list[str]:
    """The selection's trace ids: ``trace_ids`` (every one the owner's, else NotFoundError and
    nothing happens), or every trace matching ``where`` (None: all of the owner's)."""
    if trace_ids is not None:
        if not isinstance(trace_ids, (list, tuple)) or not trace_ids:
            raise InputError("select at least one trace", field="trace_ids")
        if len(trace_ids) > MAX_BULK_TRACES:
            raise InputError(f"at most {MAX_BULK_TRACES} traces at once", field="trace_ids")
        for index, trace_id in enumerate(trace_ids):
            check_trace_id(trace_id, field=f"trace_ids[{index}]")
        wanted = list(dict.fromkeys(trace_ids))
        mine = store.owned_versions(wanted, owner)
        missing = [t for t in wanted if t not in mine]
        if missing:  # another account's trace reads as missing
            shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more"
                                              if len(missing) > 5 else "")
            raise NotFoundError(f"no trace {shown} of yours; nothing was changed")
        return wanted
    ids = store.matching_trace_ids(owner, where=where, shared_evaluator=release_version(store),
                                   limit=MAX_BULK_TRACES + 1)
    if len(ids) > MAX_BULK_TRACES:
        raise InputError(f"more than {MAX_BULK_TRACES} traces match: narrow the search",
                         field="match")
    if not ids:
        raise InputError("no trace matches this search", field="match")
    return ids


def contribute(store: Store, owner: str, ids: Sequence[str], flag: Any) -> int:
    """Opt the traces in or out of shared-evaluator training, all or nothing."""
    if not isinstance(flag, bool):
        raise InputError(f"contribute is true or false, got {flag!r}", field="contribute")
    return store.set_contribute_many(ids, flag, owner)


def comment(store: Store, owner: str, ids: Sequence[str], text: Any, *,
            author: str | None) -> int:
    """The same comment on each of the traces, in one transaction."""
    if not isinstance(text, str) or not text.strip():
        raise InputError("a comment needs text", field="text")
    if len(text) > MAX_COMMENT_LENGTH:
        raise InputError(f"a comment is at most {MAX_COMMENT_LENGTH} characters", field="text")
    items = [comment_item(trace_id, text, author=author) for trace_id in ids]
    return store.add_feedback(items, owner=owner)["comments"]


def score(store: Store, owner: str, ids: Sequence[str], *, model_id: str | None = None,
          actions: bool = False) -> list[ScoringRequest]:
    """Score again with the release (default) or a personal model, in requests of at most
    MAX_TRACES_PER_REQUEST traces; the evaluator is checked before any is queued."""
    chosen = scoring_requests.scorer(store, owner, model_id)
    if actions and not chosen.scores_actions:
        raise InputError(NEEDS_ACTION_TRAINING, field="actions")
    size = scoring_requests.MAX_TRACES_PER_REQUEST
    return [scoring_requests.request(store, owner, list(ids[start:start + size]),
                                     model_id=model_id, actions=actions)
            for start in range(0, len(ids), size)]


def export_lines(store: Store, owner: str, ids: Sequence[str], format: str) -> Iterator[str]:
    """The traces as JSON Lines (each a trace object in OpenAI's chat form, tool calls with
    ``function.name`` and string ``arguments``, that `stash-pipeline import` reads back to the
    same trace, with its ``summary``: the trace list's line) or CSV (the trace list's columns,
    one row a trace), a chunk of traces at a time."""
    check_format(format)
    shared = release_version(store)
    for start in range(0, len(ids), EXPORT_CHUNK):
        chunk = list(ids[start:start + EXPORT_CHUNK])
        summaries = {s.id: list_item_view(s) for s in store.list_traces(
            owner=owner, action_evaluator=shared, where=TraceFilter(trace_ids=tuple(chunk)))}
        if format == "csv":
            yield _csv([summaries[t] for t in chunk if t in summaries], header=start == 0)
            continue
        for trace in store.get_traces(chunk):
            record = {"id": trace.id, "agent": trace.agent, "domain": trace.domain,
                      "metadata": trace.metadata, "tools": list(trace.tools),
                      "messages": [openai_message_dict(m) for m in trace.messages],
                      "summary": summaries.get(trace.id)}
            yield json.dumps(record, ensure_ascii=False, default=str) + "\n"


def check_format(format: str) -> None:
    if format not in EXPORT_FORMATS:
        raise InputError(f"format is one of {', '.join(EXPORT_FORMATS)}, got {format!r}",
                         field="format")


# A spreadsheet runs a cell that starts so as a formula ("CSV injection"): such text is written
# with a leading apostrophe, which spreadsheets show as text.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _csv(rows: list[dict[str, Any]], *, header: bool) -> str:
    import pandas as pd

    safe = [{k: "'" + v if isinstance(v, str) and v.startswith(FORMULA_STARTS) else v
             for k, v in row.items()} for row in rows]
    buffer = io.StringIO()
    pd.DataFrame(safe, columns=list(CSV_COLUMNS)).to_csv(buffer, index=False, header=header)
    return buffer.getvalue()
