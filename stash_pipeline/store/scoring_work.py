"""The scoring queue (``scoring_candidates``): which (evaluator, trace version) still waits to be
scored, kept as rows so that the scoring sensors read one bounded page through an index instead of
asking every model about every trace.

Who is queued: every trace's current version for the current shared release, and each owner's
``STASH_PERSONAL_SCORING_MODELS`` most recently succeeded personal models (the models kept
current) for that owner's traces. Rows are written where the work appears (an import or reimport,
a release, a model that succeeds) and removed where it is done (the scores stored at that
version), or when it is no longer wanted (a release replaced, a model no longer kept current).
"""

from __future__ import annotations

import os
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from stash_pipeline.core.validation import positive_setting
from stash_pipeline.store import schema
from stash_pipeline.store.batching import chunks, insert_ignoring_duplicates
from stash_pipeline.store.locks import lock_key

# The most recent succeeded personal models of each owner that auto-scoring keeps current.
DEFAULT_MODELS_KEPT_CURRENT = 3
MODELS_KEPT_CURRENT_ENV = "STASH_PERSONAL_SCORING_MODELS"

# How long a release or a model's success polls for the queue's lock before waiting in line.
EXCLUSIVE_WAIT_S = 60

c = schema.scoring_candidates
t = schema.traces
rm = schema.reward_models


@dataclass(frozen=True)
class ScoringWork:
    """One trace version an evaluator has yet to score."""

    evaluator: str
    trace_id: str
    trace_version: int


def models_kept_current(environ: Mapping[str, str] | None = None) -> int:
    """``STASH_PERSONAL_SCORING_MODELS`` (default 3): each owner's most recent succeeded models
    that auto-scoring keeps current."""
    environ = os.environ if environ is None else environ
    return positive_setting(MODELS_KEPT_CURRENT_ENV, environ.get(MODELS_KEPT_CURRENT_ENV)
                            or str(DEFAULT_MODELS_KEPT_CURRENT))


def kept_current_ids(connection: sa.Connection, owners: Iterable[str],
                     per_owner: int | None = None) -> dict[str, list[str]]:
    """{owner: the ids of its models kept current, newest first} for these owners."""
    per_owner = models_kept_current() if per_owner is None else per_owner
    out: dict[str, list[str]] = {}
    for chunk in chunks(sorted(set(owners))):
        ranked = (sa.select(rm.c.id, rm.c.owner, sa.func.row_number().over(
            partition_by=rm.c.owner,
            order_by=(rm.c.finished_at.desc(), rm.c.id.desc())).label("n"))
            .where(rm.c.status == "succeeded", rm.c.owner.in_(chunk)).subquery())
        rows = connection.execute(sa.select(ranked.c.id, ranked.c.owner)
                                  .where(ranked.c.n <= per_owner)
                                  .order_by(ranked.c.owner, ranked.c.n))
        for row in rows:
            out.setdefault(row.owner, []).append(row.id)
    return out


def _hold(connection: sa.Connection, names: Iterable[str], *, shared: bool) -> None:
    """PostgreSQL: who is queued for what is decided under these locks until the transaction
    ends. An import holds them shared after writing its traces, a release or a model's success
    exclusively before queueing the traces stored: whichever comes second sees what the other
    committed, so no trace misses a release or a model that becomes kept current meanwhile.
    (SQLite's writers take turns anyway.)"""
    if connection.dialect.name != "postgresql":
        return
    keys = sorted({lock_key(f"scoring-queue:{name}") for name in names})
    if not shared:
        # Polled, not queued for: an exclusive request waiting in PostgreSQL's queue would make
        # every later shared request wait behind it, and an import waiting there while holding
        # trace locks another import needs could close a cycle. Past EXCLUSIVE_WAIT_S it queues
        # (a deadlock then is PostgreSQL's to detect: a ConcurrentWriteError, nothing stored).
        deadline = time.monotonic() + EXCLUSIVE_WAIT_S
        while time.monotonic() < deadline:
            if all(connection.scalar(sa.text("SELECT pg_try_advisory_xact_lock(:k)"), {"k": k})
                   for k in keys):
                return
            time.sleep(0.05)
    function = "pg_advisory_xact_lock_shared" if shared else "pg_advisory_xact_lock"
    if keys:
        connection.execute(sa.text(f"SELECT {function}(k) FROM unnest(CAST(:keys AS bigint[])) "
                                   "AS k"), {"keys": keys})


