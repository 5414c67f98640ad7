"""Sensors that scale: the scoring queue (scoring_candidates), the times models are queued and
asked to Score again, and the retirement of model partitions, each read through an index.

Revision ID: 0011_sensor_indexes
Revises: 0010_trust_reports
"""
from __future__ import annotations

import os
from datetime import datetime, timezone

import sqlalchemy as sa
from alembic import op

revision = "0011_sensor_indexes"
down_revision = "0010_trust_reports"
branch_labels = None
depends_on = None

NOW = sa.func.current_timestamp()


def upgrade() -> None:
    op.create_table(
        "scoring_candidates",
        sa.Column("evaluator", sa.String(128), nullable=False),
        sa.Column("trace_id", sa.String(64), nullable=False),
        sa.Column("trace_version", sa.Integer, nullable=False),
        sa.Column("personal", sa.Boolean, nullable=False),
        sa.Column("queued_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.ForeignKeyConstraint(["trace_id"], ["traces.id"],
                                name=op.f("fk_scoring_candidates_trace_id_traces")),
        sa.PrimaryKeyConstraint("evaluator", "trace_id", name=op.f("pk_scoring_candidates")),
    )
    op.create_index("ix_scoring_candidates_personal_queued_at", "scoring_candidates",
                    ["personal", "queued_at", "evaluator", "trace_id"])
    op.create_index("ix_scoring_candidates_evaluator_queued_at", "scoring_candidates",
                    ["evaluator", "queued_at", "trace_id"])
    op.create_index("ix_scoring_candidates_trace_id", "scoring_candidates", ["trace_id"])
    with op.batch_alter_table("reward_models") as batch:
        batch.add_column(sa.Column("queued_at", sa.DateTime(timezone=True)))
        batch.add_column(sa.Column("score_requested_at", sa.DateTime(timezone=True)))
        batch.add_column(sa.Column("partition_retired_at", sa.DateTime(timezone=True)))
    op.create_index("ix_reward_models_status_queued_at", "reward_models",
                    ["status", "queued_at", "id"])
    op.create_index("ix_reward_models_score_requested_at", "reward_models",
                    ["score_requested_at", "id"])
    op.create_index("ix_reward_models_partition_retired_at", "reward_models",
                    ["partition_retired_at", "finished_at", "id"])
    _queue_pending_work()


def _queue_pending_work() -> None:
    """What was pending before the queue existed: each trace version the latest release or a
    kept-current model has not scored. A model's Score again requests so far keep their run keys,
    so the request sensor, starting from no cursor, asks for none of them twice."""
    connection = op.get_bind()
    now = datetime.now(timezone.utc)
    t = sa.table("traces", sa.column("id"), sa.column("owner"), sa.column("version"))
    m = sa.table("scoring_marks", sa.column("trace_id"), sa.column("evaluator"),
                 sa.column("trace_version"))
    s = sa.table("scores", sa.column("trace_id"), sa.column("evaluator"),
                 sa.column("trace_version"))
    r = sa.table("releases", sa.column("version"), sa.column("created_at"))
    rm = sa.table("reward_models", sa.column("id"), sa.column("owner"), sa.column("status"),
                  sa.column("finished_at"), sa.column("score_generation"),
                  sa.column("score_requested_at"), sa.column("created_at"),
                  sa.column("queued_at"))
    c = sa.table("scoring_candidates", sa.column("evaluator"), sa.column("trace_id"),
                 sa.column("trace_version"), sa.column("personal"), sa.column("queued_at"))
    columns = ["evaluator", "trace_id", "trace_version", "personal", "queued_at"]
    stamp = sa.literal(now, sa.DateTime(timezone=True))
    release = connection.scalar(sa.select(r.c.version)
                                .order_by(r.c.created_at.desc(), r.c.version.desc()).limit(1))
    if release is not None:
        connection.execute(c.insert().from_select(columns, sa.select(
            sa.literal(release, sa.String(128)), t.c.id, t.c.version, sa.false(), stamp)
            .select_from(t.outerjoin(m, sa.and_(m.c.trace_id == t.c.id,
                                                m.c.evaluator == release,
                                                m.c.trace_version == t.c.version)))
            .where(m.c.trace_id.is_(None))))
    per_owner = int(os.environ.get("STASH_PERSONAL_SCORING_MODELS") or 3)
    ranked = (sa.select(rm.c.id, rm.c.owner, sa.func.row_number().over(
        partition_by=rm.c.owner, order_by=(rm.c.finished_at.desc(), rm.c.id.desc())).label("n"))
        .where(rm.c.status == "succeeded").subquery())
    kept = sa.select(ranked.c.id, ranked.c.owner).where(ranked.c.n <= per_owner).subquery()
    connection.execute(c.insert().from_select(columns, sa.select(
        kept.c.id, t.c.id, t.c.version, sa.true(), stamp)
        .select_from(kept.join(t, t.c.owner == kept.c.owner)
                     .outerjoin(s, sa.and_(s.c.trace_id == t.c.id, s.c.evaluator == kept.c.id,
                                           s.c.trace_version == t.c.version)))
        .where(s.c.trace_id.is_(None))))
    connection.execute(rm.update().where(rm.c.score_generation > 0)
                       .values(score_requested_at=rm.c.created_at))
    connection.execute(rm.update().values(queued_at=rm.c.created_at))


def downgrade() -> None:
    for name in ("ix_reward_models_partition_retired_at", "ix_reward_models_score_requested_at",
                 "ix_reward_models_status_queued_at"):
        op.drop_index(name, table_name="reward_models")
    with op.batch_alter_table("reward_models") as batch:
        batch.drop_column("partition_retired_at")
        batch.drop_column("score_requested_at")
        batch.drop_column("queued_at")
    op.drop_index("ix_scoring_candidates_trace_id", table_name="scoring_candidates")
    op.drop_index("ix_scoring_candidates_evaluator_queued_at", table_name="scoring_candidates")
    op.drop_index("ix_scoring_candidates_personal_queued_at", table_name="scoring_candidates")
    op.drop_table("scoring_candidates")
