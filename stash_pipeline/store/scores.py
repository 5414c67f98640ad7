"""Whole-trace scores and action scores, each tagged with its evaluator and the trace version.

Evaluator tags: a shared release's version string, or a personal reward model's id.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import sqlalchemy as sa

from stash_pipeline.store import schema, scoring_work
from stash_pipeline.store.batching import chunks


@dataclass(frozen=True)
class TraceScore:
    trace_id: str
    trace_version: int
    evaluator: str
    raw: float
    calibrated: float | None = None
    input_tokens: int | None = None  # the rendering's tokens before the window cut


@dataclass(frozen=True)
class ActionScore:
    action_id: str
    trace_id: str
    trace_version: int
    evaluator: str
    raw: float
    credit: float | None = None
    input_tokens: int | None = None  # the action's own rendering's tokens before the window cut


def current_versions(connection: sa.Connection, trace_ids: Iterable[str]) -> dict[str, int]:
    t = schema.traces
    versions: dict[str, int] = {}
    for ids in chunks(sorted(set(trace_ids))):
        rows = connection.execute(sa.select(t.c.id, t.c.version).where(t.c.id.in_(ids)))
        versions.update((row.id, row.version) for row in rows)
    return versions


def save_scores(connection: sa.Connection, scores: Sequence[TraceScore]) -> int:
    """Replace each (trace, evaluator) score; scores of a version since replaced are dropped."""
    versions = current_versions(connection, (s.trace_id for s in scores))
    fresh = [s for s in scores if versions.get(s.trace_id) == s.trace_version]
    table = schema.scores
    for evaluator in {s.evaluator for s in fresh}:
        ids = sorted({s.trace_id for s in fresh if s.evaluator == evaluator})
        for chunk in chunks(ids):
            connection.execute(table.delete().where(table.c.evaluator == evaluator,
                                                    table.c.trace_id.in_(chunk)))
    if fresh:
        connection.execute(table.insert(), [vars(s) for s in fresh])
    for evaluator in {s.evaluator for s in fresh}:  # a personal model's queue is its scores
        scoring_work.done(connection, evaluator, {s.trace_id: s.trace_version for s in fresh
                                                  if s.evaluator == evaluator}, personal=True)
    return len(fresh)


def save_untrained_scores(connection: sa.Connection, evaluator: str,
                          scores: Sequence[TraceScore]) -> int:
    """Replace ``evaluator``'s untrained-base scores (one training's); rows of a version since
    replaced are dropped."""
    table = schema.untrained_scores
    connection.execute(table.delete().where(table.c.evaluator == evaluator))
    versions = current_versions(connection, (s.trace_id for s in scores))
    rows = [{"trace_id": s.trace_id, "evaluator": evaluator, "trace_version": s.trace_version,
             "raw": s.raw} for s in scores if versions.get(s.trace_id) == s.trace_version]
    if rows:
        connection.execute(table.insert(), rows)
    return len(rows)


def save_action_scores(connection: sa.Connection, evaluator: str,
                       scored: Mapping[str, int], scores: Sequence[ActionScore]) -> int:
    """Store one scoring run of ``evaluator`` over the traces ``scored`` ({trace id: version}).

    Each trace's previous scores by this evaluator are replaced and the trace is marked scored at
    that version (also when it has no actions). A trace reimported meanwhile is skipped: its new
    version stays pending. Returns the number of action scores stored.
    """
    foreign = [s.action_id for s in scores
               if s.evaluator != evaluator or scored.get(s.trace_id) != s.trace_version]
    if foreign:
        raise ValueError(f"action scores outside this run of {evaluator}: {foreign[:5]}")
    versions = current_versions(connection, scored)
    current = {tid: v for tid, v in scored.items() if versions.get(tid) == v}
    a, m = schema.action_scores, schema.scoring_marks
    ids = sorted(current)
    for chunk in chunks(ids):
        connection.execute(a.delete().where(a.c.evaluator == evaluator, a.c.trace_id.in_(chunk)))
        connection.execute(m.delete().where(m.c.evaluator == evaluator, m.c.trace_id.in_(chunk)))
    fresh = [s for s in scores if s.trace_id in current]
    if fresh:
        connection.execute(a.insert(), [vars(s) for s in fresh])
    if ids:
        connection.execute(m.insert(), [{"trace_id": tid, "evaluator": evaluator,
                                         "trace_version": current[tid]} for tid in ids])
    # The release's queue is its scoring marks.
    scoring_work.done(connection, evaluator, current, personal=False)
    return len(fresh)


def scores_for(connection: sa.Connection, trace_id: str) -> list[TraceScore]:
    """Scores of the trace's current version, newest first."""
    s, t = schema.scores, schema.traces
    query = (sa.select(s.c.trace_id, s.c.trace_version, s.c.evaluator, s.c.raw, s.c.calibrated)
             .join(t, sa.and_(t.c.id == s.c.trace_id, t.c.version == s.c.trace_version))
             .where(s.c.trace_id == trace_id)
             .order_by(s.c.created_at.desc(), s.c.evaluator.desc()))
    return [TraceScore(**row._asdict()) for row in connection.execute(query)]


def action_scores_for(connection: sa.Connection, trace_id: str,
                      evaluator: str | None = None) -> list[ActionScore]:
    """Action scores of the trace's current version, in action order."""
    a, act, t = schema.action_scores, schema.actions, schema.traces
    query = (sa.select(a.c.action_id, a.c.trace_id, a.c.trace_version, a.c.evaluator, a.c.raw,
                       a.c.credit)
             .join(t, sa.and_(t.c.id == a.c.trace_id, t.c.version == a.c.trace_version))
             .join(act, act.c.id == a.c.action_id)
             .where(a.c.trace_id == trace_id)
             .order_by(a.c.evaluator, act.c.message_index,
                       sa.func.coalesce(act.c.call_index, -1)))
    if evaluator is not None:
        query = query.where(a.c.evaluator == evaluator)
    return [ActionScore(**row._asdict()) for row in connection.execute(query)]


def scores_of_evaluator(connection: sa.Connection, evaluator: str) -> list[TraceScore]:
    """One evaluator's scores of current trace versions, highest raw reward first."""
    s, t = schema.scores, schema.traces
    query = (sa.select(s.c.trace_id, s.c.trace_version, s.c.evaluator, s.c.raw, s.c.calibrated)
             .join(t, sa.and_(t.c.id == s.c.trace_id, t.c.version == s.c.trace_version))
             .where(s.c.evaluator == evaluator).order_by(s.c.raw.desc(), s.c.trace_id))
    return [TraceScore(**row._asdict()) for row in connection.execute(query)]
