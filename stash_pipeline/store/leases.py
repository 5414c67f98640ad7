"""Leases on the worker's steps: the one process that works a step of a run holds its lease, and
renews it while it works; a second start of the step finds it held by a live process, or finished,
and does nothing. Whether a holder lives is the caller's to say (defs.step_leases: the process on
this host, else a renewal within the lease's time)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa

from stash_pipeline.store import schema
from stash_pipeline.store.batching import insert_ignoring_duplicates

sl = schema.step_leases
# Finished leases are kept this long (a late second start still finds the step done), then go.
KEEP_FINISHED = timedelta(days=7)


@dataclass(frozen=True)
class Lease:
    name: str
    run_id: str
    holder: str
    acquired_at: datetime
    renewed_at: datetime
    finished_at: datetime | None


def get_lease(connection: sa.Connection, name: str) -> Lease | None:
    row = connection.execute(sa.select(sl).where(sl.c.name == name)).one_or_none()
    return None if row is None else Lease(**row._asdict())


def take(connection: sa.Connection, name: str, run_id: str, holder: str,
         alive: Callable[[Lease], bool], *, reuse_finished: bool = False) -> Lease | None:
    """The lease taken by ``holder``: None when taken (new, or from a holder that is no longer
    ``alive``, or finished with ``reuse_finished``: a worker slot), else the lease that stands
    in the way (a live holder's, or a finished one: a step done)."""
    now = schema.utcnow()
    connection.execute(sl.delete().where(sl.c.finished_at < now - KEEP_FINISHED))
    connection.execute(insert_ignoring_duplicates(connection, sl).values(
        name=name, run_id=run_id, holder=holder, acquired_at=now, renewed_at=now))
    row = connection.execute(sa.select(sl).where(sl.c.name == name).with_for_update()).one()
    lease = Lease(**row._asdict())
    if lease.holder == holder and lease.finished_at is None:
        return None
    if lease.finished_at is None and alive(lease):
        return lease
    if lease.finished_at is not None and not reuse_finished:
        return lease
    connection.execute(sl.update().where(sl.c.name == name, sl.c.holder == lease.holder)
                       .values(holder=holder, run_id=run_id, acquired_at=now, renewed_at=now,
                               finished_at=None))
    return None


def renew(connection: sa.Connection, name: str, holder: str) -> bool:
    """The holder still works: False when the lease is no longer its own."""
    return connection.execute(sl.update().where(
        sl.c.name == name, sl.c.holder == holder, sl.c.finished_at.is_(None))
        .values(renewed_at=schema.utcnow())).rowcount == 1


def finish(connection: sa.Connection, name: str, holder: str) -> None:
    """The holder's work on the step is over (done or failed): the step is not started again."""
    connection.execute(sl.update().where(sl.c.name == name, sl.c.holder == holder)
                       .values(finished_at=schema.utcnow()))


def live_leases(connection: sa.Connection, run_id: str) -> list[Lease]:
    """The run's unfinished leases (the caller judges whether their holders live)."""
    return [Lease(**row._asdict()) for row in connection.execute(
        sa.select(sl).where(sl.c.run_id == run_id, sl.c.finished_at.is_(None)))]
