"""Ids that reveal nothing: Score again requests and saved filters get random UUIDs instead of
global sequential integers (any account could count the others' requests). Each existing record
gets a UUID and keeps its integer as ``legacy_id``, by which it is still found (URLs, the API, a
scoring run's key and tag). The request sensor reads requests by (created at, id) through an index.

Revision ID: 0012_uuid_ids
Revises: 0011_sensor_indexes
"""
from __future__ import annotations

import uuid

import sqlalchemy as sa
from alembic import op

revision = "0012_uuid_ids"
down_revision = "0011_sensor_indexes"
branch_labels = None
depends_on = None

TABLES = ("scoring_requests", "saved_filters")
UUID_TEXT = sa.String(36)
INDEX = "ix_scoring_requests_created_at"


def upgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("uuid", UUID_TEXT))
            batch.add_column(sa.Column("legacy_id", sa.Integer))
        _number(table)
        with op.batch_alter_table(table) as batch:
            batch.drop_column("id")  # and its primary key
            batch.alter_column("uuid", new_column_name="id", existing_type=UUID_TEXT,
                               nullable=False)
        with op.batch_alter_table(table) as batch:  # SQLite: not in the batch that renames it
            batch.create_primary_key(op.f(f"pk_{table}"), ["id"])
            batch.create_unique_constraint(op.f(f"uq_{table}_legacy_id"), ["legacy_id"])
    op.create_index(INDEX, "scoring_requests", ["created_at", "id"])


def _number(table: str) -> None:
    """Each row: a random UUID, and its integer id kept as its legacy id."""
    t = sa.table(table, sa.column("id"), sa.column("uuid"), sa.column("legacy_id"))
    connection = op.get_bind()
    ids = connection.execute(sa.select(t.c.id)).scalars().all()
    if ids:
        connection.execute(
            t.update().where(t.c.id == sa.bindparam("old"))
            .values(uuid=sa.bindparam("new"), legacy_id=sa.bindparam("old")),
            [{"old": old, "new": str(uuid.uuid4())} for old in ids])


def downgrade() -> None:
    """Integer ids again: a record's legacy id, or (made since 0012) the next ones, oldest
    first."""
    op.drop_index(INDEX, table_name="scoring_requests")
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("number", sa.Integer))
        _renumber(table)
        with op.batch_alter_table(table) as batch:
            batch.drop_column("legacy_id")  # and its unique constraint
            batch.drop_column("id")  # and its primary key
            batch.alter_column("number", new_column_name="id", existing_type=sa.Integer,
                               nullable=False)
        with op.batch_alter_table(table) as batch:
            batch.create_primary_key(op.f(f"pk_{table}"), ["id"])
        if op.get_bind().dialect.name == "postgresql":  # SERIAL again, past the largest id
            op.execute(f"CREATE SEQUENCE {table}_id_seq OWNED BY {table}.id")
            op.execute(f"ALTER TABLE {table} ALTER COLUMN id "
                       f"SET DEFAULT nextval('{table}_id_seq')")
            op.execute(f"SELECT setval('{table}_id_seq', (SELECT max(id) FROM {table}))")


def _renumber(table: str) -> None:
    t = sa.table(table, sa.column("id"), sa.column("legacy_id"), sa.column("number"),
                 sa.column("created_at"))
    connection = op.get_bind()
    connection.execute(t.update().values(number=t.c.legacy_id))
    last = connection.scalar(sa.select(sa.func.max(t.c.legacy_id))) or 0
    since = connection.execute(sa.select(t.c.id).where(t.c.legacy_id.is_(None))
                               .order_by(t.c.created_at, t.c.id)).scalars().all()
    if since:
        connection.execute(t.update().where(t.c.id == sa.bindparam("key"))
                           .values(number=sa.bindparam("n")),
                           [{"key": key, "n": last + 1 + i} for i, key in enumerate(since)])
