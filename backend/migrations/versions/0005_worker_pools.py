"""worker pools: pools seen, per-pool tenant quotas, job requirements

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23 16:00:00.000000
"""
from alembic import op
import sqlalchemy as sa
import sqlmodel


revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('worker_pool',
    sa.Column('name', sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
    sa.Column('cores', sa.Integer(), nullable=False, server_default='0'),
    sa.Column('memory_mb', sa.Integer(), nullable=False, server_default='0'),
    sa.Column('gpu', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=True),
    sa.Column('gpu_memory_mb', sa.Integer(), nullable=False, server_default='0'),
    sa.Column('reserved_for', sa.JSON(), nullable=False, server_default='[]'),
    sa.Column('first_seen', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.Column('last_seen', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.PrimaryKeyConstraint('name')
    )
    with op.batch_alter_table('tenant', schema=None) as batch_op:
        batch_op.add_column(sa.Column('pool_slots', sa.JSON(), nullable=False, server_default='{}'))
    with op.batch_alter_table('job', schema=None) as batch_op:
        batch_op.add_column(sa.Column('requirements', sa.JSON(), nullable=False, server_default='{}'))
        batch_op.add_column(sa.Column('pool', sqlmodel.sql.sqltypes.AutoString(length=40), nullable=True))
    with op.batch_alter_table('decision', schema=None) as batch_op:
        batch_op.add_column(sa.Column('pool', sqlmodel.sql.sqltypes.AutoString(length=40), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('decision', schema=None) as batch_op:
        batch_op.drop_column('pool')
    with op.batch_alter_table('job', schema=None) as batch_op:
        batch_op.drop_column('pool')
        batch_op.drop_column('requirements')
    with op.batch_alter_table('tenant', schema=None) as batch_op:
        batch_op.drop_column('pool_slots')
    op.drop_table('worker_pool')
