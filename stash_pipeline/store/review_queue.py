"""The review queue in SQL: the owner's traces nobody has reviewed and the comparisons waiting
for someone other than their author, in core.review_order's order, a page at a time.

One UNION ALL of traces and comparisons carries each item's reason rank and sort key, computed
from the stored scores of the trace's current version; the database sorts and pages it, so a
page costs the same whatever the number of traces. ``review_items`` holds what is not feedback:
a trace reviewed without a comment, an item skipped, an assignee.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from stash_pipeline.core.errors import ReviewConflict
from stash_pipeline.core.feedback import SUCCESS_REWARD
from stash_pipeline.core.review_order import NEAR_REFERENCE, REASONS, reason_rank
from stash_pipeline.core.trace_search import TraceFilter
from stash_pipeline.store import schema
from stash_pipeline.store.batching import chunks, dialect_insert
from stash_pipeline.store.trace_pages import trace_conditions

KINDS = ("trace", "comparison")
STATUSES = ("reviewed", "skipped")


@dataclass(frozen=True)
class QueueScope:
    """Which items a queue holds: the owner's, under these filters."""

    owner: str
    reviewer: str  # comparisons this name authored are not theirs to review
    release: str | None = None  # the shared evaluator whose credit is read
    model_id: str | None = None  # the personal model whose verdict is read
    where: TraceFilter | None = None
    assignee: str | None = None  # only items assigned to this name
    unassigned: bool = False  # only items assigned to nobody
    kinds: tuple[str, ...] = KINDS
    # A personal model the queue does not read, and why (services.review: it does not beat its
    # baselines); model_id is then None.
    set_aside: str | None = None


@dataclass(frozen=True)
class QueueItem:
    kind: str  # "trace" or "comparison"
    id: str  # the trace id or the comparison id
    trace_id: str  # the trace (a comparison's chosen side)
    agent: str | None
    domain: str | None
    task_id: str | None
    preview: str | None  # the trace's first user message
    reason: str  # core.review_order.REASONS
    sort_key: float
    created_at: datetime
    assignee: str | None
    status: str | None  # "skipped", or None
    shared: float | None  # the release's mean action credit
    personal: float | None  # the personal model's verdict (core.review_order.personal_verdict)
    nearest: float | None  # the smallest |credit| of an action
    outcome_succeeded: bool | None
    version: int = 0  # the item's review version (review_items.version; 0: never changed)


@dataclass(frozen=True)
class QueueCounts:
    total: int  # items in scope, reviewed or not
    pending: int  # not reviewed yet (skipped ones included)

    @property
    def reviewed(self) -> int:
        return self.total - self.pending


def _items(scope: QueueScope, *, ordered: bool = True) -> sa.Subquery:
    """Every item in scope, reviewed or not, whether it is done and (``ordered``) its rank
    and key."""
    unknown = set(scope.kinds) - set(KINDS)
    if unknown or not scope.kinds:
        raise ValueError(f"queue kinds are among {KINDS}, got {scope.kinds}")
    parts = [_trace_items(scope, ordered=ordered) if kind == "trace"
             else _comparison_items(scope)
             for kind in dict.fromkeys(scope.kinds)]
    return (sa.union_all(*parts) if len(parts) > 1 else parts[0]).subquery("queue")


def _columns(*, kind, item_id, trace, rank, key, created, done, review,
             shared=None, personal=None, nearest=None, lowest=None) -> list:
    skipped_at = sa.case((review.c.status == "skipped", review.c.updated_at))
    return [kind.label("kind"), item_id.label("item_id"), trace.c.id.label("trace_id"),
            trace.c.agent.label("agent"), trace.c.domain.label("domain"),
            trace.c.task_id.label("task_id"), trace.c.preview.label("preview"),
            rank.label("rank"), sa.cast(key, sa.Float).label("sort_key"),
            skipped_at.label("skipped_at"), created.label("created_at"),
            done.label("done"), review.c.assignee.label("assignee"),
            review.c.status.label("status"),
            sa.func.coalesce(review.c.version, 0).label("version"),
            sa.cast(shared if shared is not None else sa.null(), sa.Float).label("shared"),
            sa.cast(personal if personal is not None else sa.null(), sa.Float).label("personal"),
            sa.cast(nearest if nearest is not None else sa.null(), sa.Float).label("nearest"),
            sa.cast(lowest if lowest is not None else sa.null(), sa.Float).label("lowest")]


