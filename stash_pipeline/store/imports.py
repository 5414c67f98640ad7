"""Bulk trace import: one transaction a call, the records consumed in chunks (bounded memory)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, fields, replace

import sqlalchemy as sa

from stash_pipeline.core.digests import action_digests, trace_digest
from stash_pipeline.core.errors import InputError, NotFoundError, OwnershipError
from stash_pipeline.core.feedback import Feedback, Review, count_by_kind, feedback_trace_ids
from stash_pipeline.core.records import ImportedTrace
from stash_pipeline.core.serialize import message_to_dict
from stash_pipeline.core.trace_search import search_text, trace_preview
from stash_pipeline.core.traces import Action, Trace
from stash_pipeline.core.validation import validate_feedback, validate_review, validate_trace
from stash_pipeline.store import schema, scoring_work
from stash_pipeline.store.accounts import ensure_accounts
from stash_pipeline.store.batching import chunks, insert_rows
from stash_pipeline.store.feedback import (
    TABLES,
    missing_ids,
    references,
    review_comparison,
    write_feedback,
)
from stash_pipeline.store.locks import lock_traces
from stash_pipeline.store.scores import current_versions

CHUNK_SIZE = 500


@dataclass
class ImportSummary:
    traces: int = 0  # records read
    imported: int = 0  # new traces
    updated: int = 0  # traces already stored: version bumped, content replaced
    unchanged: int = 0  # traces already stored with identical content: nothing changed
    messages: int = 0
    actions: int = 0
    tool_calls: int = 0
    comments: int = 0
    ratings: int = 0
    comparisons: int = 0
    outcomes: int = 0
    reviews: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True)
class _PendingFeedback:
    """Feedback naming a trace not stored yet: later records of the same call may bring it."""

    item: Feedback
    source: str
    index: int
    owner: str  # the record's: every trace the item names must be this owner's


def import_traces(connection: sa.Connection, records: Iterable[ImportedTrace], *,
                  on_progress: Callable[[int], None] | None = None,
                  chunk_size: int = CHUNK_SIZE) -> ImportSummary:
    """Store every record inside the caller's transaction; any exception leaves it to roll back.

    ``on_progress`` gets the number of traces each stored chunk added (a tqdm ``update``).
    """
    summary = ImportSummary()
    waiting: list[_PendingFeedback] = []
    reviews: list[tuple[str, str, Review]] = []  # (owner, source, review)
    batch: list[ImportedTrace] = []
    batch_ids: set[str] = set()
    for record in records:
        # A trace repeated within one call is a reimport of the copy stored just before it.
        if len(batch) >= chunk_size or record.trace.id in batch_ids:
            _write_chunk(connection, batch, summary, waiting, on_progress)
            batch, batch_ids = [], set()
        _check_record(record)
        batch.append(record)
        batch_ids.add(record.trace.id)
        reviews.extend((record.trace.owner, record.source, review) for review in record.reviews)
    if batch:
        _write_chunk(connection, batch, summary, waiting, on_progress)
    if waiting:
        _write_waiting_feedback(connection, waiting)
    _apply_reviews(connection, reviews)
    summary.reviews += len(reviews)
    return summary


def _apply_reviews(connection: sa.Connection, reviews: Sequence[tuple[str, str, Review]]) -> None:
    """Reviews in trace files, after all the feedback: a comparison may come in the same call."""
    for owner, source, review in reviews:
        try:
            review_comparison(connection, review.comparison_id, reviewer=review.reviewer,
                              status=review.status, owner=owner)
        except NotFoundError:
            raise InputError(f"no comparison {review.comparison_id} on traces of {owner}",
                             field="feedback.comparison_id", **_location(source)) from None


def _location(source: str) -> dict[str, str | None]:
    file, _, record = source.rpartition(":")
    return {"file": file or None, "record": record or None}


def _check_record(record: ImportedTrace) -> None:
    """The checks both databases rely on (core.validation), before anything of the chunk is
    written: whatever one database would refuse, both refuse here with the same InputError. A
    record an importer validated already (``is_cleared``) is not validated again."""
    cleared = record.is_cleared
    try:
        if not cleared:
            validate_trace(record.trace)
        for index, item in enumerate(record.feedback):
            try:
                if not cleared:
                    validate_feedback(item)
                references(item)
            except InputError as error:
                raise InputError(error.reason, field=f"feedback[{index}].{error.field}") from None
        for review in () if cleared else record.reviews:
            validate_review(review)
    except InputError as error:
        raise error.located(**_location(record.source)) from None


def _write_chunk(connection: sa.Connection, batch: Sequence[ImportedTrace],
                 summary: ImportSummary, waiting: list[_PendingFeedback],
                 on_progress: Callable[[int], None] | None) -> None:
    t = schema.traces
    ids = [record.trace.id for record in batch]
    # Concurrent imports of the same traces take turns per trace (PostgreSQL; SQLite's writer
    # already holds the write lock): what is read next stays true until this transaction ends.
    lock_traces(connection, [*ids, *(tid for r in batch for f in r.feedback
                                     for tid in feedback_trace_ids(f))])
    stored = {row.id: row for row in connection.execute(
        sa.select(t.c.id, t.c.owner, t.c.content_digest, t.c.contribute).where(t.c.id.in_(ids)))}
    for record in batch:
        row = stored.get(record.trace.id)
        if row is not None and row.owner != record.trace.owner:
            raise OwnershipError(
                f"trace {record.trace.id} ({record.source or 'no source'}) already belongs to "
                "another owner; import it under that owner or give it a new id",
                trace_id=record.trace.id)
    ensure_accounts(connection, {record.trace.owner for record in batch})

    # Each trace's actions and stored messages are derived once: they feed the trace row, its
    # digest, the action rows and the counts.
    actions = {record.trace.id: record.trace.actions() for record in batch}
    messages = {r.trace.id: [message_to_dict(m) for m in r.trace.messages] for r in batch}
    digests = {r.trace.id: trace_digest(r.trace, messages[r.trace.id]) for r in batch}
    # Identical content: no version bump, scores and scoring marks kept, nothing queued again.
    same = {r.trace.id for r in batch if r.trace.id in stored
            and stored[r.trace.id].content_digest == digests[r.trace.id]}
    new = [trace_row(r.trace, actions[r.trace.id], version=1, contribute=r.trace.contribute,
                     digest=digests[r.trace.id], messages=messages[r.trace.id])
           for r in batch if r.trace.id not in stored]
    updated = [trace_row(r.trace, actions[r.trace.id], version=None,
                          contribute=r.trace.contribute, digest=digests[r.trace.id],
                          messages=messages[r.trace.id])
               for r in batch if r.trace.id in stored and r.trace.id not in same]
    insert_rows(connection, t, new)
    if updated:
        _replace_traces(connection, updated)
    _opt_in(connection, [r.trace.id for r in batch if r.trace.id in same and r.trace.contribute
                         and not stored[r.trace.id].contribute])
    _queue_for_scoring(connection, [r.trace for r in batch if r.trace.id not in same])
    insert_rows(connection, schema.actions,
                [action_row(r.trace, a, d) for r in batch if r.trace.id not in same
                 for a, d in zip(actions[r.trace.id],
                                 action_digests(r.trace, actions[r.trace.id]).values())])
    # An unchanged trace's feedback is rewritten only where it differs (a new reviewer): rows
    # stored as they are keep their times.
    changed = _changed_feedback(connection, [r for r in batch if r.trace.id in same])
    _write_record_feedback(connection, [
        r if r.trace.id not in same
        else replace(r, feedback=tuple(f for f in r.feedback if id(f) in changed))
        for r in batch], waiting)

    summary.traces += len(batch)
    summary.imported += len(new)
    summary.updated += len(updated)
    summary.unchanged += len(same)
    summary.messages += sum(len(r.trace.messages) for r in batch)
    summary.actions += sum(len(a) for a in actions.values())
    summary.tool_calls += sum(len(m.tool_calls) for r in batch for m in r.trace.messages)
    for kind, n in count_by_kind([f for record in batch for f in record.feedback]).items():
        setattr(summary, kind, getattr(summary, kind) + n)
    if on_progress is not None:
        on_progress(len(batch))


def _changed_feedback(connection: sa.Connection, records: Sequence[ImportedTrace]) -> set[int]:
    """The feedback of these records that is not stored exactly so (by id and every field), as
    the ``id()`` of each item."""
    items = [item for record in records for item in record.feedback]
    changed: set[int] = set()
    for kind, table in TABLES.items():
        mine = {item.id: item for item in items if type(item) is kind}
        stored: dict[str, Feedback] = {}
        names = [f.name for f in fields(kind) if f.name in table.c]
        for chunk in chunks(sorted(mine)):
            for row in connection.execute(sa.select(*(table.c[n] for n in names))
                                          .where(table.c.id.in_(chunk))):
                stored[row.id] = kind(**row._asdict())
        changed.update(id(item) for key, item in mine.items() if stored.get(key) != item)
    return changed


def trace_row(trace: Trace, actions: list[Action], *, version: int | None,
              contribute: bool, digest: str | None = None,
              messages: list[dict] | None = None) -> dict:
    """The traces row of a trace (messages in core.serialize's form, ``messages`` when the caller
    has them already); without a version for an update, which increments the stored one."""
    if messages is None:
        messages = [message_to_dict(m) for m in trace.messages]
    row = {
        "content_digest": digest if digest is not None else trace_digest(trace, messages),
        "id": trace.id, "owner": trace.owner, "agent": trace.agent, "domain": trace.domain,
        "task_id": trace.task_id, "metadata": trace.metadata, "tools": list(trace.tools),
        "messages": messages,
        "message_count": len(trace.messages), "action_count": len(actions),
        "contribute": contribute, "preview": trace_preview(trace),
        "search_text": search_text(trace),
    }
    if version is not None:
        row["version"] = version
    return row


def action_row(trace: Trace, action: Action, digest: str | None = None) -> dict:
    """The actions row of one action, with its tool's name for the slices and its content
    digest (core.digests.action_digests)."""
    call = trace.tool_call(action)
    if digest is None:
        digest = action_digests(trace)[action.id]
    return {"id": action.id, "trace_id": trace.id, "message_index": action.message_index,
            "call_index": action.call_index, "tool_name": call.name if call else None,
            "content_digest": digest}


def _queue_for_scoring(connection: sa.Connection, changed: Sequence[Trace]) -> None:
    """New and changed traces wait for the current release and their owners' kept-current
    models (store.scoring_work)."""
    if not changed:
        return
    versions = current_versions(connection, [trace.id for trace in changed])
    scoring_work.queue_traces(connection, {trace.id: (trace.owner, versions[trace.id])
                                           for trace in changed})


def _opt_in(connection: sa.Connection, ids: list[str]) -> None:
    """An identical reimport with ``contribute`` still opts the trace in (not a content change:
    the version stays)."""
    t = schema.traces
    for chunk in chunks(ids):
        connection.execute(t.update().where(t.c.id.in_(chunk)).values(contribute=True))


def _replace_traces(connection: sa.Connection, rows: list[dict]) -> None:
    """New content and version; old actions and scores go (the seed: reimporting clears them).

    The version is incremented in the statement itself, so no bump is ever lost; the trace's
    scoring mark now names an older version, so every evaluator sees it pending. An opt-in
    (``contribute``) survives: only set_contribute turns it off.
    """
    t = schema.traces
    ids = [row["id"] for row in rows]
    for table in (schema.action_scores, schema.scores, schema.untrained_scores, schema.actions):
        connection.execute(table.delete().where(table.c.trace_id.in_(ids)))
    now = schema.utcnow()
    columns = [c for c in rows[0] if c not in ("id", "contribute")] + ["updated_at"]
    # Bind names differ from column names: SQLAlchemy reserves those for SET.
    values = {c: sa.bindparam(f"b_{c}") for c in columns}
    values["version"] = t.c.version + 1
    values["contribute"] = sa.or_(t.c.contribute, sa.bindparam("b_contribute", type_=sa.Boolean))
    connection.execute(
        t.update().where(t.c.id == sa.bindparam("b_id")).values(values),
        [{f"b_{k}": v for k, v in {**row, "updated_at": now}.items()} for row in rows],
    )


def _write_record_feedback(connection: sa.Connection, batch: Sequence[ImportedTrace],
                           waiting: list[_PendingFeedback]) -> None:
    pending = [_PendingFeedback(item, record.source, index, record.trace.owner)
               for record in batch for index, item in enumerate(record.feedback)]
    if not pending:
        return
    missing = _missing_by_owner(connection, pending)
    ready = []
    for entry in pending:
        named = references(entry.item)
        if any(kind == "trace" and ref in missing[entry.owner] for _, kind, ref in named):
            waiting.append(entry)
            continue
        _raise_if_missing(entry, named, missing[entry.owner])
        ready.append(entry.item)
    write_feedback(connection, ready)


def _write_waiting_feedback(connection: sa.Connection, waiting: list[_PendingFeedback]) -> None:
    lock_traces(connection, [tid for entry in waiting for tid in feedback_trace_ids(entry.item)])
    missing = _missing_by_owner(connection, waiting)
    for entry in waiting:
        _raise_if_missing(entry, references(entry.item), missing[entry.owner])
    write_feedback(connection, [entry.item for entry in waiting])


def _missing_by_owner(connection: sa.Connection,
                      entries: Sequence[_PendingFeedback]) -> dict[str, set[str]]:
    """Per owner, the ids its entries name that are not stored as that owner's: a comparison in
    one account's file never names another account's trace (it reads as not existing)."""
    owners = {entry.owner for entry in entries}
    return {owner: missing_ids(connection, [e.item for e in entries if e.owner == owner], owner)
            for owner in owners}


def _raise_if_missing(entry: _PendingFeedback, named: list[tuple[str, str, str]],
                      missing: set[str]) -> None:
    for field, kind, ref in named:
        if ref in missing:
            raise InputError(f"{kind} {ref!r} does not exist",
                             field=f"feedback[{entry.index}].{field}", **_location(entry.source))
