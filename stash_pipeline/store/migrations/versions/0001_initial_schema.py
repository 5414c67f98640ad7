"""Initial schema: every table of DESIGN §3 (traces, actions, feedback, reward models, pairs,
scores, action scores, releases, benchmark comparisons, accounts, scoring marks).

Revision ID: 0001
Revises: (none)
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('accounts',
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('api_key_hash', sa.String(length=128), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.current_timestamp(),
              nullable=False),
    sa.Column('reward_models_enabled', sa.Boolean(), server_default=sa.true(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_accounts')),
    sa.UniqueConstraint('api_key_hash', name=op.f('uq_accounts_api_key_hash'))
    )
    op.create_table('benchmark_comparisons',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('candidate', sa.String(length=128), nullable=False),
    sa.Column('incumbent', sa.String(length=128), nullable=True),
    sa.Column('passed', sa.Boolean(), nullable=False),
    sa.Column('report', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.current_timestamp(),
              nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_benchmark_comparisons'))
    )
    with op.batch_alter_table('benchmark_comparisons', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_benchmark_comparisons_candidate'), ['candidate'],
                              unique=False)

    op.create_table('releases',
    sa.Column('version', sa.String(length=128), nullable=False),
    sa.Column('checkpoint_uri', sa.String(length=1024), nullable=False),
    sa.Column('benchmark_report', sa.JSON(), nullable=False),
    sa.Column('data_snapshot', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.current_timestamp(),
              nullable=False),
    sa.PrimaryKeyConstraint('version', name=op.f('pk_releases'))
    )
    op.create_table('reward_models',
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('owner', sa.String(length=64), nullable=False),
    sa.Column('name', sa.String(length=256), nullable=False),
    sa.Column('trace_ids', sa.JSON(), nullable=False),
    sa.Column('base_model', sa.String(length=512), nullable=False),
    sa.Column('epochs', sa.Integer(), nullable=False),
    sa.Column('max_pairs', sa.Integer(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('metrics', sa.JSON(), nullable=True),
    sa.Column('checkpoint_uri', sa.String(length=1024), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.current_timestamp(),
              nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['owner'], ['accounts.id'],
                            name=op.f('fk_reward_models_owner_accounts')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_reward_models'))
    )
    with op.batch_alter_table('reward_models', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_reward_models_owner'), ['owner'], unique=False)
        batch_op.create_index(batch_op.f('ix_reward_models_status'), ['status'], unique=False)

    op.create_table('traces',
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('owner', sa.String(length=64), nullable=False),
    sa.Column('agent', sa.String(length=256), nullable=True),
    sa.Column('domain', sa.String(length=256), nullable=True),
    sa.Column('task_id', sa.String(length=256), nullable=True),
    sa.Column('metadata', sa.JSON(), nullable=False),
    sa.Column('tools', sa.JSON(), nullable=False),
    sa.Column('messages', sa.JSON(), nullable=False),
    sa.Column('message_count', sa.Integer(), nullable=False),
    sa.Column('action_count', sa.Integer(), nullable=False),
    sa.Column('contribute', sa.Boolean(), server_default=sa.false(), nullable=False),
    sa.Column('version', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.current_timestamp(),
              nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), server_default=sa.func.current_timestamp(),
              nullable=False),
    sa.ForeignKeyConstraint(['owner'], ['accounts.id'], name=op.f('fk_traces_owner_accounts')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_traces'))
    )
    with op.batch_alter_table('traces', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_traces_owner'), ['owner'], unique=False)
        batch_op.create_index(batch_op.f('ix_traces_task_id'), ['task_id'], unique=False)

    op.create_table('action_scores',
    sa.Column('action_id', sa.String(length=160), nullable=False),
    sa.Column('evaluator', sa.String(length=128), nullable=False),
    sa.Column('trace_id', sa.String(length=64), nullable=False),
    sa.Column('trace_version', sa.Integer(), nullable=False),
    sa.Column('raw', sa.Float(), nullable=False),
    sa.Column('credit', sa.Float(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.current_timestamp(),
              nullable=False),
    sa.ForeignKeyConstraint(['trace_id'], ['traces.id'],
                            name=op.f('fk_action_scores_trace_id_traces')),
    sa.PrimaryKeyConstraint('action_id', 'evaluator', name=op.f('pk_action_scores'))
    )
    with op.batch_alter_table('action_scores', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_action_scores_trace_id'), ['trace_id'], unique=False)

    op.create_table('actions',
    sa.Column('id', sa.String(length=160), nullable=False),
    sa.Column('trace_id', sa.String(length=64), nullable=False),
    sa.Column('message_index', sa.Integer(), nullable=False),
    sa.Column('call_index', sa.Integer(), nullable=True),
    sa.Column('tool_name', sa.String(length=256), nullable=True),
    sa.ForeignKeyConstraint(['trace_id'], ['traces.id'], name=op.f('fk_actions_trace_id_traces')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_actions'))
    )
    with op.batch_alter_table('actions', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_actions_trace_id'), ['trace_id'], unique=False)

    op.create_table('comments',
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('trace_id', sa.String(length=64), nullable=False),
    sa.Column('action_id', sa.String(length=160), nullable=True),
    sa.Column('text', sa.Text(), nullable=False),
    sa.Column('author', sa.String(length=256), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.current_timestamp(),
              nullable=False),
    sa.ForeignKeyConstraint(['trace_id'], ['traces.id'], name=op.f('fk_comments_trace_id_traces')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_comments'))
    )
    with op.batch_alter_table('comments', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_comments_trace_id'), ['trace_id'], unique=False)

    op.create_table('pairs',
    sa.Column('row_id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('reward_model_id', sa.String(length=64), nullable=True),
    sa.Column('candidate', sa.String(length=128), nullable=True),
    sa.Column('position', sa.Integer(), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('source_kind', sa.String(length=32), nullable=False),
    sa.Column('source_id', sa.String(length=256), nullable=False),
    sa.Column('source_trace_ids', sa.JSON(), nullable=False),
    sa.Column('is_tool_call', sa.Boolean(), nullable=False),
    sa.Column('tool_name', sa.String(length=256), nullable=True),
    sa.Column('evidence_quote', sa.Text(), nullable=True),
    sa.Column('rationale', sa.Text(), nullable=True),
    sa.Column('slices', sa.JSON(), nullable=False),
    sa.Column('generated', sa.Boolean(), nullable=False),
    sa.Column('chosen', sa.JSON(), nullable=False),
    sa.Column('rejected', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.current_timestamp(),
              nullable=False),
    sa.CheckConstraint('(reward_model_id IS NULL) <> (candidate IS NULL)',
                       name=op.f('ck_pairs_one_user')),
    sa.ForeignKeyConstraint(['reward_model_id'], ['reward_models.id'],
                            name=op.f('fk_pairs_reward_model_id_reward_models')),
    sa.PrimaryKeyConstraint('row_id', name=op.f('pk_pairs'))
    )
    with op.batch_alter_table('pairs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_pairs_candidate'), ['candidate'], unique=False)
        batch_op.create_index(batch_op.f('ix_pairs_reward_model_id'), ['reward_model_id'],
                              unique=False)

    op.create_table('ratings',
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('trace_id', sa.String(length=64), nullable=False),
    sa.Column('action_id', sa.String(length=160), nullable=True),
    sa.Column('value', sa.Float(), nullable=False),
    sa.Column('author', sa.String(length=256), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.current_timestamp(),
              nullable=False),
    sa.ForeignKeyConstraint(['trace_id'], ['traces.id'], name=op.f('fk_ratings_trace_id_traces')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_ratings'))
    )
    with op.batch_alter_table('ratings', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_ratings_trace_id'), ['trace_id'], unique=False)

    op.create_table('reviewed_comparisons',
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('chosen_trace_id', sa.String(length=64), nullable=False),
    sa.Column('rejected_trace_id', sa.String(length=64), nullable=False),
    sa.Column('chosen_action_id', sa.String(length=160), nullable=True),
    sa.Column('rejected_action_id', sa.String(length=160), nullable=True),
    sa.Column('reviewer', sa.String(length=256), nullable=True),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('rationale', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.current_timestamp(),
              nullable=False),
    sa.ForeignKeyConstraint(['chosen_trace_id'], ['traces.id'],
                            name=op.f('fk_reviewed_comparisons_chosen_trace_id_traces')),
    sa.ForeignKeyConstraint(['rejected_trace_id'], ['traces.id'],
                            name=op.f('fk_reviewed_comparisons_rejected_trace_id_traces')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_reviewed_comparisons'))
    )
    with op.batch_alter_table('reviewed_comparisons', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_reviewed_comparisons_chosen_trace_id'),
                              ['chosen_trace_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_reviewed_comparisons_rejected_trace_id'),
                              ['rejected_trace_id'], unique=False)

    op.create_table('scores',
    sa.Column('trace_id', sa.String(length=64), nullable=False),
    sa.Column('evaluator', sa.String(length=128), nullable=False),
    sa.Column('trace_version', sa.Integer(), nullable=False),
    sa.Column('raw', sa.Float(), nullable=False),
    sa.Column('calibrated', sa.Float(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.current_timestamp(),
              nullable=False),
    sa.ForeignKeyConstraint(['trace_id'], ['traces.id'], name=op.f('fk_scores_trace_id_traces')),
    sa.PrimaryKeyConstraint('trace_id', 'evaluator', name=op.f('pk_scores'))
    )
    op.create_table('scoring_marks',
    sa.Column('trace_id', sa.String(length=64), nullable=False),
    sa.Column('evaluator', sa.String(length=128), nullable=False),
    sa.Column('trace_version', sa.Integer(), nullable=False),
    sa.Column('scored_at', sa.DateTime(timezone=True), server_default=sa.func.current_timestamp(),
              nullable=False),
    sa.ForeignKeyConstraint(['trace_id'], ['traces.id'],
                            name=op.f('fk_scoring_marks_trace_id_traces')),
    sa.PrimaryKeyConstraint('trace_id', 'evaluator', name=op.f('pk_scoring_marks'))
    )
    op.create_table('verified_outcomes',
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('trace_id', sa.String(length=64), nullable=False),
    sa.Column('reward', sa.Float(), nullable=False),
    sa.Column('source', sa.String(length=256), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.current_timestamp(),
              nullable=False),
    sa.ForeignKeyConstraint(['trace_id'], ['traces.id'],
                            name=op.f('fk_verified_outcomes_trace_id_traces')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_verified_outcomes'))
    )
    with op.batch_alter_table('verified_outcomes', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_verified_outcomes_trace_id'), ['trace_id'],
                              unique=False)



def downgrade() -> None:
    with op.batch_alter_table('verified_outcomes', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_verified_outcomes_trace_id'))

    op.drop_table('verified_outcomes')
    op.drop_table('scoring_marks')
    op.drop_table('scores')
    with op.batch_alter_table('reviewed_comparisons', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_reviewed_comparisons_rejected_trace_id'))
        batch_op.drop_index(batch_op.f('ix_reviewed_comparisons_chosen_trace_id'))

    op.drop_table('reviewed_comparisons')
    with op.batch_alter_table('ratings', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_ratings_trace_id'))

    op.drop_table('ratings')
    with op.batch_alter_table('pairs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_pairs_reward_model_id'))
        batch_op.drop_index(batch_op.f('ix_pairs_candidate'))

    op.drop_table('pairs')
    with op.batch_alter_table('comments', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_comments_trace_id'))

    op.drop_table('comments')
    with op.batch_alter_table('actions', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_actions_trace_id'))

    op.drop_table('actions')
    with op.batch_alter_table('action_scores', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_action_scores_trace_id'))

    op.drop_table('action_scores')
    with op.batch_alter_table('traces', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_traces_task_id'))
        batch_op.drop_index(batch_op.f('ix_traces_owner'))

    op.drop_table('traces')
    with op.batch_alter_table('reward_models', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_reward_models_status'))
        batch_op.drop_index(batch_op.f('ix_reward_models_owner'))

    op.drop_table('reward_models')
    op.drop_table('releases')
    with op.batch_alter_table('benchmark_comparisons', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_benchmark_comparisons_candidate'))

    op.drop_table('benchmark_comparisons')
    op.drop_table('accounts')
