"""residency: per-job counters of resident and restored chunks, saves, switch cost

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-27 03:30:00.000000
"""
from alembic import op
import sqlalchemy as sa


revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('job', schema=None) as batch_op:
        batch_op.add_column(sa.Column('restores', sa.Integer(), nullable=False, server_default='0'))
        batch_op.add_column(sa.Column('resident_chunks', sa.Integer(), nullable=False,
                                      server_default='0'))
        batch_op.add_column(sa.Column('checkpoints_saved', sa.Integer(), nullable=False,
                                      server_default='0'))
        batch_op.add_column(sa.Column('switch_seconds', sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('job', schema=None) as batch_op:
        batch_op.drop_column('switch_seconds')
        batch_op.drop_column('checkpoints_saved')
        batch_op.drop_column('resident_chunks')
        batch_op.drop_column('restores')
