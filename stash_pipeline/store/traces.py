"""Reading traces back, the trace list, contribution opt-in and the scoring queue."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from stash_pipeline.core.errors import NotFoundError
from stash_pipeline.core.serialize import trace_from_dict
from stash_pipeline.core.traces import Trace
from stash_pipeline.store import schema
from stash_pipeline.store.batching import chunks

t = schema.traces
_TRACE_COLUMNS = (t.c.id, t.c.owner, t.c.agent, t.c.domain, t.c.metadata, t.c.tools,
                  t.c.contribute, t.c.version, t.c.messages)


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


def set_contribute(connection: sa.Connection, trace_id: str, flag: bool, owner: str) -> None:
    """Opt a trace in or out of shared training; another owner's trace is 'not found'."""
    result = connection.execute(t.update().where(t.c.id == trace_id, t.c.owner == owner)
                                .values(contribute=flag))
    if result.rowcount != 1:
        raise NotFoundError(f"no trace {trace_id} owned by {owner}")


def set_contribute_many(connection: sa.Connection, trace_ids: Sequence[str], flag: bool,
                        owner: str) -> int:
    """Opt many of the owner's traces in or out, all or nothing: NotFoundError names every id
    that is not a trace of ``owner`` (another account's included), and nothing changes."""
    wanted = list(dict.fromkeys(trace_ids))
    found: set[str] = set()
    for chunk in chunks(wanted):
        found.update(connection.scalars(sa.select(t.c.id).where(t.c.id.in_(chunk),
                                                               t.c.owner == owner)))
    missing = [i for i in wanted if i not in found]
    if missing:
        shown = ", ".join(missing[:10]) + (f" and {len(missing) - 10} more" if len(missing) > 10
                                           else "")
        raise NotFoundError(f"no trace {shown} owned by {owner}; nothing was changed")
    for chunk in chunks(wanted):
        connection.execute(t.update().where(t.c.id.in_(chunk)).values(contribute=flag))
    return len(wanted)


def traces_pending_scoring(connection: sa.Connection, evaluator: str,
                           limit: int | None = None) -> list[tuple[str, int]]:
    """(trace id, version) of each trace whose current version ``evaluator`` has not scored."""
    m = schema.scoring_marks
    query = (sa.select(t.c.id, t.c.version)
             .outerjoin(m, sa.and_(m.c.trace_id == t.c.id, m.c.evaluator == evaluator))
             .where(sa.or_(m.c.trace_version.is_(None), m.c.trace_version != t.c.version))
             .order_by(t.c.updated_at, t.c.id).limit(limit))
    return [(row.id, row.version) for row in connection.execute(query)]


def owned_versions(connection: sa.Connection, ids: Sequence[str], owner: str) -> dict[str, int]:
    """{trace id: current version} of those of ``ids`` that ``owner`` has."""
    versions: dict[str, int] = {}
    for chunk in chunks(list(dict.fromkeys(ids))):
        versions.update((row.id, row.version) for row in connection.execute(
            sa.select(t.c.id, t.c.version).where(t.c.id.in_(chunk), t.c.owner == owner)))
    return versions
