"""The one check of traces and feedback before anything is stored, for both databases alike.

SQLite stores almost anything; PostgreSQL refuses NUL characters, JSON ``NaN`` and strings over a
column's length, and neither can encode a lone surrogate (``"\\ud800"``). So every text, name and
number is checked here, before either database sees it, and each problem is one InputError naming
the field: the two databases then accept and refuse exactly the same input.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from stash_pipeline.core.errors import InputError
from stash_pipeline.core.feedback import (
    REVIEW_STATUSES,
    Comment,
    Feedback,
    Rating,
    Review,
    ReviewedComparison,
    VerifiedOutcome,
)
from stash_pipeline.core.traces import ACTION_ADDRESS_SEPARATOR, ROLES, Trace

MAX_ID_CHARS = 64  # trace, feedback and account ids (store.schema.ID)
MAX_ACTION_ID_CHARS = 160  # "<trace id>/m<i>.call<k>" (store.schema.ACTION_ID)
MAX_NAME_CHARS = 256  # agent, domain, task id, tool names, author, reviewer, source: VARCHAR(256)
# The store's caps; an import may set lower limits (importers.ImportLimits), never higher ones.
MAX_JSON_DEPTH = 100  # nesting of metadata, tools and tool arguments (and of a whole source file)
MAX_TEXT_CHARS = 16 * 1024 * 1024  # any one string: message text, comment, JSON string value

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def check_text(value: Any, field: str, *, max_chars: int = MAX_TEXT_CHARS,
               what: str = "text") -> None:
    """A string both databases store as given: no NUL, no lone surrogate, at most ``max_chars``."""
    if not isinstance(value, str):
        raise InputError(f"expected {what} (a string), got {type(value).__name__}", field=field)
    if len(value) > max_chars:
        raise InputError(f"{what} is {len(value)} characters, over the limit of {max_chars}",
                         field=field)
    if _storable(value):
        return
    bad = _UNSTORABLE.search(value)
    if bad is not None:  # always: _storable said so
        char = bad.group()
        reason = "a NUL character (\\u0000)" if char == "\x00" else \
            f"a lone surrogate (\\u{ord(char):04x}), which is not valid Unicode"
        raise InputError(f"{what} contains {reason} at character {bad.start()}; "
                         "neither database can store it", field=field)


def _storable(text: str) -> bool:
    """No NUL and no lone surrogate (ASCII text holds no surrogate: the fast case)."""
    if text.isascii():
        return "\x00" not in text
    return _UNSTORABLE.search(text) is None


def check_name(value: Any, field: str, *, max_chars: int = MAX_NAME_CHARS,
               optional: bool = True) -> None:
    """A short name stored in its own column (agent, tool, author...): None, or 1 to 256 chars."""
    if value is None and optional:
        return
    check_text(value, field, max_chars=max_chars, what="a name")
    if not value:
        raise InputError("a name cannot be empty", field=field)


def check_id(value: Any, field: str, *, what: str = "an id") -> None:
    check_text(value, field, max_chars=MAX_ID_CHARS, what=what)
    if not value:
        raise InputError(f"{what} cannot be empty", field=field)


def check_trace_id(value: Any, field: str = "id") -> None:
    """1 to 64 characters, and no ``/``: ``<trace id>/<action>`` must split one way only."""
    check_id(value, field, what="a trace id")
    if ACTION_ADDRESS_SEPARATOR in value:
        raise InputError(f"a trace id cannot contain {ACTION_ADDRESS_SEPARATOR!r} (actions are "
                         f"addressed as <trace id>/<action>): {value!r}", field=field)


def check_number(value: Any, field: str) -> None:
    """A finite number: NaN and infinities sort, average and store differently on each database."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"expected a number, got {type(value).__name__}", field=field)
    if not math.isfinite(value):
        raise InputError(f"expected a finite number, got {value}", field=field)


# json.dumps(value, ensure_ascii=False, allow_nan=False) without an encoder built on every call.
_CHECK_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False)


def check_json(value: Any, field: str, *, max_depth: int = MAX_JSON_DEPTH,
               max_chars: int = MAX_TEXT_CHARS) -> None:
    """A JSON value (metadata, tool schemas, tool arguments) that stores the same everywhere.

    One ``json.dumps`` (C speed) clears almost every value; only a value it cannot clear is
    walked, without recursion (so 5000 levels are an InputError, not a RecursionError), to name
    the field and the reason.
    """
    if not value and isinstance(value, (dict, list)):
        return
    try:
        text = _CHECK_ENCODER.encode(value)
    except (TypeError, ValueError, RecursionError):
        text = None
    if text is not None and len(text) <= max_chars \
            and text.count("[") + text.count("{") <= max_depth and "\\u0000" not in text \
            and (text.isascii() or not _UNSTORABLE.search(text)):
        return
    _walk_json(value, field, max_depth, max_chars)


def _walk_json(value: Any, field: str, max_depth: int, max_chars: int) -> None:
    stack: list[tuple[Any, str, int]] = [(value, field, 1)]
    while stack:
        item, where, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > max_depth:
                raise InputError(f"nested deeper than the limit of {max_depth} levels",
                                 field=where)
            if isinstance(item, dict):
                for key, child in item.items():
                    if isinstance(key, str):
                        check_text(key, f"{where}.{key[:40]}", max_chars=max_chars, what="a key")
                    elif isinstance(key, float):
                        check_number(key, where)
                    stack.append((child, f"{where}.{key}", depth + 1))
            else:
                stack.extend((child, f"{where}[{i}]", depth + 1) for i, child in enumerate(item))
        elif isinstance(item, str):
            check_text(item, where, max_chars=max_chars)
        elif isinstance(item, float):
            check_number(item, where)
        elif item is not None and not isinstance(item, (bool, int)):
            raise InputError(f"not a JSON value: {type(item).__name__}", field=where)