def _assignment(scope: QueueScope, review: sa.Alias) -> list[sa.ColumnElement[bool]]:
    if scope.unassigned:
        return [review.c.assignee.is_(None)]
    if scope.assignee is not None:
        return [review.c.assignee == scope.assignee]
    return []


def _trace_items(scope: QueueScope, *, ordered: bool = True) -> sa.Select:
    """The owner's traces in scope; ``ordered`` adds each one's reason and key (from its
    scores), which counting does without.

    Each trace's scores are read by subqueries correlated to it, through indexes (one range of
    the (evaluator, trace_id, trace_version, credit) index per evaluator, the scores' and the
    outcomes' keys), inside a derived table the databases do not merge into the outer query
    (OFFSET 0): a plan that cannot go quadratic whatever the tables' statistics say. (Aggregated
    subqueries joined to the traces did: PostgreSQL, before its statistics of a fresh import,
    aggregated every trace's actions again for each trace, 143 s for a page of 5,000.)
    """
    t, r = schema.traces, schema.review_items.alias("trace_review")
    reviewed = sa.or_(
        sa.and_(r.c.status == "reviewed", r.c.trace_version == t.c.version),
        *(sa.exists().where(table.c.trace_id == t.c.id)
          for table in (schema.comments, schema.ratings)),
        *(sa.exists().where(column == t.c.id) for column in (
            schema.reviewed_comparisons.c.chosen_trace_id,
            schema.reviewed_comparisons.c.rejected_trace_id)))
    done = sa.case((reviewed, 1), else_=0)
    inner = (sa.select(t.c.id, t.c.agent, t.c.domain, t.c.task_id, t.c.preview, t.c.created_at,
                       r.c.status, r.c.assignee, r.c.updated_at, r.c.version,
                       done.label("done"),
                       *(_verdict_columns(scope, t) if ordered else ()))
             .select_from(t)
             .outerjoin(r, sa.and_(r.c.kind == "trace", r.c.item_id == t.c.id))
             .where(t.c.owner == scope.owner, *trace_conditions(scope.where, t, scope.release),
                    *_assignment(scope, r),
                    # Ordering is for the items left: reviewed ones' scores are never read
                    # (the CASE: NOT of a NULL comparison would drop the row too).
                    *((done == 0,) if ordered else ()))
             .offset(0).subquery("trace_items"))
    order = _order(inner) if ordered else {"rank": sa.literal(0), "key": sa.literal(0.0)}
    return sa.select(*_columns(kind=sa.literal("trace", sa.String), item_id=inner.c.id,
                               trace=inner, created=inner.c.created_at, done=inner.c.done,
                               review=inner, **order))


def _verdict_columns(scope: QueueScope, t: sa.Table) -> list[sa.Label]:
    """What the order reads of one trace's current version: each evaluator's mean credit and
    smallest |credit|, the personal model's calibrated whole-trace score, the lowest outcome."""
    a, o, s = schema.action_scores, schema.verified_outcomes, schema.scores

    def credit(evaluator: str | None, value: sa.ColumnElement, name: str) -> sa.Label:
        if evaluator is None:  # typed: PostgreSQL cannot do arithmetic on an untyped NULL
            return sa.cast(sa.null(), sa.Float).label(name)
        return (sa.select(value).where(a.c.evaluator == evaluator, a.c.trace_id == t.c.id,
                                       a.c.trace_version == t.c.version,
                                       a.c.credit.is_not(None))
                .scalar_subquery().label(name))

    mean, nearest = sa.func.avg(a.c.credit), sa.func.min(sa.func.abs(a.c.credit))
    calibrated = sa.cast(sa.null(), sa.Float).label("calibrated") if scope.model_id is None else (
        sa.select(s.c.calibrated).where(s.c.trace_id == t.c.id, s.c.evaluator == scope.model_id,
                                        s.c.trace_version == t.c.version)
        .scalar_subquery().label("calibrated"))
    return [credit(scope.release, mean, "shared_mean"),
            credit(scope.release, nearest, "shared_nearest"),
            credit(scope.model_id, mean, "personal_mean"),
            credit(scope.model_id, nearest, "personal_nearest"), calibrated,
            sa.select(sa.func.min(o.c.reward)).where(o.c.trace_id == t.c.id)
            .scalar_subquery().label("lowest")]


