"""Feedback rows: the four kinds of core.feedback, one table each.

Orphaned feedback (on an action a shorter reimport removed, or whose content a reimport changed)
is not marked: it is found by a query, ``orphaned_feedback``, so it can never disagree with the
actions stored. Feedback on an action keeps the action's content digest from when it was written;
a different digest on the stored action now means the feedback was about other content.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, fields, replace

import sqlalchemy as sa

from stash_pipeline.core.errors import InputError, NotFoundError
from stash_pipeline.core.feedback import (
    REVIEW_STATUSES,
    Comment,
    Feedback,
    Rating,
    Review,
    ReviewedComparison,
    VerifiedOutcome,
    count_by_kind,
    feedback_trace_ids,
)
from stash_pipeline.core.validation import validate_feedback, validate_review
from stash_pipeline.store import review_queue, schema
from stash_pipeline.store.batching import chunks, insert_rows
from stash_pipeline.store.locks import lock_traces

TABLES: dict[type, sa.Table] = {
    Comment: schema.comments,
    Rating: schema.ratings,
    ReviewedComparison: schema.reviewed_comparisons,
    VerifiedOutcome: schema.verified_outcomes,
}
# Dataclass field names equal column names, so a row is the dataclass as a dict and back
# (``detached`` is derived, never stored).
_FIELDS = {kind: [f.name for f in fields(kind) if f.name != "detached"] for kind in TABLES}


# (trace field, action field) pairs of each kind: the action must be an action of that trace.
_REFERENCES: dict[type, tuple[tuple[str, str | None], ...]] = {
    Comment: (("trace_id", "action_id"),),
    Rating: (("trace_id", "action_id"),),
    ReviewedComparison: (("chosen_trace_id", "chosen_action_id"),
                         ("rejected_trace_id", "rejected_action_id")),
    VerifiedOutcome: (("trace_id", None),),
}
# The digest column beside each action column.
_DIGESTS = {"action_id": "action_digest", "chosen_action_id": "chosen_action_digest",
            "rejected_action_id": "rejected_action_digest"}


def _action_fields(kind: type) -> list[str]:
    return [action for _, action in _REFERENCES[kind] if action]


def _action_digests(connection: sa.Connection, action_ids: set[str]) -> dict[str, str | None]:
    """The stored content digest of each of these actions that exists."""
    a = schema.actions
    found: dict[str, str | None] = {}
    for ids in chunks(sorted(action_ids)):
        found.update(connection.execute(
            sa.select(a.c.id, a.c.content_digest).where(a.c.id.in_(ids))).all())
    return found


def references(item: Feedback) -> list[tuple[str, str, str]]:
    """(field, "trace" or "action", id) for every id the item names.

    Raises InputError when an action id does not belong to the trace named beside it.
    """
    named: list[tuple[str, str, str]] = []
    for trace_field, action_field in _REFERENCES[type(item)]:
        trace_id = getattr(item, trace_field)
        named.append((trace_field, "trace", trace_id))
        action = getattr(item, action_field) if action_field else None
        if action:
            if not action.startswith(f"{trace_id}/"):
                raise InputError(f"action {action!r} is not an action of trace {trace_id!r}",
                                 field=action_field)
            named.append((action_field, "action", action))
    return named


def write_feedback(connection: sa.Connection, items: Sequence[Feedback]) -> None:
    """Insert or replace by id: feedback ids are stable, so a second import updates in place."""
    by_table: dict[sa.Table, list[dict]] = {}
    digests = _action_digests(connection, {getattr(item, name) for item in items
                                           for name in _action_fields(type(item))
                                           if getattr(item, name)})
    for item in items:
        row = {name: value for name, value in asdict(item).items() if name != "detached"}
        # The content the feedback is about: the action as stored now.
        row.update({_DIGESTS[name]: digests.get(row[name]) if row[name] else None
                    for name in _action_fields(type(item))})
        by_table.setdefault(TABLES[type(item)], []).append(row)
    for table, rows in by_table.items():
        # Delete then insert is the portable upsert; an id repeated in one batch keeps the last.
        unique = list({row["id"]: row for row in rows}.values())
        for ids in chunks([row["id"] for row in unique]):
            connection.execute(table.delete().where(table.c.id.in_(ids)))
        insert_rows(connection, table, unique)


def missing_ids(connection: sa.Connection, items: Sequence[Feedback],
                owner: str | None = None) -> set[str]:
    """The trace and action ids these items name that the database does not hold.

    With ``owner``, a trace of anyone else counts as missing (not found, as the API answers). An
    action counts only when it is stored as an action of the trace named beside it: ownership is
    checked on the trace the action resolves to, never on a prefix of its id.
    """
    traces: set[str] = set()
    actions: dict[str, set[str]] = {}  # action id -> the traces items name it with
    for item in items:
        for trace_field, action_field in _REFERENCES[type(item)]:
            trace_id = getattr(item, trace_field)
            traces.add(trace_id)
            action = getattr(item, action_field) if action_field else None
            if action:
                actions.setdefault(action, set()).add(trace_id)
    t, a = schema.traces, schema.actions
    found_traces: set[str] = set()
    for ids in chunks(sorted(traces)):
        query = sa.select(t.c.id).where(t.c.id.in_(ids))
        if owner is not None:
            query = query.where(t.c.owner == owner)
        found_traces.update(connection.scalars(query))
    found_actions: dict[str, str] = {}
    for ids in chunks(sorted(actions)):
        found_actions.update(connection.execute(
            sa.select(a.c.id, a.c.trace_id).where(a.c.id.in_(ids))).all())
    missing = traces - found_traces
    missing.update(action for action, named in actions.items()
                   if found_actions.get(action) not in named or len(named) > 1)
    return missing


def add_feedback(connection: sa.Connection, items: Sequence[Feedback],
                 owner: str | None = None, labels: Sequence[str] | None = None
                 ) -> dict[str, int]:
    """Feedback from outside an import: every trace and action it names must exist (and belong
    to ``owner`` when given); otherwise nothing is written. ``labels`` name the items in errors
    (``line 3``, ``items[2]``); by default their index and id."""
    names = list(labels) if labels is not None else [f"{i} ({item.id})"
                                                     for i, item in enumerate(items)]
    for index, item in enumerate(items):
        try:
            validate_feedback(item)
            references(item)
        except InputError as error:
            raise InputError(error.reason, record=names[index], field=error.field) from None
    # A reimport of these traces waits, or is waited for: the actions checked next still exist
    # when the feedback is written.
    lock_traces(connection, [tid for item in items for tid in feedback_trace_ids(item)])
    missing = missing_ids(connection, items, owner)
    for index, item in enumerate(items):
        for _, kind, ref in references(item):
            if ref in missing:
                where = f"{names[index]}: " if labels is not None else ""
                # The ids the person gave (a trace, an action), not the feedback's own id,
                # which they never saw.
                raise NotFoundError(f"{where}{kind} {ref} does not exist")
    write_feedback(connection, items)
    return count_by_kind(list(items))


def apply_feedback(connection: sa.Connection, entries: Sequence[tuple[str, Feedback | Review]],
                   owner: str | None = None) -> dict[str, int]:
    """Feedback items and reviews of comparisons (stored, or among the items), all or nothing:
    the caller's transaction rolls back on any error, which names the entry's label."""
    items = [(label, item) for label, item in entries if not isinstance(item, Review)]
    counts = add_feedback(connection, [item for _, item in items], owner,
                          labels=[label for label, _ in items]) if items else \
        count_by_kind([])
    reviews = [(label, item) for label, item in entries if isinstance(item, Review)]
    for label, review in reviews:
        try:
            validate_review(review)
            review_comparison(connection, review.comparison_id, reviewer=review.reviewer,
                              status=review.status, owner=owner)
        except NotFoundError as error:
            raise NotFoundError(f"{label}: {error}") from None
        except InputError as error:
            raise InputError(error.reason, record=label, field=error.field) from None
    return {**counts, "reviews": len(reviews)}


def feedback_for(connection: sa.Connection, trace_ids: Sequence[str]) -> list[Feedback]:
    """Every feedback item on these traces (a comparison when either side is one of them)."""
    ids = list(dict.fromkeys(trace_ids))
    items: dict[str, Feedback] = {}  # by id: a comparison may match two chunks
    given: dict[str, list[tuple[str, str]]] = {}  # feedback id -> (action id, digest given on)
    for kind, table in TABLES.items():
        digest_columns = [table.c[_DIGESTS[name]] for name in _action_fields(kind)]
        columns = [table.c[name] for name in _FIELDS[kind]] + digest_columns
        for chunk in chunks(ids):
            if kind is ReviewedComparison:
                where = sa.or_(table.c.chosen_trace_id.in_(chunk),
                               table.c.rejected_trace_id.in_(chunk))
            else:
                where = table.c.trace_id.in_(chunk)
            for row in connection.execute(sa.select(*columns).where(where)):
                data = row._asdict()
                given[row.id] = [(data[name], data[_DIGESTS[name]])
                                 for name in _action_fields(kind)
                                 if data[name] and data[_DIGESTS[name]]]
                items[row.id] = kind(**{name: data[name] for name in _FIELDS[kind]})
    now = _action_digests(connection, {a for sides in given.values() for a, _ in sides})
    for feedback_id, sides in given.items():
        if any(now.get(action) not in (None, was) for action, was in sides):
            items[feedback_id] = replace(items[feedback_id], detached=True)
    order = {kind: i for i, kind in enumerate(TABLES)}
    return sorted(items.values(), key=lambda item: (order[type(item)], item.id))



def _action_sides(table: sa.Table) -> list[tuple[sa.Column, sa.Column, sa.Column]]:
    """(trace, action, digest given on) columns of each side of a feedback table naming actions."""
    if table is schema.reviewed_comparisons:
        return [(table.c.chosen_trace_id, table.c.chosen_action_id,
                 table.c.chosen_action_digest),
                (table.c.rejected_trace_id, table.c.rejected_action_id,
                 table.c.rejected_action_digest)]
    if "action_id" in table.c:
        return [(table.c.trace_id, table.c.action_id, table.c.action_digest)]
    return []


def _trace_columns(table: sa.Table) -> list[sa.Column]:
    if table is schema.reviewed_comparisons:
        return [table.c.chosen_trace_id, table.c.rejected_trace_id]
    return [table.c.trace_id]


def _owned_by(table: sa.Table, owner: str) -> sa.ColumnElement[bool]:
    """Every trace the feedback names belongs to ``owner`` (as add_feedback requires)."""
    owned = sa.select(schema.traces.c.id).where(schema.traces.c.owner == owner)
    return sa.and_(*(column.in_(owned) for column in _trace_columns(table)))


def orphaned_feedback(connection: sa.Connection, owner: str | None = None) -> list[Feedback]:
    """Feedback on an action its trace no longer has (a shorter reimport removed it), or whose
    content changed since the feedback was given (``detached``).

    Kept, since the person's judgment stays true of what they saw; left out of pairs (see
    core.feedback.split_orphaned); listed here so it can be removed with ``remove_feedback``.
    """
    a = schema.actions
    items: list[Feedback] = []
    for kind, table in TABLES.items():
        sides = _action_sides(table)
        if not sides:
            continue
        gone = [sa.and_(action.is_not(None), ~sa.exists().where(
                    a.c.id == action, a.c.trace_id == trace,
                    sa.or_(given.is_(None), a.c.content_digest.is_(None),
                           a.c.content_digest == given)))
                for trace, action, given in sides]
        query = sa.select(*(table.c[name] for name in _FIELDS[kind])).where(sa.or_(*gone))
        if owner is not None:
            query = query.where(_owned_by(table, owner))
        items.extend(kind(**row._asdict()) for row in connection.execute(query))
    order = {kind: i for i, kind in enumerate(TABLES)}
    return sorted(items, key=lambda item: (order[type(item)], item.id))


def remove_feedback(connection: sa.Connection, ids: Sequence[str],
                    owner: str | None = None) -> int:
    """Delete feedback by id, all or nothing: an id that does not exist, or (owner given) names a
    trace of another owner, is a NotFoundError and nothing is removed."""
    wanted = list(dict.fromkeys(ids))
    found: dict[str, sa.Table] = {}
    for table in TABLES.values():
        for chunk in chunks(wanted):
            query = sa.select(table.c.id).where(table.c.id.in_(chunk))
            if owner is not None:
                query = query.where(_owned_by(table, owner))
            found.update((feedback, table) for feedback in connection.scalars(query))
    missing = [i for i in wanted if i not in found]
    if missing:
        whose = f" owned by {owner}" if owner is not None else ""
        raise NotFoundError(f"no feedback {', '.join(missing)}{whose}; nothing was removed")
    for table in {*found.values()}:
        for chunk in chunks([i for i, t in found.items() if t is table]):
            connection.execute(table.delete().where(table.c.id.in_(chunk)))
    return len(found)


def review_comparison(connection: sa.Connection, comparison_id: str, *, reviewer: str,
                      status: str, owner: str | None = None) -> ReviewedComparison:
    """Record a review; NotFoundError for an unknown comparison or (owner given) one on another
    account's traces. The author stays: whether the review was independent is read from both."""
    return decide_comparison(connection, comparison_id, reviewer=reviewer, status=status,
                             owner=owner)[0]


