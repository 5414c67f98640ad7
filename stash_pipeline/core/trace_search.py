"""Finding traces: the filter every trace list, search, bulk action and review queue takes, and
the text each trace is found by.

One filter for the API, the viewer, the CLI and saved filters: ``parse_filter`` reads it from
text parameters (a query string, a form, a saved filter) with one InputError per bad field, and
``filter_params`` writes it back, so a link, a saved filter and a bulk form carry the same search.

Text search is a case-insensitive substring match over what was said and done: user, assistant
and tool messages, tool call names and arguments. System prompts are left out: they are the same
instructions on every trace of an agent and would match every search.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import date, datetime, time, timedelta, timezone
from typing import Any

from stash_pipeline.core.errors import InputError
from stash_pipeline.core.traces import Trace
from stash_pipeline.core.validation import MAX_NAME_CHARS, check_text

# The shared evaluator's scoring state of a trace: no release yet, not scored by it, scored.
STATES = ("waiting", "pending", "scored")
# A trace's verified outcome: every check succeeded, one failed, or none recorded.
OUTCOMES = ("succeeded", "failed", "none")
PREVIEW_CHARS = 200  # the first user message as the list shows it
MAX_SEARCH_CHARS = 200_000  # what a trace is searched by (its start, on very long traces)
MAX_QUERY_CHARS = 200
# Parameter names, in the order links and saved filters write them.
FILTER_PARAMS = ("q", "agent", "domain", "tool", "task_id", "outcome", "state", "credit_min",
                 "credit_max", "created_from", "created_to")


@dataclass(frozen=True)
class TraceFilter:
    """Narrows a trace list: every field set must hold (None: any).

    ``text`` is matched against ``search_text`` (already casefolded); the credit range is on the
    shared release's mean action credit (traces it has not scored never match a range); the dates
    are on ``created_at``, ``created_from`` inclusive and ``created_to`` exclusive.
    """

    agent: str | None = None
    domain: str | None = None
    state: str | None = None  # one of STATES
    text: str | None = None
    tool: str | None = None
    task_id: str | None = None
    outcome: str | None = None  # one of OUTCOMES
    credit_min: float | None = None
    credit_max: float | None = None
    created_from: datetime | None = None
    created_to: datetime | None = None
    trace_ids: tuple[str, ...] | None = None  # only these (a selection; not a parameter)

    def __bool__(self) -> bool:
        return any(getattr(self, f.name) is not None for f in fields(self))


def parse_filter(values: Mapping[str, Any]) -> TraceFilter:
    """The filter named by text parameters (``FILTER_PARAMS``; empty or missing: any).

    Unknown names are not this function's business (the caller's parameters may hold others);
    each bad value is an InputError naming its parameter.
    """
    def text(name: str, max_chars: int = MAX_NAME_CHARS) -> str | None:
        value = values.get(name)
        if value is None:
            return None
        if not isinstance(value, str):
            raise InputError(f"{name} is text, got {type(value).__name__}", field=name)
        value = value.strip()
        if not value:
            return None
        check_text(value, name, max_chars=max_chars, what=name)
        return value

    state = text("state")
    if state is not None and state not in STATES:
        raise InputError(f"state is one of {', '.join(STATES)}, got {state!r}", field="state")
    outcome = text("outcome")
    if outcome is not None and outcome not in OUTCOMES:
        raise InputError(f"outcome is one of {', '.join(OUTCOMES)}, got {outcome!r}",
                         field="outcome")
    credit_min, credit_max = _credit(text("credit_min"), "credit_min"), \
        _credit(text("credit_max"), "credit_max")
    if credit_min is not None and credit_max is not None and credit_min > credit_max:
        raise InputError(f"credit_min ({credit_min}) is above credit_max ({credit_max})",
                         field="credit_min")
    created_from = _day(text("created_from"), "created_from", end=False)
    created_to = _day(text("created_to"), "created_to", end=True)
    if created_from is not None and created_to is not None and created_from >= created_to:
        raise InputError("created_from is after created_to", field="created_from")
    query = text("q", MAX_QUERY_CHARS)
    return TraceFilter(agent=text("agent"), domain=text("domain"), state=state,
                       text=None if query is None else search_needle(query),
                       tool=text("tool"), task_id=text("task_id"), outcome=outcome,
                       credit_min=credit_min, credit_max=credit_max,
                       created_from=created_from, created_to=created_to)


def _credit(value: str | None, name: str) -> float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not -1.0 <= number <= 1.0:  # NaN fails too
        raise InputError(f"{name} is a number from -1 to 1 (action credit's range), got "
                         f"{value!r}", field=name)
    return number


def _day(value: str | None, name: str, *, end: bool) -> datetime | None:
    """A date (``2026-01-31``: the whole day, UTC) or an ISO 8601 time (UTC unless it says)."""
    if value is None:
        return None
    try:
        if len(value) == 10:
            day = date.fromisoformat(value)
            start = datetime.combine(day, time(), tzinfo=timezone.utc)
            return start + timedelta(days=1) if end else start
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise InputError(f"{name} is a date (YYYY-MM-DD) or an ISO 8601 time, got {value!r}",
                         field=name) from None
    return moment.astimezone(timezone.utc) if moment.tzinfo else \
        moment.replace(tzinfo=timezone.utc)


def filter_params(where: TraceFilter | None, *, query: str | None = None) -> dict[str, str]:
    """The parameters ``parse_filter`` reads back as ``where`` (``query``: the search text as the
    person typed it, which ``where.text`` holds casefolded)."""
    if where is None:
        return {}
    found: dict[str, str] = {}
    for name in FILTER_PARAMS:
        value: Any = getattr(where, "text" if name == "q" else name)
        if name == "q" and query is not None:
            value = query
        if value is None:
            continue
        if isinstance(value, datetime):
            value = value.isoformat()
        found[name] = str(value)
    return found


def search_needle(query: str) -> str:
    """What a search's text is matched as: casefolded, as ``search_text`` is (an ASCII needle
    folds to the same letters in ASCII text and in the rest)."""
    return query.strip().casefold()


def trace_preview(trace: Trace) -> str | None:
    """The first user message, on one line and at most PREVIEW_CHARS characters; else the
    evaluation context's task, when the trace has no user message."""
    first = next((m.content for m in trace.messages if m.role == "user" and m.content.strip()),
                 None)
    if first is None:
        context = trace.evaluation_context
        if isinstance(context, Mapping):
            context = context.get("task")
        first = context if isinstance(context, str) and context.strip() else None
    if first is None:
        return None
    line = " ".join(first.split())
    return line if len(line) <= PREVIEW_CHARS else line[:PREVIEW_CHARS - 1] + "…"


# One encoder for every tool call's arguments (json.dumps builds one a call).
_ARGUMENTS = json.JSONEncoder(ensure_ascii=False).encode


def search_text(trace: Trace) -> str:
    """What a trace is found by: its user, assistant and tool messages and its tool calls (name
    and arguments), casefolded, at most MAX_SEARCH_CHARS characters."""
    parts: list[str] = []
    size = 0
    for message in trace.messages:
        if message.role == "system":
            continue
        if message.content:
            parts.append(message.content)
            size += len(message.content)
        for call in message.tool_calls:
            parts.append(f"{call.name} {_ARGUMENTS(call.arguments)}")
            size += len(parts[-1])
        if size >= MAX_SEARCH_CHARS:
            break
    text = "\n".join(parts)[:MAX_SEARCH_CHARS]
    # The same as casefold for ASCII, and faster; the search's needle is folded alike.
    return text.lower() if text.isascii() else text.casefold()