def _order(item: sa.Subquery) -> dict[str, Any]:
    """core.review_order's reason (as a rank) and sort key over one trace's verdict columns,
    as SQL (NULL comparisons are never true)."""
    s = item.c.shared_mean
    p = sa.func.coalesce(item.c.personal_mean, 2.0 * item.c.calibrated - 1.0)
    v = sa.func.coalesce(s, p)
    nearest = sa.func.coalesce(item.c.shared_nearest, item.c.personal_nearest)
    lowest = item.c.lowest
    skipped = item.c.status == "skipped"
    disagree = s * p < 0
    contradicts = sa.or_(sa.and_(lowest >= SUCCESS_REWARD, v < 0),
                         sa.and_(lowest < SUCCESS_REWARD, v > 0))
    near = nearest < NEAR_REFERENCE
    rank = sa.case((skipped, reason_rank("skipped")), (disagree, reason_rank("disagreement")),
                   (contradicts, reason_rank("outcome")), (near, reason_rank("near_reference")),
                   (v.is_not(None), reason_rank("score")), else_=reason_rank("unscored"))
    key = sa.case((skipped, 0.0), (disagree, -sa.func.abs(s - p)),
                  (contradicts, -sa.func.abs(v)), (near, nearest), (v.is_not(None), v),
                  else_=0.0)
    return {"rank": rank, "key": key, "shared": s, "personal": p, "nearest": nearest,
            "lowest": lowest}


def _comparison_items(scope: QueueScope) -> sa.Select:
    c, t = schema.reviewed_comparisons, schema.traces
    r = schema.review_items.alias("comparison_review")
    chosen, rejected = t.alias("chosen_trace"), t.alias("rejected_trace")
    # A comparison is in a filtered queue when either of its traces matches the filter.
    matches = [sa.and_(*trace_conditions(scope.where, side, scope.release))
               for side in (chosen, rejected)] if scope.where else []
    rank = sa.case((r.c.status == "skipped", reason_rank("skipped")),
                   else_=reason_rank("comparison"))
    return (sa.select(*_columns(kind=sa.literal("comparison", sa.String), item_id=c.c.id,
                                trace=chosen, rank=rank, key=sa.literal(0.0),
                                created=c.c.created_at,
                                done=sa.case((c.c.status == "pending", 0), else_=1), review=r))
            .select_from(c)
            .join(chosen, chosen.c.id == c.c.chosen_trace_id)
            .join(rejected, rejected.c.id == c.c.rejected_trace_id)
            .outerjoin(r, sa.and_(r.c.kind == "comparison", r.c.item_id == c.c.id))
            .where(chosen.c.owner == scope.owner, rejected.c.owner == scope.owner,
                   sa.or_(c.c.author.is_(None), c.c.author != scope.reviewer),
                   *([sa.or_(*matches)] if matches else []), *_assignment(scope, r)))


def queue_counts(connection: sa.Connection, scope: QueueScope) -> QueueCounts:
    items = _items(scope, ordered=False)
    row = connection.execute(sa.select(
        sa.func.count(), sa.func.coalesce(sa.func.sum(1 - items.c.done), 0))).one()
    return QueueCounts(total=int(row[0]), pending=int(row[1]))


def queue_page(connection: sa.Connection, scope: QueueScope, *, limit: int,
               offset: int = 0) -> list[QueueItem]:
    """The items not reviewed yet, in the queue's order."""
    items = _items(scope)
    query = (sa.select(items).where(items.c.done == 0)
             .order_by(items.c.rank, items.c.sort_key, items.c.skipped_at, items.c.created_at,
                       items.c.kind.desc(), items.c.item_id)
             .limit(limit).offset(offset))
    return [QueueItem(kind=row.kind, id=row.item_id, trace_id=row.trace_id, agent=row.agent,
                      domain=row.domain, task_id=row.task_id, preview=row.preview,
                      reason=REASONS[row.rank], sort_key=row.sort_key,
                      created_at=row.created_at, assignee=row.assignee,
                      status=row.status if row.status == "skipped" else None,
                      shared=row.shared, personal=row.personal, nearest=row.nearest,
                      outcome_succeeded=None if row.lowest is None
                      else row.lowest >= SUCCESS_REWARD, version=row.version)
            for row in connection.execute(query)]


@dataclass(frozen=True)
class ReviewYield:
    """What a reviewer's work on an owner's traces has been so far, by what it becomes."""

    approved_comparisons: int  # training pairs, as given
    comments: int  # training pairs only through extraction
    ratings: int  # training pairs against the reviewer's other ratings
    done: int  # items marked reviewed without feedback: no pair