def decide_comparison(connection: sa.Connection, comparison_id: str, *, reviewer: str,
                      status: str, owner: str | None = None, version: int | None = None
                      ) -> tuple[ReviewedComparison, int]:
    """``review_comparison``, raising the comparison's review version (``review_queue``): at
    ``version`` only when given (else a ReviewConflict with its state now, and nothing stored).
    Returns the comparison and its new version."""
    if status not in REVIEW_STATUSES:
        raise InputError(f"expected one of {', '.join(REVIEW_STATUSES)}, got {status!r}",
                         field="status")
    if not reviewer:
        raise InputError("a review needs its reviewer", field="reviewer")
    table = schema.reviewed_comparisons
    query = (sa.select(*(table.c[n] for n in _FIELDS[ReviewedComparison]))
             .where(table.c.id == comparison_id))
    if owner is not None:
        query = query.where(_owned_by(table, owner))
    row = connection.execute(query).one_or_none()
    if row is None:
        raise NotFoundError(f"no comparison {comparison_id}")
    trace_owner = owner or connection.scalar(sa.select(schema.traces.c.owner).where(
        schema.traces.c.id == row.chosen_trace_id))
    # The version first: a verdict made on an older one stores nothing.
    new_version = review_queue.touch(connection, trace_owner, ("comparison", comparison_id),
                                     version)
    connection.execute(table.update().where(table.c.id == comparison_id)
                       .values(reviewer=reviewer, status=status))
    return ReviewedComparison(**{**row._asdict(), "reviewer": reviewer, "status": status}), \
        new_version
