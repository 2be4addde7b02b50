"""Tool gateway: the tool call ledger (durable truth of every side effect) and session run locks.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23 04:05:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('tool_call_ledger',
    sa.Column('key', sa.String(length=128), nullable=False),
    sa.Column('tool', sa.String(length=128), nullable=False),
    sa.Column('args_hash', sa.String(length=64), nullable=False),
    sa.Column('args', sa.JSON().with_variant(postgresql.JSONB(), 'postgresql'), nullable=False),
    sa.Column('actor', sa.String(length=128), nullable=False),
    sa.Column('session_id', sa.String(length=200), nullable=False),
    sa.Column('fence', sa.BigInteger(), nullable=True),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('result', sa.JSON().with_variant(postgresql.JSONB(), 'postgresql'), nullable=True),
    sa.Column('error', sa.JSON().with_variant(postgresql.JSONB(), 'postgresql'), nullable=True),
    sa.Column('owner', sa.String(length=64), nullable=True),
    sa.Column('lease_until', sa.DateTime(timezone=True), nullable=True),
    sa.Column('attempts', sa.Integer(), server_default='1', nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('key', name=op.f('pk_tool_call_ledger'))
    )
    with op.batch_alter_table('tool_call_ledger', schema=None) as batch_op:
        batch_op.create_index('ix_tool_call_ledger_state', ['state', 'lease_until'], unique=False)
        batch_op.create_index('ix_tool_call_ledger_session_id', ['session_id'], unique=False)

    op.create_table('session_lock',
    sa.Column('session_id', sa.String(length=200), nullable=False),
    sa.Column('owner', sa.String(length=64), nullable=False),
    sa.Column('lease_until', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('session_id', name=op.f('pk_session_lock'))
    )


def downgrade() -> None:
    op.drop_table('session_lock')
    with op.batch_alter_table('tool_call_ledger', schema=None) as batch_op:
        batch_op.drop_index('ix_tool_call_ledger_session_id')
        batch_op.drop_index('ix_tool_call_ledger_state')

    op.drop_table('tool_call_ledger')
