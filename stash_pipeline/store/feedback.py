"""Feedback rows: the four kinds of core.feedback, one table each."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, fields

import sqlalchemy as sa

from stash_pipeline.core.errors import InputError, NotFoundError
from stash_pipeline.core.feedback import (
    REVIEW_STATUSES, Comment, Feedback, Rating, ReviewedComparison, VerifiedOutcome, count_by_kind,
)
from stash_pipeline.store import schema
from stash_pipeline.store.batching import chunks, insert_rows

TABLES: dict[type, sa.Table] = {
    Comment: schema.comments,
    Rating: schema.ratings,
    ReviewedComparison: schema.reviewed_comparisons,
    VerifiedOutcome: schema.verified_outcomes,
}
# Dataclass field names equal column names, so a row is the dataclass as a dict and back.
_FIELDS = {kind: [f.name for f in fields(kind)] for kind in TABLES}


# (trace field, action field) pairs of each kind: the action must be an action of that trace.
_REFERENCES: dict[type, tuple[tuple[str, str | None], ...]] = {
    Comment: (("trace_id", "action_id"),),
    Rating: (("trace_id", "action_id"),),
    ReviewedComparison: (("chosen_trace_id", "chosen_action_id"),
                         ("rejected_trace_id", "rejected_action_id")),
    VerifiedOutcome: (("trace_id", None),),
}


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
    for item in items:
        by_table.setdefault(TABLES[type(item)], []).append(asdict(item))
    for table, rows in by_table.items():
        # Delete then insert is the portable upsert; an id repeated in one batch keeps the last.
        unique = list({row["id"]: row for row in rows}.values())
        for ids in chunks([row["id"] for row in unique]):
            connection.execute(table.delete().where(table.c.id.in_(ids)))
        insert_rows(connection, table, unique)


def missing_ids(connection: sa.Connection, items: Sequence[Feedback],
                owner: str | None = None) -> set[str]:
    """The trace and action ids these items name that the database does not hold.

    With ``owner``, a trace of anyone else counts as missing (not found, as the API answers).
    """
    wanted: dict[str, set[str]] = {"trace": set(), "action": set()}
    for item in items:
        for _, kind, ref in references(item):
            wanted[kind].add(ref)
    missing: set[str] = set()
    for kind, column in (("trace", schema.traces.c.id), ("action", schema.actions.c.id)):
        found: set[str] = set()
        for ids in chunks(sorted(wanted[kind])):
            query = sa.select(column).where(column.in_(ids))
            if owner is not None and kind == "trace":
                query = query.where(schema.traces.c.owner == owner)
            found.update(connection.scalars(query))
        missing |= wanted[kind] - found
    return missing


def add_feedback(connection: sa.Connection, items: Sequence[Feedback],
                 owner: str | None = None) -> dict[str, int]:
    """Feedback from outside an import: every trace and action it names must exist (and belong
    to ``owner`` when given); otherwise nothing is written."""
    for index, item in enumerate(items):
        try:
            references(item)
        except InputError as error:
            raise InputError(error.reason, record=f"{index} ({item.id})",
                             field=error.field) from None
    missing = missing_ids(connection, items, owner)
    for item in items:
        for _, kind, ref in references(item):
            if ref in missing:
                raise NotFoundError(f"feedback {item.id} names {kind} {ref}, which does not exist")
    write_feedback(connection, items)
    return count_by_kind(list(items))


def feedback_for(connection: sa.Connection, trace_ids: Sequence[str]) -> list[Feedback]:
    """Every feedback item on these traces (a comparison when either side is one of them)."""
    ids = list(dict.fromkeys(trace_ids))
    items: dict[str, Feedback] = {}  # by id: a comparison may match two chunks
    for kind, table in TABLES.items():
        columns = [table.c[name] for name in _FIELDS[kind]]
        for chunk in chunks(ids):
            if kind is ReviewedComparison:
                where = sa.or_(table.c.chosen_trace_id.in_(chunk),
                               table.c.rejected_trace_id.in_(chunk))
            else:
                where = table.c.trace_id.in_(chunk)
            for row in connection.execute(sa.select(*columns).where(where)):
                items[row.id] = kind(**row._asdict())
    order = {kind: i for i, kind in enumerate(TABLES)}
    return sorted(items.values(), key=lambda item: (order[type(item)], item.id))



def review_comparison(connection: sa.Connection, comparison_id: str, *, reviewer: str,
                      status: str, owner: str | None = None) -> ReviewedComparison:
    """Record a review; NotFoundError for an unknown comparison or (owner given) one on another
    account's traces. The author stays: whether the review was independent is read from both."""
    if status not in REVIEW_STATUSES:
        raise InputError(f"expected one of {', '.join(REVIEW_STATUSES)}, got {status!r}",
                         field="status")
    if not reviewer:
        raise InputError("a review needs its reviewer", field="reviewer")
    table = schema.reviewed_comparisons
    row = connection.execute(sa.select(*(table.c[n] for n in _FIELDS[ReviewedComparison]))
                             .where(table.c.id == comparison_id)).one_or_none()
    if row is None or (owner is not None and missing_ids(
            connection, [ReviewedComparison(**row._asdict())], owner)):
        raise NotFoundError(f"no comparison {comparison_id}")
    connection.execute(table.update().where(table.c.id == comparison_id)
                       .values(reviewer=reviewer, status=status))
    return ReviewedComparison(**{**row._asdict(), "reviewer": reviewer, "status": status})
