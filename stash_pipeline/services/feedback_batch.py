"""Feedback in bulk: a JSONL feedback file (`feedback import`) and the API's batch route.

One item: ``{"type": "comment"|"rating"|"comparison"|"review"|"outcome", ...}`` on stored traces,
addressed by ``trace_id`` (and ``action_id``, local ``m3`` or full), comparisons by their ``chosen``
and ``rejected`` addresses, reviews by ``comparison_id`` (docs/importing.md, "Feedback files").
Every item of a batch is checked before anything is written, and the batch is one transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from stash_pipeline.core.errors import InputError
from stash_pipeline.core.feedback import (
    Feedback,
    Review,
    comparison_item,
    outcome_item,
    review_item,
)
from stash_pipeline.core.traces import LOCAL_ACTION_ID
from stash_pipeline.core.validation import check_name, check_text
from stash_pipeline.importers.common import locating
from stash_pipeline.importers.fields import (
    expect_object,
    json_type,
    number,
    optional_str,
    refuse_unknown_keys,
)
from stash_pipeline.importers.jsonio import check_file_size, iter_records
from stash_pipeline.importers.limits import ImportLimits
from stash_pipeline.services.feedback import MAX_COMMENT_LENGTH, comment_item, rating_item
from stash_pipeline.store import Store

ITEM_TYPES = ("comment", "rating", "comparison", "review", "outcome")
# The fields of each type of item; any other is refused, as the single-item routes refuse one.
ITEM_FIELDS = {
    "comment": ("type", "trace_id", "action_id", "text", "author"),
    "rating": ("type", "trace_id", "action_id", "value", "author"),
    "comparison": ("type", "chosen", "rejected", "author", "reviewer", "status", "rationale"),
    "review": ("type", "comparison_id", "reviewer", "status"),
    "outcome": ("type", "trace_id", "reward", "source"),
}
MAX_BATCH_ITEMS = 10_000  # one API request; a file has no such limit


def parse_item(value: Any) -> Feedback | Review:
    """One feedback item; InputError names the field."""
    item = expect_object(value, "item")
    kind = item.get("type")
    if kind not in ITEM_TYPES:
        raise InputError(f"unknown feedback type {kind!r}; expected one of "
                         f"{', '.join(ITEM_TYPES)}", field="type")
    refuse_unknown_keys(item, ITEM_FIELDS[kind], f"a {kind} item")
    if kind == "comparison":
        return comparison_item(
            item.get("chosen"), item.get("rejected"), author=_name(item, "author"),
            reviewer=_name(item, "reviewer"), status=item.get("status", "pending"),
            rationale=_text(item, "rationale"))
    if kind == "review":
        return review_item(item.get("comparison_id"), item.get("reviewer"),
                           item.get("status", "approved"))
    trace_id = item.get("trace_id")
    if not isinstance(trace_id, str) or not trace_id:
        raise InputError(f"expected a trace id, got {json_type(trace_id)}", field="trace_id")
    if kind == "outcome":
        return outcome_item(trace_id, number(item.get("reward"), "reward"),
                            _name(item, "source"))
    action = _action(item.get("action_id"), trace_id)
    author = _name(item, "author")
    if kind == "rating":
        return rating_item(trace_id, number(item.get("value"), "value"), action, author)
    text = item.get("text")
    if not isinstance(text, str) or not text.strip():
        raise InputError("a comment needs non-empty text", field="text")
    check_text(text, "text", max_chars=MAX_COMMENT_LENGTH, what="a comment")
    return comment_item(trace_id, text, action, author)


def _action(value: Any, trace_id: str) -> str | None:
    """The full action id of a local (``m3``) or full (``<trace id>/m3``) one."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InputError(f"expected an action id such as 'm3', got {json_type(value)}",
                         field="action_id")
    if LOCAL_ACTION_ID.fullmatch(value):
        return f"{trace_id}/{value}"
    if not value.startswith(f"{trace_id}/"):
        raise InputError(f"{value!r} is not an action of trace {trace_id!r}: give 'm<i>' or "
                         "'m<i>.call<k>' (or the full '<trace id>/m<i>...')", field="action_id")
    return value


def _name(item: dict[str, Any], key: str) -> str | None:
    value = optional_str(item, key, key)
    check_name(value, key)  # before an id is derived from it
    return value


def _text(item: dict[str, Any], key: str) -> str | None:
    value = item.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InputError(f"expected a string, got {json_type(value)}", field=key)
    check_text(value, key, max_chars=MAX_COMMENT_LENGTH)
    return value


def parse_items(values: Sequence[Any], where: str = "items") -> list[tuple[str, Feedback | Review]]:
    """(label, item) of each of a request's items: InputError names ``items[i]`` and the field."""
    if len(values) > MAX_BATCH_ITEMS:
        raise InputError(f"{len(values)} items, over the limit of {MAX_BATCH_ITEMS} a request",
                         field=where)
    parsed = []
    for index, value in enumerate(values):
        label = f"{where}[{index}]"
        with locating("", label):
            parsed.append((label, parse_item(value)))
    return parsed


def read_feedback_file(path: Path, limits: ImportLimits | None = None
                       ) -> Iterator[tuple[str, Feedback | Review]]:
    """(label, item) of each record of a JSON, JSON-array or JSONL feedback file (gzip too)."""
    limits = limits or ImportLimits()
    check_file_size(path, limits)
    for record in iter_records(path, limits):
        with locating(str(path), record.label):
            yield record.label, parse_item(record.data)


def apply(store: Store, owner: str | None,
          entries: Iterable[tuple[str, Feedback | Review]]) -> dict[str, int]:
    """Store the items and reviews in one transaction; all or nothing. A trace, action or
    comparison that does not exist, or (owner given) is another account's, is a NotFoundError
    naming the item; counts by kind otherwise."""
    return store.apply_feedback(list(entries), owner=owner)
