"""Accounts: who owns traces and reward models."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from stash_pipeline.core.errors import InputError, NotFoundError
from stash_pipeline.store import schema
from stash_pipeline.store.batching import insert_ignoring_duplicates


@dataclass(frozen=True)
class Account:
    id: str
    api_key_hash: str | None
    reward_models_enabled: bool
    created_at: datetime
    name: str | None = None
    session_epoch: int = 0  # the viewer's sessions issued under another epoch are over


def ensure_accounts(connection: sa.Connection, ids: Iterable[str]) -> None:
    """Create the accounts that do not exist yet (new accounts get reward models).

    An upsert (INSERT ... ON CONFLICT DO NOTHING), so two first imports of one owner at once
    both succeed: a select-then-insert let the slower one fail on the primary key.
    """
    rows = [{"id": i, "reward_models_enabled": True} for i in sorted(set(ids))]
    if rows:
        connection.execute(insert_ignoring_duplicates(connection, schema.accounts), rows)


def create_account(connection: sa.Connection, account_id: str, *, api_key_hash: str | None = None,
                   reward_models_enabled: bool = True, name: str | None = None) -> Account:
    a = schema.accounts
    if connection.scalar(sa.select(a.c.id).where(a.c.id == account_id)) is not None:
        raise InputError(f"account {account_id} already exists", field="id")
    connection.execute(a.insert().values(
        id=account_id, name=name, api_key_hash=api_key_hash,
        reward_models_enabled=reward_models_enabled))
    return get_account(connection, account_id)


def list_accounts(connection: sa.Connection) -> list[Account]:
    a = schema.accounts
    return [Account(**row._asdict())
            for row in connection.execute(sa.select(a).order_by(a.c.created_at, a.c.id))]


def set_api_key_hash(connection: sa.Connection, account_id: str, api_key_hash: str) -> None:
    """Replace the account's key (the old key stops working at once)."""
    a = schema.accounts
    result = connection.execute(a.update().where(a.c.id == account_id)
                                .values(api_key_hash=api_key_hash))
    if result.rowcount != 1:
        raise NotFoundError(f"account {account_id} does not exist")


def end_sessions(connection: sa.Connection, account_id: str) -> None:
    """Every viewer session of the account issued so far stops working (Log out)."""
    a = schema.accounts
    connection.execute(a.update().where(a.c.id == account_id)
                       .values(session_epoch=a.c.session_epoch + 1))


def get_account(connection: sa.Connection, account_id: str) -> Account:
    a = schema.accounts
    row = connection.execute(sa.select(a).where(a.c.id == account_id)).one_or_none()
    if row is None:
        raise NotFoundError(f"account {account_id} does not exist")
    return Account(**row._asdict())


def account_by_key_hash(connection: sa.Connection, api_key_hash: str) -> Account | None:
    a = schema.accounts
    row = connection.execute(sa.select(a).where(a.c.api_key_hash == api_key_hash)).one_or_none()
    return None if row is None else Account(**row._asdict())
