"""The ``feedback`` list of a trace object (OpenAI and Anthropic wrappers); see docs/importing.md.

Each item: ``{"type": "comment", "text": ...}``, ``{"type": "rating", "value": <number>}``,
``{"type": "outcome", "reward": <number>}``, ``{"type": "comparison", "chosen", "rejected",
"reviewer"?, "status"?, "rationale"?}`` or ``{"type": "review", "comparison_id", "reviewer",
"status"?}``, with at most one target for comments and ratings: ``action_id`` (local, "m3" or
"m3.call0"), ``message_index`` (an assistant message) or ``tool_call_id``. No target: the whole
trace. Optional ``author`` (comments, ratings, comparisons), ``source`` (outcomes).
"""

from __future__ import annotations

from typing import Any

from stash_pipeline.core.errors import InputError
from stash_pipeline.core.feedback import (
    Comment,
    Feedback,
    Rating,
    Review,
    ReviewedComparison,
    VerifiedOutcome,
    comparison_item,
    feedback_id,
    review_item,
)
from stash_pipeline.core.traces import LOCAL_ACTION_ID, Trace
from stash_pipeline.importers.common import message_action_ids
from stash_pipeline.importers.fields import (
    expect_list,
    expect_object,
    number,
    optional_str,
    refuse_unknown_keys,
)

FEEDBACK_TYPES = ("comment", "rating", "comparison", "review", "outcome")
_TARGET_KEYS = ("action_id", "message_index", "tool_call_id")
# The fields of each type of item (targets too where a type refuses them with its own sentence);
# any other is refused: a misspelt target would make a step label a trace label.
FEEDBACK_FIELDS = {
    "comment": ("type", "text", "author", *_TARGET_KEYS),
    "rating": ("type", "value", "author", *_TARGET_KEYS),
    "comparison": ("type", "chosen", "rejected", "author", "reviewer", "status", "rationale",
                   *_TARGET_KEYS),
    "review": ("type", "comparison_id", "reviewer", "status"),
    "outcome": ("type", "reward", "source", *_TARGET_KEYS),
}


def parse_feedback(value: Any, trace: Trace, field: str = "feedback",
                   message_indexes: dict[int, int] | None = None
                   ) -> tuple[Feedback | Review, ...]:
    """Feedback items on this trace. ``message_indexes`` maps source message indexes to trace
    message indexes, for formats whose messages do not map one to one (Anthropic)."""
    if value is None:
        return ()
    items: list[Feedback | Review] = []
    for i, raw in enumerate(expect_list(value, field)):
        where = f"{field}[{i}]"
        item = expect_object(raw, where)
        kind = item.get("type")
        if kind in FEEDBACK_FIELDS:
            refuse_unknown_keys(item, FEEDBACK_FIELDS[kind], f"a {kind} item", where)
        targets = _targets(item, trace, where, message_indexes)
        author = optional_str(item, "author", f"{where}.author")
        if kind == "comment":
            text = item.get("text")
            if not isinstance(text, str) or not text.strip():
                raise InputError("a comment needs non-empty text", field=f"{where}.text")
            # A comment on a message belongs to its first action; the extractor reads the whole
            # message around it anyway.
            target = targets[0] if targets else None
            items.append(Comment(feedback_id("comment", trace.id, i, target or "trace"), trace.id,
                                 text, action_id=target, author=author))
        elif kind == "rating":
            value_ = number(item.get("value"), f"{where}.value")
            for target in targets or [None]:
                items.append(Rating(feedback_id("rating", trace.id, i, target or "trace"),
                                    trace.id, value_, action_id=target, author=author))
        elif kind == "comparison":
            if targets:
                raise InputError("a comparison names its sides in 'chosen' and 'rejected'",
                                 field=where)
            items.append(_comparison(item, trace, where, author))
        elif kind == "review":
            try:
                items.append(review_item(item.get("comparison_id"), item.get("reviewer"),
                                         item.get("status", "approved")))
            except InputError as error:
                raise InputError(error.reason, field=f"{where}.{error.field}") from None
        elif kind == "outcome":
            if targets:
                raise InputError("an outcome is a whole trace's result: it takes no target",
                                 field=where)
            reward = number(item.get("reward"), f"{where}.reward")
            items.append(VerifiedOutcome(feedback_id("outcome", trace.id, i), trace.id, reward,
                                         source=optional_str(item, "source", f"{where}.source")))
        else:
            raise InputError(f"unknown feedback type {kind!r}; expected one of "
                             f"{', '.join(FEEDBACK_TYPES)}", field=f"{where}.type")
    return tuple(items)


def _comparison(item: dict[str, Any], trace: Trace, where: str,
                author: str | None) -> ReviewedComparison:
    """Sides: a local action id of this trace (``m3``, ``m3.call0``), or any trace's address
    (``<trace id>``, ``<trace id>/<action>``), this one's or one imported with it."""
    sides = {}
    for side in ("chosen", "rejected"):
        value = item.get(side)
        if not isinstance(value, str) or not value:
            raise InputError("expected an action of this trace ('m3') or a trace id (with "
                             "'/<action>')", field=f"{where}.{side}")
        if LOCAL_ACTION_ID.fullmatch(value):
            try:
                value = trace.action(value).id
            except KeyError:
                raise InputError(f"no action {value!r} in this trace", field=f"{where}.{side}"
                                 ) from None
        sides[side] = value
    status = item.get("status", "pending")
    try:
        return comparison_item(
            sides["chosen"], sides["rejected"], author=author,
            reviewer=optional_str(item, "reviewer", "reviewer"), status=status,
            rationale=optional_str(item, "rationale", "rationale"))
    except InputError as error:
        raise InputError(error.reason, field=f"{where}.{error.field}") from None


def _targets(item: dict[str, Any], trace: Trace, where: str,
             message_indexes: dict[int, int] | None) -> list[str]:
    """The full action ids a feedback item is about; empty for the whole trace."""
    given = [key for key in _TARGET_KEYS if item.get(key) is not None]
    if len(given) > 1:
        raise InputError(f"give at most one of {', '.join(_TARGET_KEYS)}",
                         field=f"{where}.{given[1]}")
    if not given:
        return []
    key = given[0]
    value = item[key]
    field = f"{where}.{key}"
    if key == "action_id":
        if not isinstance(value, str):
            raise InputError("expected an action id such as 'm3' or 'm3.call0'", field=field)
        try:
            return [trace.action(value).id]
        except KeyError:
            raise InputError(f"no action {value!r} in this trace (it has {len(trace.actions())} "
                             "actions, with ids like 'm3' and 'm3.call0')", field=field) from None
    if key == "message_index":
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError("expected a message index (an integer)", field=field)
        if message_indexes is not None:
            if value not in message_indexes:
                raise InputError(f"message {value} is not an assistant message", field=field)
            value = message_indexes[value]
        return message_action_ids(trace, value, field)
    for action in trace.actions():
        call = trace.tool_call(action)
        if call is not None and call.id == value:
            return [action.id]
    raise InputError(f"no tool call with id {value!r} in this trace", field=field)