def review_yield(connection: sa.Connection, owner: str, reviewer: str) -> ReviewYield:
    """Counts of the reviewer's approved comparisons, comments and ratings on the owner's
    traces, and of the queue items the reviewer marked done."""
    t, c, rc, ri = schema.traces, schema.comments, schema.reviewed_comparisons, \
        schema.review_items
    approved = connection.scalar(
        sa.select(sa.func.count()).select_from(rc).join(t, t.c.id == rc.c.chosen_trace_id)
        .where(t.c.owner == owner, rc.c.reviewer == reviewer, rc.c.status == "approved"))
    comments, ratings = (connection.scalar(
        sa.select(sa.func.count()).select_from(table).join(t, t.c.id == table.c.trace_id)
        .where(t.c.owner == owner, table.c.author == reviewer))
        for table in (c, schema.ratings))
    done = connection.scalar(
        sa.select(sa.func.count()).select_from(ri)
        .where(ri.c.owner == owner, ri.c.reviewer == reviewer, ri.c.status == "reviewed"))
    return ReviewYield(int(approved or 0), int(comments or 0), int(ratings or 0),
                       int(done or 0))


Key = tuple[str, str]  # (kind, id) of a queue item


def _upsert(connection: sa.Connection, rows: Sequence[dict], columns: Sequence[str],
            expected: Mapping[Key, int] | None = None) -> None:
    """Insert review_items rows, or update ``columns`` of the ones that exist, raising each
    row's version. An item in ``expected`` changes only at that version: it is checked first,
    then again by the write itself (a compare-and-set: a change another transaction committed in
    between is found too), and any item found changed is a ReviewConflict that stores nothing."""
    if not rows:
        return
    expected = dict(expected or {})
    table = schema.review_items
    if expected:
        stale = [key for key, version in _versions(connection, list(expected)).items()
                 if version != expected[key]]
        if stale:
            raise _conflict(connection, stale)
    statement = dialect_insert(connection, table)
    updated = {name: statement.excluded[name] for name in (*columns, "updated_at")}
    updated["version"] = table.c.version + 1
    free = [{**row, "version": 1} for row in rows if (row["kind"], row["item_id"]) not in expected]
    if free:
        connection.execute(statement.on_conflict_do_update(
            index_elements=["kind", "item_id"], set_=updated), free)
    for row in rows:
        key = (row["kind"], row["item_id"])
        if key not in expected:
            continue
        checked = dialect_insert(connection, table).values(**{**row, "version": 1})
        done = connection.execute(checked.on_conflict_do_update(
            index_elements=["kind", "item_id"],
            set_={name: checked.excluded[name] for name in (*columns, "updated_at")}
            | {"version": table.c.version + 1},
            where=table.c.version == expected[key]).returning(table.c.version))
        if done.first() is None:  # the WHERE found another version: no row written
            raise _conflict(connection, [key])


def _versions(connection: sa.Connection, keys: Sequence[Key]) -> dict[Key, int]:
    """Each item's version now (0: never changed)."""
    table = schema.review_items
    found = dict.fromkeys(keys, 0)
    for chunk in chunks(list(dict.fromkeys(keys))):
        found.update(((row.kind, row.item_id), row.version) for row in connection.execute(
            sa.select(table.c.kind, table.c.item_id, table.c.version)
            .where(sa.tuple_(table.c.kind, table.c.item_id).in_(chunk))))
    return found


def current_states(connection: sa.Connection, keys: Sequence[Key]) -> list[dict[str, Any]]:
    """The items' review state now: version, status, assignee, reviewer (a comparison: its
    verdict and the verdict's reviewer too)."""
    table, compared = schema.review_items, schema.reviewed_comparisons
    rows = {}
    for chunk in chunks(list(dict.fromkeys(keys))):
        rows.update(((row.kind, row.item_id), row) for row in connection.execute(
            sa.select(table).where(sa.tuple_(table.c.kind, table.c.item_id).in_(chunk))))
    verdicts = {row.id: row for row in connection.execute(
        sa.select(compared.c.id, compared.c.status, compared.c.reviewer)
        .where(compared.c.id.in_([i for k, i in keys if k == "comparison"])))}
    states = []
    for kind, item_id in keys:
        row = rows.get((kind, item_id))
        state = {"kind": kind, "id": item_id, "version": row.version if row else 0,
                 "status": (row.status if row else None) or "pending",
                 "assignee": row.assignee if row else None,
                 "reviewer": row.reviewer if row else None}
        if kind == "comparison" and item_id in verdicts:
            state["verdict"] = verdicts[item_id].status
            state["verdict_reviewer"] = verdicts[item_id].reviewer
        states.append(state)
    return states