def validate_trace(trace: Trace, *, max_depth: int = MAX_JSON_DEPTH,
                   max_text_chars: int = MAX_TEXT_CHARS) -> None:
    """Raise InputError naming the field (e.g. ``messages[3].tool_call_id``) of the first problem.

    Importers pass their (possibly lower) limits; the store checks against its caps.
    """
    check_trace_id(trace.id)
    check_id(trace.owner, "owner", what="an owner")
    check_name(trace.agent, "agent")
    check_name(trace.domain, "domain")
    if not isinstance(trace.metadata, dict):
        raise InputError("metadata must be a JSON object", field="metadata")
    check_json(trace.metadata, "metadata", max_depth=max_depth, max_chars=max_text_chars)
    check_name(trace.task_id, "metadata.task_id")
    check_json(list(trace.tools), "tools", max_depth=max_depth, max_chars=max_text_chars)
    if not trace.messages:
        raise InputError("a trace needs at least one message", field="messages")
    # All message text in one search (most of a trace's bytes); only a trace that fails it has
    # each message checked, to name the field.
    contents = [message.content for message in trace.messages]
    text_cleared = all(isinstance(c, str) for c in contents) \
        and max(map(len, contents)) <= max_text_chars and _storable("".join(contents))
    seen_calls: set[str] = set()
    for i, message in enumerate(trace.messages):
        where = f"messages[{i}]"
        if message.role not in ROLES:
            raise InputError(
                f"unknown role {message.role!r}; expected one of {', '.join(ROLES)}",
                field=f"{where}.role",
            )
        if not isinstance(message.content, str):
            raise InputError("content must be text", field=f"{where}.content")
        if not text_cleared:
            check_text(message.content, f"{where}.content", max_chars=max_text_chars)
        if message.tool_call_id is not None:
            check_text(message.tool_call_id, f"{where}.tool_call_id", max_chars=MAX_NAME_CHARS,
                       what="a tool call id")
        if message.name is not None:
            check_text(message.name, f"{where}.name", max_chars=MAX_NAME_CHARS, what="a name")
        for k, call in enumerate(message.tool_calls):
            here = f"{where}.tool_calls[{k}]"
            if message.role != "assistant":
                raise InputError("only assistant messages make tool calls",
                                 field=f"{where}.tool_calls")
            if not call.name:
                raise InputError("a tool call needs a name", field=f"{here}.name")
            check_name(call.name, f"{here}.name", optional=False)
            check_text(call.id, f"{here}.id", max_chars=MAX_NAME_CHARS, what="a tool call id")
            if not isinstance(call.arguments, dict):
                raise InputError(
                    f"arguments must be a JSON object, got {type(call.arguments).__name__}",
                    field=f"{here}.arguments",
                )
            check_json(call.arguments, f"{here}.arguments", max_depth=max_depth,
                       max_chars=max_text_chars)
            seen_calls.add(call.id)
        if message.role == "tool" and message.tool_call_id is not None \
                and message.tool_call_id not in seen_calls:
            raise InputError(
                f"tool_call_id {message.tool_call_id!r} matches no earlier tool call",
                field=f"{where}.tool_call_id",
            )


def validate_feedback(item: Feedback, *, max_text_chars: int = MAX_TEXT_CHARS) -> None:
    """The same checks for one feedback item (from an import, the CLI or the API)."""
    check_id(item.id, "id", what="a feedback id")
    if isinstance(item, ReviewedComparison):
        for side in ("chosen", "rejected"):
            check_id(getattr(item, f"{side}_trace_id"), f"{side}_trace_id", what="a trace id")
            _check_action(getattr(item, f"{side}_action_id"), f"{side}_action_id")
        check_name(item.reviewer, "reviewer")
        if item.status not in REVIEW_STATUSES:
            raise InputError(f"unknown status {item.status!r}; expected one of "
                             f"{', '.join(REVIEW_STATUSES)}", field="status")
        if item.rationale is not None:
            check_text(item.rationale, "rationale", max_chars=max_text_chars)
        return
    # Not check_trace_id: a trace stored before ids with "/" were refused can still get feedback.
    check_id(item.trace_id, "trace_id", what="a trace id")
    if isinstance(item, Comment):
        _check_action(item.action_id, "action_id")
        check_text(item.text, "text", max_chars=max_text_chars)
        check_name(item.author, "author")
    elif isinstance(item, Rating):
        _check_action(item.action_id, "action_id")
        check_number(item.value, "value")
        check_name(item.author, "author")
    elif isinstance(item, VerifiedOutcome):
        check_number(item.reward, "reward")
        check_name(item.source, "source")
    else:
        raise InputError(f"not feedback: {type(item).__name__}")


def validate_review(review: Review) -> None:
    """A review of a comparison: the comparison's id and the reviewer's name, storable."""
    check_id(review.comparison_id, "comparison_id", what="a comparison id")
    if not review.reviewer:
        raise InputError("a review needs its reviewer", field="reviewer")
    check_name(review.reviewer, "reviewer")
    if review.status not in REVIEW_STATUSES:
        raise InputError(f"unknown status {review.status!r}; expected one of "
                         f"{', '.join(REVIEW_STATUSES)}", field="status")


def _check_action(value: Any, field: str) -> None:
    if value is not None:
        check_text(value, field, max_chars=MAX_ACTION_ID_CHARS, what="an action id")


def positive_setting(name: str, value: str | int) -> int:
    """A positive integer setting (an environment variable's text or a configured number); a
    ValueError naming the setting otherwise."""
    try:
        count = int(value)
    except ValueError:
        count = 0
    if count < 1:
        raise ValueError(f"{name} must be a positive integer, not {value!r}")
    return count