def queue_traces(connection: sa.Connection, traces: Mapping[str, tuple[str, int]]) -> None:
    """Traces imported or changed ({trace id: (owner, current version)}): queued for the latest
    release and their owners' kept-current models, in place of what was queued for them
    before."""
    if not traces:
        return
    owners = {owner for owner, _ in traces.values()}
    _hold(connection, ["release", *(f"owner:{owner}" for owner in owners)], shared=True)
    r = schema.releases
    release = connection.scalar(sa.select(r.c.version)
                                .order_by(r.c.created_at.desc(), r.c.version.desc()).limit(1))
    ids = sorted(traces)
    asked: dict[str, set[str]] = {}  # a Score again's rows stay, at the new version
    for chunk in chunks(ids):
        for row in connection.execute(sa.select(c.c.trace_id, c.c.evaluator)
                                      .where(c.c.trace_id.in_(chunk),
                                             c.c.requested == sa.true())):
            asked.setdefault(row.trace_id, set()).add(row.evaluator)
        connection.execute(c.delete().where(c.c.trace_id.in_(chunk)))
    models = kept_current_ids(connection, owners)
    now = schema.utcnow()
    rows = []
    for trace_id in ids:
        owner, version = traces[trace_id]
        if release is not None:
            rows.append({"evaluator": release, "trace_id": trace_id, "trace_version": version,
                         "personal": False, "queued_at": now, "requested": False})
        wanted = asked.get(trace_id, set())
        rows.extend({"evaluator": model_id, "trace_id": trace_id, "trace_version": version,
                     "personal": True, "queued_at": now, "requested": model_id in wanted}
                    for model_id in sorted(set(models.get(owner, ())) | wanted))
    for chunk in chunks(rows, 500):
        connection.execute(c.insert(), chunk)


# Traces a batch of a release's queueing queues (or queue rows of a replaced release it drops),
# under the queue's exclusive lock: an import waits for one batch at most (benchmarks/
# release_queueing.py: the lock's longest hold and an import's longest wait at 1M traces).
RELEASE_QUEUE_BATCH = 2000


def open_release_queue(connection: sa.Connection, release: str, replaced: str | None) -> None:
    """A new release, saved in this transaction, has scored nothing: every trace is to be queued
    for it, and what was queued for the release it replaces dropped; both happen in batches
    (``settle_release_queue``). Under the exclusive lock, so an import in flight commits first
    (and its traces are read by a batch) and any import after this commits queues for it."""
    _hold(connection, ["release"], shared=False)
    r = schema.releases
    connection.execute(r.update().where(r.c.version == release)
                       .values(queue_settled=False, queued_through=None))
    if replaced is not None:
        connection.execute(r.update().where(r.c.version == replaced)
                           .values(queue_settled=False))


def settle_release_queue(connection: sa.Connection, batch: int | None = None) -> bool:
    """One batch of the releases' queueing, in the caller's (short) transaction, under the
    queue's exclusive lock: the rows of a replaced release dropped, ``batch`` at most, or else
    the latest release's next ``batch`` (RELEASE_QUEUE_BATCH) traces in id order queued (those
    it has not scored at their version; a row an import queued meanwhile stays). Returns
    whether it did any: False once every release is settled."""
    batch = batch or RELEASE_QUEUE_BATCH
    r = schema.releases
    if not release_queue_unsettled(connection):
        return False
    _hold(connection, ["release"], shared=False)
    unsettled = connection.execute(
        sa.select(r.c.version, r.c.queued_through).where(r.c.queue_settled == sa.false())
        .with_for_update()).all()
    latest = connection.scalar(sa.select(r.c.version)
                               .order_by(r.c.created_at.desc(), r.c.version.desc()).limit(1))
    for row in unsettled:
        if row.version != latest:
            _drop_release_rows(connection, row.version, batch)
            return True
    for row in unsettled:
        _queue_release_rows(connection, row.version, row.queued_through, batch)
    return bool(unsettled)