def _conflict(connection: sa.Connection, keys: Sequence[Key]) -> ReviewConflict:
    current = current_states(connection, keys)
    first = current[0]
    more = f" (and {len(current) - 1} more)" if len(current) > 1 else ""
    return ReviewConflict(
        f"{first['kind']} {first['id']}{more} was changed by someone else since you loaded it: "
        f"it is at version {first['version']} now ({_state_words(first)}); nothing was changed: "
        "look at it again, then decide with its current version", current=current)


def _state_words(state: Mapping[str, Any]) -> str:
    words = [state["status"] if not state.get("reviewer") or state["status"] == "pending"
             else f"{state['status']} by {state['reviewer']}"]
    if state.get("verdict") not in (None, "pending"):
        words.append(f"{state['verdict']} by {state.get('verdict_reviewer') or 'someone'}")
    words.append(f"assigned to {state['assignee']}" if state["assignee"] else "unassigned")
    return ", ".join(words)


def set_status(connection: sa.Connection, owner: str, items: Sequence[Key],
               status: str | None, *, reviewer: str | None,
               versions: dict[str, int] | None = None,
               expected: Mapping[Key, int] | None = None) -> dict[Key, int]:
    """Mark (kind, id) items reviewed or skipped (None: back in the queue as they were), each
    in ``expected`` only at that item version. The caller has checked that every item is the
    owner's; ``versions`` holds the current version of each trace marked reviewed. Returns each
    item's new version."""
    if status is not None and status not in STATUSES:
        raise ValueError(f"unknown review status {status!r}")
    now = schema.utcnow()
    _upsert(connection, [{"kind": kind, "item_id": item, "owner": owner, "status": status,
                          "reviewer": reviewer, "updated_at": now,
                          "trace_version": (versions or {}).get(item) if kind == "trace"
                          else None}
                         for kind, item in dict.fromkeys(items)],
            ("status", "reviewer", "trace_version"), expected)
    return _versions(connection, items)


def assign(connection: sa.Connection, owner: str, items: Sequence[Key],
           assignee: str | None, *, expected: Mapping[Key, int] | None = None
           ) -> dict[Key, int]:
    """Assign (kind, id) items of the owner's to ``assignee`` (None: to nobody), each in
    ``expected`` only at that item version. Returns each item's new version."""
    now = schema.utcnow()
    _upsert(connection, [{"kind": kind, "item_id": item, "owner": owner, "assignee": assignee,
                          "updated_at": now} for kind, item in dict.fromkeys(items)],
            ("assignee",), expected)
    return _versions(connection, items)


def touch(connection: sa.Connection, owner: str, key: Key, expected: int | None) -> int:
    """Raise one item's version for a change stored elsewhere (a comparison's verdict), only at
    version ``expected`` when given; returns the new version."""
    _upsert(connection, [{"kind": key[0], "item_id": key[1], "owner": owner,
                          "updated_at": schema.utcnow()}], (),
            None if expected is None else {key: expected})
    return _versions(connection, [key])[key]


def owned_comparisons(connection: sa.Connection, ids: Sequence[str], owner: str) -> set[str]:
    """Those of ``ids`` that are comparisons on the owner's traces."""
    c, t = schema.reviewed_comparisons, schema.traces
    owned = sa.select(t.c.id).where(t.c.owner == owner)
    found: set[str] = set()
    for chunk in chunks(list(dict.fromkeys(ids))):
        found.update(connection.scalars(sa.select(c.c.id).where(
            c.c.id.in_(chunk), c.c.chosen_trace_id.in_(owned),
            c.c.rejected_trace_id.in_(owned))))
    return found


def comparisons(connection: sa.Connection, ids: Sequence[str]) -> dict[str, dict]:
    """The stored comparisons of these ids, as column dicts."""
    c = schema.reviewed_comparisons
    found: dict[str, dict] = {}
    for chunk in chunks(list(dict.fromkeys(ids))):
        found.update((row.id, row._asdict()) for row in connection.execute(
            sa.select(c).where(c.c.id.in_(chunk))))
    return found
