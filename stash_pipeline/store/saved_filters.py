"""Searches of the trace list kept under a name, one account's own. Ids are random UUIDs
(core.record_ids); a filter saved before 0012 is named by its integer id too."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from stash_pipeline.core.errors import InputError, NotFoundError
from stash_pipeline.store import schema
from stash_pipeline.store.batching import dialect_insert

f = schema.saved_filters
MAX_SAVED_FILTERS = 200  # an account's


@dataclass(frozen=True)
class SavedFilter:
    id: str  # a UUID
    owner: str
    name: str
    params: dict[str, str]  # core.trace_search.filter_params
    created_at: datetime


def _record(row: sa.Row) -> SavedFilter:
    return SavedFilter(id=row.id, owner=row.owner, name=row.name, params=dict(row.params),
                       created_at=row.created_at)


def save_filter(connection: sa.Connection, owner: str, name: str,
                params: dict[str, str]) -> SavedFilter:
    """Keep ``params`` under ``name``; saving a name again replaces its search."""
    count = connection.scalar(sa.select(sa.func.count()).where(f.c.owner == owner,
                                                                f.c.name != name))
    if count >= MAX_SAVED_FILTERS:
        raise InputError(f"an account keeps at most {MAX_SAVED_FILTERS} saved filters; "
                         "remove one first", field="name")
    statement = dialect_insert(connection, f).values(owner=owner, name=name, params=params,
                                 created_at=schema.utcnow())
    connection.execute(statement.on_conflict_do_update(
        index_elements=["owner", "name"], set_={"params": statement.excluded.params}))
    return _record(connection.execute(sa.select(f).where(f.c.owner == owner, f.c.name == name))
                   .one())


def saved_filters(connection: sa.Connection, owner: str) -> list[SavedFilter]:
    return [_record(row) for row in connection.execute(
        sa.select(f).where(f.c.owner == owner).order_by(f.c.name))]


def _named(filter_id: str | int) -> sa.ColumnElement[bool]:
    """The filter of this id: its UUID, or its integer id before 0012 (core.record_ids)."""
    return (f.c.legacy_id if isinstance(filter_id, int) else f.c.id) == filter_id


def saved_filter(connection: sa.Connection, owner: str, *, name: str | None = None,
                 filter_id: str | int | None = None) -> SavedFilter:
    """The owner's saved filter by name or id; NotFoundError otherwise (another account's too)."""
    query = sa.select(f).where(f.c.owner == owner)
    query = query.where(f.c.name == name) if name is not None else query.where(_named(filter_id))
    row = connection.execute(query).one_or_none()
    if row is None:
        raise NotFoundError(f"no saved filter {name if name is not None else filter_id}")
    return _record(row)


def remove_filter(connection: sa.Connection, owner: str, filter_id: str | int) -> None:
    if connection.execute(f.delete().where(f.c.owner == owner, _named(filter_id))
                          ).rowcount != 1:
        raise NotFoundError(f"no saved filter {filter_id}")
