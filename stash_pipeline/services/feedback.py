"""Comments and ratings on a trace or one of its actions, as the CLI and the API take them.

Ids are content-derived (``core.feedback.feedback_id``): the same comment is stored once, and rating
the same target again (same author) replaces the earlier value.
"""

from __future__ import annotations

import math
from typing import Any

from stash_pipeline.core.errors import InputError
from stash_pipeline.core.feedback import Comment, Rating, feedback_id
from stash_pipeline.core.traces import Trace
from stash_pipeline.core.validation import MAX_NAME_CHARS, check_name, check_text
from stash_pipeline.services.traces import owned_trace
from stash_pipeline.store import Store

MAX_COMMENT_LENGTH = 20_000
MAX_AUTHOR_LENGTH = MAX_NAME_CHARS  # comments.author, ratings.author


def comment_item(trace_id: str, text: str, action_id: str | None = None,
                 author: str | None = None) -> Comment:
    return Comment(feedback_id("comment", trace_id, action_id, text, author), trace_id, text,
                   action_id=action_id, author=author)


def rating_item(trace_id: str, value: float, action_id: str | None = None,
                author: str | None = None) -> Rating:
    # One rating per author and target: rating again replaces the earlier value.
    return Rating(feedback_id("rating", trace_id, action_id, author), trace_id, value,
                  action_id=action_id, author=author)


def comment(store: Store, owner: str, trace_id: str, text: Any, *, action: str | None = None,
            author: str | None = None) -> Comment:
    """Comment on the owner's trace (or one of its actions); NotFoundError for another's trace."""
    if not isinstance(text, str) or not text.strip():
        raise InputError("a comment needs text", field="text")
    check_text(text, "text", max_chars=MAX_COMMENT_LENGTH, what="a comment")
    trace = owned_trace(store, owner, trace_id)
    item = comment_item(trace.id, text, _action_id(trace, action), _author(author))
    store.add_feedback([item], owner=owner)
    return item


def rate(store: Store, owner: str, trace_id: str, value: Any, *, action: str | None = None,
         author: str | None = None) -> Rating:
    """Rate the owner's trace (a trace rating) or one of its actions (a step rating)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(f"a rating is a finite number, got {value!r}", field="value")
    trace = owned_trace(store, owner, trace_id)
    item = rating_item(trace.id, float(value), _action_id(trace, action), _author(author))
    store.add_feedback([item], owner=owner)
    return item


def _action_id(trace: Trace, action: str | None) -> str | None:
    """The full id of an action given by its local (``m4.call0``) or full id."""
    if action is None:
        return None
    try:
        return trace.action(action).id
    except KeyError:
        raise InputError(f"action {action!r} does not exist in trace {trace.id}; actions are "
                         "m<message index> and m<message index>.call<k>",
                         field="action_id") from None


def _author(author: str | None) -> str | None:
    # Checked before the id is derived from it: a lone surrogate cannot even be hashed.
    check_name(author, "author", max_chars=MAX_AUTHOR_LENGTH)
    return author


def view(item: Comment | Rating) -> dict[str, Any]:
    data = {"id": item.id, "trace_id": item.trace_id, "action_id": item.action_id,
            "author": item.author}
    if isinstance(item, Comment):
        data["text"] = item.text
    else:
        data["value"] = item.value
    return data
