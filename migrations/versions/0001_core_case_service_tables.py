"""Core case service tables: cases, timeline, outbox, idempotency, plans, approvals, fences.

Revision ID: 0001
Revises: (none)
Create Date: 2026-11-23 03:49:12.124814
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('idempotency',
    sa.Column('key', sa.String(length=200), nullable=False),
    sa.Column('fingerprint', sa.String(length=64), nullable=False),
    sa.Column('status', sa.SmallInteger(), nullable=False),
    sa.Column('body', sa.Text(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    sa.PrimaryKeyConstraint('key', name=op.f('pk_idempotency'))
    )
    op.create_table('ops_case',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('tenant', sa.String(length=64), nullable=False),
    sa.Column('title', sa.String(length=200), nullable=False),
    sa.Column('severity', sa.String(length=16), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('version', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_ops_case'))
    )
    with op.batch_alter_table('ops_case', schema=None) as batch_op:
        batch_op.create_index('ix_ops_case_status', ['status'], unique=False)

    op.create_table('outbox',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('topic', sa.String(length=64), nullable=False),
    sa.Column('key', sa.String(length=128), nullable=False),
    sa.Column('payload', sa.JSON().with_variant(postgresql.JSONB(), 'postgresql'), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    sa.Column('published_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('attempts', sa.Integer(), server_default='0', nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_outbox'))
    )
    with op.batch_alter_table('outbox', schema=None) as batch_op:
        batch_op.create_index('ix_outbox_unpublished', ['id'], unique=False, postgresql_where=sa.text('published_at IS NULL'), sqlite_where=sa.text('published_at IS NULL'))

    op.create_table('session_fence',
    sa.Column('session_id', sa.String(length=200), nullable=False),
    sa.Column('token', sa.BigInteger(), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    sa.PrimaryKeyConstraint('session_id', name=op.f('pk_session_fence'))
    )
    op.create_table('case_timeline',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('case_id', sa.Uuid(), nullable=False),
    sa.Column('event', sa.String(length=64), nullable=False),
    sa.Column('actor', sa.String(length=128), nullable=False),
    sa.Column('reason', sa.Text(), nullable=True),
    sa.Column('correlation_id', sa.String(length=128), nullable=True),
    sa.Column('meta', sa.JSON().with_variant(postgresql.JSONB(), 'postgresql'), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    sa.ForeignKeyConstraint(['case_id'], ['ops_case.id'], name=op.f('fk_case_timeline_case_id_ops_case')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_case_timeline'))
    )
    with op.batch_alter_table('case_timeline', schema=None) as batch_op:
        batch_op.create_index('ix_case_timeline_case_id', ['case_id', 'id'], unique=False)

    op.create_table('plan_proposed',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('case_id', sa.Uuid(), nullable=False),
    sa.Column('case_version', sa.Integer(), nullable=False),
    sa.Column('plan_hash', sa.String(length=64), nullable=False),
    sa.Column('plan', sa.JSON().with_variant(postgresql.JSONB(), 'postgresql'), nullable=False),
    sa.Column('proposed_by', sa.String(length=128), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    sa.ForeignKeyConstraint(['case_id'], ['ops_case.id'], name=op.f('fk_plan_proposed_case_id_ops_case')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_plan_proposed'))
    )
    with op.batch_alter_table('plan_proposed', schema=None) as batch_op:
        batch_op.create_index('ix_plan_proposed_case_id', ['case_id', 'case_version'], unique=False)

    op.create_table('plan_approved',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('case_id', sa.Uuid(), nullable=False),
    sa.Column('plan_id', sa.Uuid(), nullable=False),
    sa.Column('plan_hash', sa.String(length=64), nullable=False),
    sa.Column('decision', sa.JSON().with_variant(postgresql.JSONB(), 'postgresql'), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    sa.ForeignKeyConstraint(['case_id'], ['ops_case.id'], name=op.f('fk_plan_approved_case_id_ops_case')),
    sa.ForeignKeyConstraint(['plan_id'], ['plan_proposed.id'], name=op.f('fk_plan_approved_plan_id_plan_proposed')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_plan_approved'))
    )
    with op.batch_alter_table('plan_approved', schema=None) as batch_op:
        batch_op.create_index('ix_plan_approved_case_id', ['case_id'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('plan_approved', schema=None) as batch_op:
        batch_op.drop_index('ix_plan_approved_case_id')

    op.drop_table('plan_approved')
    with op.batch_alter_table('plan_proposed', schema=None) as batch_op:
        batch_op.drop_index('ix_plan_proposed_case_id')

    op.drop_table('plan_proposed')
    with op.batch_alter_table('case_timeline', schema=None) as batch_op:
        batch_op.drop_index('ix_case_timeline_case_id')

    op.drop_table('case_timeline')
    op.drop_table('session_fence')
    with op.batch_alter_table('outbox', schema=None) as batch_op:
        batch_op.drop_index('ix_outbox_unpublished', postgresql_where=sa.text('published_at IS NULL'), sqlite_where=sa.text('published_at IS NULL'))

    op.drop_table('outbox')
    with op.batch_alter_table('ops_case', schema=None) as batch_op:
        batch_op.drop_index('ix_ops_case_status')

    op.drop_table('ops_case')
    op.drop_table('idempotency')