def release_queue_unsettled(connection: sa.Connection) -> bool:
    """Whether a release's queueing has batches left (the releases table is small)."""
    r = schema.releases
    return connection.scalar(sa.select(r.c.version).where(r.c.queue_settled == sa.false())
                             .limit(1)) is not None


def _drop_release_rows(connection: sa.Connection, release: str, batch: int) -> None:
    """Up to ``batch`` queue rows of a replaced release dropped; settled when none is left."""
    page = sa.select(c.c.trace_id).where(c.c.evaluator == release).limit(batch)
    dropped = connection.execute(c.delete().where(c.c.evaluator == release,
                                                  c.c.trace_id.in_(page))).rowcount
    if dropped < batch:
        r = schema.releases
        connection.execute(r.update().where(r.c.version == release).values(queue_settled=True))


def _queue_release_rows(connection: sa.Connection, release: str, after: str | None,
                        batch: int) -> None:
    """The release's next ``batch`` traces after ``after`` in id order queued; settled past the
    last trace."""
    r, m = schema.releases, schema.scoring_marks
    page = sa.select(t.c.id).order_by(t.c.id).limit(batch)
    if after is not None:
        page = page.where(t.c.id > after)
    ids = page.subquery()
    last = connection.scalar(sa.select(sa.func.max(ids.c.id)))
    if last is None:
        connection.execute(r.update().where(r.c.version == release)
                           .values(queue_settled=True, queued_through=None))
        return
    span = t.c.id <= last if after is None else sa.and_(t.c.id > after, t.c.id <= last)
    connection.execute(insert_ignoring_duplicates(connection, c).from_select(
        ["evaluator", "trace_id", "trace_version", "personal", "queued_at"],
        sa.select(sa.literal(release, sa.String(128)), t.c.id, t.c.version, sa.false(),
                  sa.literal(schema.utcnow(), sa.DateTime(timezone=True)))
        .select_from(t.outerjoin(m, sa.and_(m.c.trace_id == t.c.id, m.c.evaluator == release,
                                            m.c.trace_version == t.c.version)))
        .where(span, m.c.trace_id.is_(None))))
    connection.execute(r.update().where(r.c.version == release).values(queued_through=last))


def queue_model(connection: sa.Connection, model_id: str, owner: str) -> None:
    """A model that just succeeded: when it is among its owner's kept-current models, the owner's
    traces it has not scored are queued for it; the owner's models no longer kept current leave
    the queue."""
    _hold(connection, [f"owner:{owner}"], shared=False)
    kept = kept_current_ids(connection, [owner]).get(owner, [])
    succeeded = sa.select(rm.c.id).where(rm.c.owner == owner, rm.c.status == "succeeded")
    # What a Score again asked for stays until it is scored (queue_score_again).
    connection.execute(c.delete().where(c.c.personal == sa.true(), c.c.evaluator.in_(succeeded),
                                        c.c.evaluator.not_in(kept), c.c.requested == sa.false()))
    if model_id not in kept:
        return
    s = schema.scores
    connection.execute(c.delete().where(c.c.evaluator == model_id, c.c.requested == sa.false()))
    connection.execute(insert_ignoring_duplicates(connection, c).from_select(
        ["evaluator", "trace_id", "trace_version", "personal", "queued_at"],
        sa.select(sa.literal(model_id, sa.String(128)), t.c.id, t.c.version, sa.true(),
                  sa.literal(schema.utcnow(), sa.DateTime(timezone=True)))
        .select_from(t.outerjoin(s, sa.and_(s.c.trace_id == t.c.id, s.c.evaluator == model_id,
                                            s.c.trace_version == t.c.version)))
        .where(t.c.owner == owner, s.c.trace_id.is_(None))))


