"""The trace list, sorted and paginated in SQL: the CLI's `traces list` and the API's GET /traces.

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

from stash_pipeline.core.feedback import SUCCESS_REWARD
from stash_pipeline.core.trace_search import STATES, TraceFilter
from stash_pipeline.store import schema

__all__ = ["SORTS", "STATES", "TraceFilter", "TraceSummary", "count_traces", "list_traces",
           "matching_trace_ids", "trace_conditions"]

# name -> (column label, descending); every order ends with the trace id, so pages never overlap.
SORTS: dict[str, tuple[str, bool]] = {
    "created": ("created_at", False),
    "-created": ("created_at", True),
    "latest_score": ("latest_score", False),
    "-latest_score": ("latest_score", True),
    "mean_action_credit": ("mean_action_credit", False),
    "-mean_action_credit": ("mean_action_credit", True),
    "actions_scored": ("actions_scored", False),
    "-actions_scored": ("actions_scored", True),
    "scoring_state": ("scoring_state", False),
    "-scoring_state": ("scoring_state", True),
    "outcome": ("outcome", False),
    "-outcome": ("outcome", True),
}


@dataclass(frozen=True)
class TraceSummary:
    """One line of the trace list (the CLI's `traces list`, the API's GET /traces)."""

    id: str
    owner: str
    agent: str | None
    domain: str | None
    task_id: str | None
    version: int
    messages: int
    actions: int
    contribute: bool
    created_at: datetime
    updated_at: datetime
    latest_score: float | None  # the newest personal whole-trace score (the owner's own models)
    latest_score_model_id: str | None  # the reward model that gave it
    mean_action_credit: float | None  # the shared evaluator's, over the current version
    actions_scored: int  # by the shared evaluator
    # The shared evaluator's queue: "waiting" (no release yet), "pending" (the release has not
    # scored this version), "scored".
    scoring_state: str
    # The owner's newest succeeded personal model (or the one asked for) and whether it has scored
    # this version: "pending" until auto-scoring has, then "scored"; None without such a model.
    personal_model_id: str | None = None
    personal_state: str | None = None
    outcome: float | None = None  # the mean reward of its verified outcomes, if any
    preview: str | None = None  # the first user message (core.trace_search.trace_preview)
    min_action_credit: float | None = None  # the shared evaluator's lowest, over the version


def list_traces(connection: sa.Connection, owner: str | None, *, shared_evaluator: str | None,
                model_ids: Sequence[str] | None = None, sort: str = "created",
                limit: int | None = None, offset: int = 0,
                where: TraceFilter | None = None) -> list[TraceSummary]:
    """The trace list, sorted and paginated in SQL: one account's (or everyone's, owner None).

    ``model_ids`` narrows ``latest_score`` to those personal models (default: all of the trace
    owner's); ``shared_evaluator`` is the release whose action credit and queue state are shown
    (None: no release yet). Scores with no value sort last in both directions. ``where`` narrows
    the list (``count_traces`` with the same filter counts it).
    """
    if sort not in SORTS:
        raise ValueError(f"unknown sort {sort!r}")
    t, s, a, rm = schema.traces, schema.scores, schema.action_scores, schema.reward_models
    m, o = schema.scoring_marks, schema.verified_outcomes
    # One account's page ranks and averages that account's scores only, not every account's.
    owned = () if owner is None else (t.c.owner == owner,)
    marks = (sa.select(m.c.trace_id, m.c.trace_version)
             .where(m.c.evaluator == shared_evaluator).subquery())
    # Personal scores: any evaluator but a shared release (a model scores only its owner's traces).
    personal = s.c.evaluator.not_in(sa.select(schema.releases.c.version))
    if model_ids is not None:
        personal = sa.and_(personal, s.c.evaluator.in_(
            sa.select(rm.c.id).where(rm.c.id.in_(list(model_ids)), rm.c.owner == t.c.owner)))
    # The newest personal score of the trace's current version, looked up for each trace
    # through the scores' primary key (a window over every score, joined back, made SQLite scan
    # the whole result once for every trace).
    newest = (sa.select(s.c.raw, s.c.evaluator)
              .where(s.c.trace_id == t.c.id, s.c.trace_version == t.c.version, personal)
              .order_by(s.c.created_at.desc(), s.c.evaluator.desc()).limit(1))
    latest_raw = newest.with_only_columns(s.c.raw).scalar_subquery()
    latest_model = newest.with_only_columns(s.c.evaluator).scalar_subquery()
    # Each trace's credit and outcome by subqueries correlated to it, read through indexes (the
    # release's range of (evaluator, trace_id, trace_version, credit), the outcomes' trace id):
    # aggregated subqueries joined to the traces let PostgreSQL, before its statistics of a fresh
    # import, aggregate again for every trace.

    def credit(value: sa.ColumnElement) -> sa.ScalarSelect:
        return (sa.select(value).where(a.c.evaluator == shared_evaluator, a.c.trace_id == t.c.id,
                                       a.c.trace_version == t.c.version).scalar_subquery())

    mean, lowest = credit(sa.func.avg(a.c.credit)), credit(sa.func.min(a.c.credit))
    scored_actions = credit(sa.func.nullif(sa.func.count(), 0))  # none: NULL, sorted last
    # The personal model whose state is shown: the one asked for, else the owner's newest.
    chosen = sa.select(rm.c.owner, rm.c.id, sa.func.row_number().over(
        partition_by=rm.c.owner, order_by=(rm.c.finished_at.desc(), rm.c.id.desc())).label("n")
    ).where(rm.c.status == "succeeded")
    if model_ids is not None:
        chosen = chosen.where(rm.c.id.in_(list(model_ids)))
    chosen = chosen.subquery()
    chosen = sa.select(chosen.c.owner, chosen.c.id).where(chosen.c.n == 1).subquery()
    mine = s.alias("mine")
    outcome = sa.select(sa.func.avg(o.c.reward)).where(o.c.trace_id == t.c.id).scalar_subquery()
    columns = {"created_at": t.c.created_at, "latest_score": latest_raw,
               "mean_action_credit": mean, "actions_scored": scored_actions,
               "scoring_state": _state_rank(shared_evaluator, marks, t),
               "outcome": outcome}
    label, descending = SORTS[sort]
    key = columns[label]
    query = (sa.select(t.c.id, t.c.owner, t.c.agent, t.c.domain, t.c.task_id, t.c.version,
                       t.c.message_count, t.c.action_count, t.c.contribute, t.c.created_at,
                       t.c.updated_at, t.c.preview, latest_raw.label("raw"),
                       latest_model.label("evaluator"),
                       mean.label("mean"), lowest.label("lowest"),
                       scored_actions.label("n"),
                       marks.c.trace_version.label("scored_version"),
                       outcome.label("outcome"),
                       chosen.c.id.label("personal_model_id"),
                       mine.c.trace_id.label("personal_scored"))
             .outerjoin(chosen, chosen.c.owner == t.c.owner)
             .outerjoin(mine, sa.and_(mine.c.trace_id == t.c.id,
                                      mine.c.evaluator == chosen.c.id,
                                      mine.c.trace_version == t.c.version))
             .outerjoin(marks, marks.c.trace_id == t.c.id)
             .order_by(sa.case((key.is_(None), 1), else_=0),
                       key.desc() if descending else key.asc(),
                       t.c.id.desc() if descending else t.c.id.asc())
             .limit(limit).offset(offset))
    query = query.where(*owned, *trace_conditions(where, t, shared_evaluator))
    return [
        TraceSummary(id=row.id, owner=row.owner, agent=row.agent, domain=row.domain,
                     task_id=row.task_id, version=row.version, messages=row.message_count,
                     actions=row.action_count, contribute=row.contribute,
                     created_at=row.created_at, updated_at=row.updated_at,
                     latest_score=row.raw, latest_score_model_id=row.evaluator,
                     mean_action_credit=row.mean, actions_scored=row.n or 0,
                     scoring_state=scoring_state(shared_evaluator, row.scored_version,
                                                 row.version),
                     personal_model_id=row.personal_model_id,
                     personal_state=None if row.personal_model_id is None
                     else "scored" if row.personal_scored is not None else "pending",
                     outcome=row.outcome, preview=row.preview,
                     min_action_credit=row.lowest)
        for row in connection.execute(query)
    ]


def _state_rank(evaluator: str | None, marks: sa.Subquery, t: sa.Table) -> sa.ColumnElement:
    """waiting < pending < scored, as a number SQL can sort by."""
    if evaluator is None:
        return sa.literal(0)
    return sa.case((marks.c.trace_version == t.c.version, 2), else_=1)


def trace_conditions(where: TraceFilter | None, t: sa.Table | sa.Alias,
                     release: str | None) -> list[sa.ColumnElement[bool]]:
    """``where`` as conditions on ``t`` (the traces table or an alias of it), each a column test
    or a subquery correlated to ``t``'s row, so any query over traces can take them; ``release``
    is the shared evaluator whose scoring state and mean action credit they read."""
    if where is None:
        return []
    if where.state is not None and where.state not in STATES:
        raise ValueError(f"unknown scoring state {where.state!r}")
    a, o, m, s = schema.actions, schema.verified_outcomes, schema.scoring_marks, \
        schema.action_scores
    found: list[sa.ColumnElement[bool]] = []
    for column, value in ((t.c.agent, where.agent), (t.c.domain, where.domain),
                          (t.c.task_id, where.task_id)):
        if value is not None:
            found.append(column == value)
    if where.trace_ids is not None:
        found.append(t.c.id.in_(list(where.trace_ids)))
    if where.text is not None:
        found.append(t.c.search_text.contains(where.text, autoescape=True))
    if where.tool is not None:  # IN, not EXISTS: read through the (tool_name, trace_id) index once
        found.append(t.c.id.in_(sa.select(a.c.trace_id).where(a.c.tool_name == where.tool)))
    if where.created_from is not None:
        found.append(t.c.created_at >= where.created_from)
    if where.created_to is not None:
        found.append(t.c.created_at < where.created_to)
    if where.outcome is not None:
        any_outcome = sa.exists().where(o.c.trace_id == t.c.id)
        a_failure = sa.exists().where(o.c.trace_id == t.c.id, o.c.reward < SUCCESS_REWARD)
        found.append({"succeeded": sa.and_(any_outcome, ~a_failure), "failed": a_failure,
                      "none": ~any_outcome}[where.outcome])
    if where.state is not None:
        scored = sa.exists().where(m.c.trace_id == t.c.id, m.c.evaluator == release,
                                   m.c.trace_version == t.c.version)
        found.append(sa.literal(where.state == "waiting") if release is None
                     else {"waiting": sa.false(), "pending": ~scored,
                           "scored": scored}[where.state])
    if where.credit_min is not None or where.credit_max is not None:
        mean = (sa.select(sa.func.avg(s.c.credit))
                .where(s.c.trace_id == t.c.id, s.c.evaluator == release,
                       s.c.trace_version == t.c.version).scalar_subquery())
        if where.credit_min is not None:
            found.append(mean >= where.credit_min)
        if where.credit_max is not None:
            found.append(mean <= where.credit_max)
    return found


def count_traces(connection: sa.Connection, owner: str, *, where: TraceFilter | None = None,
                 shared_evaluator: str | None = None) -> int:
    t = schema.traces
    query = (sa.select(sa.func.count()).select_from(t)
             .where(t.c.owner == owner, *trace_conditions(where, t, shared_evaluator)))
    return int(connection.scalar(query) or 0)


def matching_trace_ids(connection: sa.Connection, owner: str, *, where: TraceFilter | None,
                       shared_evaluator: str | None, limit: int | None = None) -> list[str]:
    """The ids of the owner's traces that match ``where``, oldest first: a bulk action's "all
    that match" (ids only: no trace is read)."""
    t = schema.traces
    return list(connection.scalars(
        sa.select(t.c.id).where(t.c.owner == owner,
                                *trace_conditions(where, t, shared_evaluator))
        .order_by(t.c.created_at, t.c.id).limit(limit)))


def facets(connection: sa.Connection, owner: str) -> dict[str, list[str]]:
    """The owner's distinct agents, domains and tools, for the filter menus (200 of each)."""
    t, a = schema.traces, schema.actions
    found = {name: [v for v in connection.scalars(
                 sa.select(column).where(t.c.owner == owner, column.is_not(None))
                 .distinct().order_by(column).limit(FACET_LIMIT))]
             for name, column in (("agent", t.c.agent), ("domain", t.c.domain))}
    found["tool"] = list(connection.scalars(
        sa.select(a.c.tool_name).join(t, t.c.id == a.c.trace_id)
        .where(t.c.owner == owner, a.c.tool_name.is_not(None))
        .distinct().order_by(a.c.tool_name).limit(FACET_LIMIT)))
    return found


FACET_LIMIT = 200


def scoring_state(evaluator: str | None, scored_version: int | None, version: int) -> str:
    """A trace's place in the shared evaluator's queue: waiting (no release), pending, scored."""
    if evaluator is None:
        return "waiting"
    return "scored" if scored_version == version else "pending"


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
