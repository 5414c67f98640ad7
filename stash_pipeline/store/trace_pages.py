"""One account's trace list a page at a time, sorted and paginated in SQL (the API's GET /traces).

Each line carries the two kinds of score apart, as the seed's trace list does: the newest personal
whole-trace score (``latest_score``, of the owner's own reward models) and the shared evaluator's
mean action credit with the number of actions it scored. Only scores of the trace's current version
count (reimporting clears the old ones anyway).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from stash_pipeline.store import schema

# name -> (column label, descending); every order ends with the trace id, so pages never overlap.
SORTS: dict[str, tuple[str, bool]] = {
    "created": ("created_at", False),
    "-created": ("created_at", True),
    "latest_score": ("latest_score", False),
    "-latest_score": ("latest_score", True),
    "mean_action_credit": ("mean_action_credit", False),
    "-mean_action_credit": ("mean_action_credit", True),
}


@dataclass(frozen=True)
class TraceListItem:
    id: str
    agent: str | None
    domain: str | None
    task_id: str | None
    version: int
    messages: int
    actions: int
    contribute: bool
    created_at: datetime
    updated_at: datetime
    latest_score: float | None  # the newest personal whole-trace score
    latest_score_model_id: str | None  # the reward model that gave it
    mean_action_credit: float | None  # the shared evaluator's, over the current version
    actions_scored: int  # by the shared evaluator


def page_traces(connection: sa.Connection, owner: str, *, shared_evaluator: str | None,
                model_ids: Sequence[str] | None = None, sort: str = "-created",
                limit: int = 50, offset: int = 0) -> tuple[list[TraceListItem], int]:
    """(one page of ``owner``'s traces, how many traces the owner has).

    ``model_ids`` narrows ``latest_score`` to those personal models (default: all of the owner's);
    ``shared_evaluator`` is the release whose action credit is shown (None: no release yet).
    Scores with no value sort last in both directions.
    """
    if sort not in SORTS:
        raise ValueError(f"unknown sort {sort!r}")
    t, s, a, rm = schema.traces, schema.scores, schema.action_scores, schema.reward_models
    personal = sa.select(rm.c.id).where(rm.c.owner == owner)
    if model_ids is not None:
        personal = personal.where(rm.c.id.in_(list(model_ids)))
    ranked = (sa.select(s.c.trace_id, s.c.raw, s.c.evaluator,
                        sa.func.row_number().over(
                            partition_by=s.c.trace_id,
                            order_by=(s.c.created_at.desc(), s.c.evaluator.desc())).label("n"))
              .join(t, sa.and_(t.c.id == s.c.trace_id, t.c.version == s.c.trace_version))
              .where(t.c.owner == owner, s.c.evaluator.in_(personal))
              .subquery())
    credit = (sa.select(a.c.trace_id, sa.func.avg(a.c.credit).label("mean"),
                        sa.func.count().label("n"))
              .join(t, sa.and_(t.c.id == a.c.trace_id, t.c.version == a.c.trace_version))
              .where(t.c.owner == owner, a.c.evaluator == shared_evaluator)
              .group_by(a.c.trace_id).subquery())
    columns = {
        "created_at": t.c.created_at,
        "latest_score": ranked.c.raw,
        "mean_action_credit": credit.c.mean,
    }
    label, descending = SORTS[sort]
    key = columns[label]
    query = (sa.select(t.c.id, t.c.agent, t.c.domain, t.c.task_id, t.c.version,
                       t.c.message_count, t.c.action_count, t.c.contribute, t.c.created_at,
                       t.c.updated_at, ranked.c.raw, ranked.c.evaluator, credit.c.mean,
                       credit.c.n)
             .outerjoin(ranked, sa.and_(ranked.c.trace_id == t.c.id, ranked.c.n == 1))
             .outerjoin(credit, credit.c.trace_id == t.c.id)
             .where(t.c.owner == owner)
             .order_by(sa.case((key.is_(None), 1), else_=0),
                       key.desc() if descending else key.asc(),
                       t.c.id.desc() if descending else t.c.id.asc())
             .limit(limit).offset(offset))
    items = [
        TraceListItem(id=row.id, agent=row.agent, domain=row.domain, task_id=row.task_id,
                      version=row.version, messages=row.message_count, actions=row.action_count,
                      contribute=row.contribute, created_at=row.created_at,
                      updated_at=row.updated_at, latest_score=row.raw,
                      latest_score_model_id=row.evaluator, mean_action_credit=row.mean,
                      actions_scored=row.n or 0)
        for row in connection.execute(query)
    ]
    total = connection.scalar(sa.select(sa.func.count()).select_from(t).where(t.c.owner == owner))
    return items, int(total or 0)


def scored_version(connection: sa.Connection, trace_id: str, evaluator: str) -> int | None:
    """The trace version ``evaluator`` last scored (its scoring mark), or None."""
    m = schema.scoring_marks
    return connection.scalar(sa.select(m.c.trace_version)
                             .where(m.c.trace_id == trace_id, m.c.evaluator == evaluator))


def trace_times(connection: sa.Connection, trace_id: str) -> tuple[datetime, datetime] | None:
    """(created_at, updated_at) of a stored trace."""
    t = schema.traces
    row = connection.execute(sa.select(t.c.created_at, t.c.updated_at)
                             .where(t.c.id == trace_id)).one_or_none()
    return None if row is None else (row.created_at, row.updated_at)