def queue_score_again(connection: sa.Connection, model_id: str, owner: str) -> int:
    """A Score again of the model over its owner's every trace (`rm score`): each trace queued
    for it at its current version, marked asked for (``requested``), in place of what was queued
    for it; returns how many. Such rows leave the queue only when scored (``done``), whether or
    not the model is kept current: chunks of the scoring queue score them like any other."""
    _hold(connection, [f"owner:{owner}"], shared=False)
    connection.execute(c.delete().where(c.c.evaluator == model_id))
    connection.execute(c.insert().from_select(
        ["evaluator", "trace_id", "trace_version", "personal", "queued_at", "requested"],
        sa.select(sa.literal(model_id, sa.String(128)), t.c.id, t.c.version, sa.true(),
                  sa.literal(schema.utcnow(), sa.DateTime(timezone=True)), sa.true())
        .where(t.c.owner == owner)))
    return count_requested(connection, model_id)


def count_requested(connection: sa.Connection, model_id: str) -> int:
    """The traces a Score again of the model's owner set still has queued (``requested``)."""
    return connection.scalar(sa.select(sa.func.count()).select_from(c).where(
        c.c.evaluator == model_id, c.c.requested == sa.true())) or 0


def done(connection: sa.Connection, evaluator: str, scored: Mapping[str, int], *,
         personal: bool) -> None:
    """Scores of these trace versions are stored: their queue rows go. A row naming a newer
    version (a reimport meanwhile) stays."""
    items = sorted(scored.items())
    for chunk in chunks(items, 400):
        connection.execute(c.delete().where(
            c.c.evaluator == evaluator, c.c.personal == personal,
            sa.tuple_(c.c.trace_id, c.c.trace_version).in_(chunk)))


def pending(connection: sa.Connection, *, personal: bool, limit: int,
            evaluator: str | None = None, besides: Collection[str] = ()) -> list[ScoringWork]:
    """The oldest queued work, ``limit`` rows at most: the personal models' (``personal``) or one
    release's, none of the evaluators ``besides`` (a few). One query through an index, whatever
    the number of models and traces."""
    query = (sa.select(c.c.evaluator, c.c.trace_id, c.c.trace_version)
             .where(c.c.personal == personal))
    if besides:
        query = query.where(c.c.evaluator.not_in(sorted(besides)))
    if evaluator is not None:
        query = query.where(c.c.evaluator == evaluator)
        query = query.order_by(c.c.evaluator, c.c.queued_at, c.c.trace_id)
    else:
        query = query.order_by(c.c.personal, c.c.queued_at, c.c.evaluator, c.c.trace_id)
    return [ScoringWork(*row) for row in connection.execute(query.limit(limit))]


def count_pending(connection: sa.Connection, evaluator: str) -> int:
    return connection.scalar(sa.select(sa.func.count()).select_from(c)
                             .where(c.c.evaluator == evaluator)) or 0


def actions_of(connection: sa.Connection, model_ids: Sequence[str]) -> dict[str, bool]:
    """{model id: whether it scores actions} for those of these models still succeeded."""
    out: dict[str, bool] = {}
    for chunk in chunks(sorted(set(model_ids))):
        for row in connection.execute(sa.select(rm.c.id, rm.c.metrics)
                                      .where(rm.c.id.in_(chunk), rm.c.status == "succeeded")):
            out[row.id] = bool((row.metrics or {}).get("action_scoring_version"))
    return out


def newest_queued_at(connection: sa.Connection) -> datetime | None:
    """When the newest queued work was queued (None with an empty queue)."""
    return connection.scalar(sa.select(sa.func.max(c.c.queued_at)))


def count_queued_until(connection: sa.Connection, at: datetime) -> int:
    """The queued work queued at or before ``at``, through the (personal, queued_at) index."""
    return sum(connection.scalar(sa.select(sa.func.count()).select_from(c).where(
        c.c.personal == personal, c.c.queued_at <= at)) or 0 for personal in (True, False))
