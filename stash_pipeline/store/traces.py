"""Reading traces back, the trace list, contribution opt-in and the scoring queue."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa

from stash_pipeline.core.errors import NotFoundError
from stash_pipeline.core.serialize import trace_from_dict
from stash_pipeline.core.traces import Trace
from stash_pipeline.store import schema
from stash_pipeline.store.batching import chunks

t = schema.traces
_TRACE_COLUMNS = (t.c.id, t.c.owner, t.c.agent, t.c.domain, t.c.metadata, t.c.tools,
                  t.c.contribute, t.c.version, t.c.messages)


@dataclass(frozen=True)
class TraceSummary:
    """One line of the trace list."""

    id: str
    owner: str
    agent: str | None
    domain: str | None
    task_id: str | None
    version: int
    messages: int
    actions: int
    contribute: bool
    latest_score: float | None  # the newest whole-trace score of the current version
    mean_action_credit: float | None  # of the shared evaluator, over the current version
    actions_scored: int
    # The shared evaluator's queue: "waiting" (no release yet), "pending" (the current release has
    # not scored this version), "scored".
    scoring_state: str = "waiting"


SCORING_STATES = ("waiting", "pending", "scored")


def get_traces(connection: sa.Connection, ids: Sequence[str]) -> list[Trace]:
    """The traces in the order asked; NotFoundError names every id that is not stored."""
    wanted = list(dict.fromkeys(ids))
    found: dict[str, Trace] = {}
    for chunk in chunks(wanted):
        for row in connection.execute(sa.select(*_TRACE_COLUMNS).where(t.c.id.in_(chunk))):
            found[row.id] = trace_from_dict(row._asdict())
    missing = [i for i in wanted if i not in found]
    if missing:
        raise NotFoundError(f"no trace {', '.join(missing)}")
    return [found[i] for i in ids]


def trace_ids(connection: sa.Connection, owner: str | None = None,
              contribute: bool | None = None) -> list[str]:
    query = sa.select(t.c.id).order_by(t.c.id)
    if owner is not None:
        query = query.where(t.c.owner == owner)
    if contribute is not None:
        query = query.where(t.c.contribute == contribute)
    return list(connection.scalars(query))


def list_traces(connection: sa.Connection, owner: str | None = None,
                action_evaluator: str | None = None) -> list[TraceSummary]:
    """The trace list; action credit is ``action_evaluator``'s, else the latest release's."""
    if action_evaluator is None:
        r = schema.releases
        action_evaluator = connection.scalar(
            sa.select(r.c.version).order_by(r.c.created_at.desc(), r.c.version.desc()).limit(1))
    s, a, m = schema.scores, schema.action_scores, schema.scoring_marks
    newest = (sa.select(s.c.trace_id, s.c.raw,
                        sa.func.row_number().over(partition_by=s.c.trace_id,
                                                  order_by=(s.c.created_at.desc(),
                                                            s.c.evaluator.desc())).label("n"))
              .join(t, sa.and_(t.c.id == s.c.trace_id, t.c.version == s.c.trace_version))
              .subquery())
    credit = (sa.select(a.c.trace_id, sa.func.avg(a.c.credit).label("mean"),
                        sa.func.count().label("n"))
              .join(t, sa.and_(t.c.id == a.c.trace_id, t.c.version == a.c.trace_version))
              .where(a.c.evaluator == action_evaluator)
              .group_by(a.c.trace_id).subquery())
    query = (sa.select(t.c.id, t.c.owner, t.c.agent, t.c.domain, t.c.task_id, t.c.version,
                       t.c.message_count, t.c.action_count, t.c.contribute,
                       newest.c.raw, credit.c.mean, credit.c.n,
                       m.c.trace_version.label("scored_version"))
             .outerjoin(newest, sa.and_(newest.c.trace_id == t.c.id, newest.c.n == 1))
             .outerjoin(credit, credit.c.trace_id == t.c.id)
             .outerjoin(m, sa.and_(m.c.trace_id == t.c.id, m.c.evaluator == action_evaluator))
             .order_by(t.c.created_at, t.c.id))
    if owner is not None:
        query = query.where(t.c.owner == owner)
    return [
        TraceSummary(id=row.id, owner=row.owner, agent=row.agent, domain=row.domain,
                     task_id=row.task_id, version=row.version, messages=row.message_count,
                     actions=row.action_count, contribute=row.contribute, latest_score=row.raw,
                     mean_action_credit=row.mean, actions_scored=row.n or 0,
                     scoring_state=scoring_state(action_evaluator, row.scored_version,
                                                  row.version))
        for row in connection.execute(query)
    ]


def scoring_state(evaluator: str | None, scored_version: int | None, version: int) -> str:
    """A trace's place in the shared evaluator's queue: waiting (no release), pending, scored."""
    if evaluator is None:
        return "waiting"
    return "scored" if scored_version == version else "pending"


def set_contribute(connection: sa.Connection, trace_id: str, flag: bool, owner: str) -> None:
    """Opt a trace in or out of shared training; another owner's trace is 'not found'."""
    result = connection.execute(t.update().where(t.c.id == trace_id, t.c.owner == owner)
                                .values(contribute=flag))
    if result.rowcount != 1:
        raise NotFoundError(f"no trace {trace_id} owned by {owner}")


def traces_pending_scoring(connection: sa.Connection, evaluator: str,
                           limit: int | None = None) -> list[tuple[str, int]]:
    """(trace id, version) of each trace whose current version ``evaluator`` has not scored."""
    m = schema.scoring_marks
    query = (sa.select(t.c.id, t.c.version)
             .outerjoin(m, sa.and_(m.c.trace_id == t.c.id, m.c.evaluator == evaluator))
             .where(sa.or_(m.c.trace_version.is_(None), m.c.trace_version != t.c.version))
             .order_by(t.c.updated_at, t.c.id).limit(limit))
    return [(row.id, row.version) for row in connection.execute(query)]
