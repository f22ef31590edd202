"""text samples: the text a language model generated at its latest evaluation

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-28 10:00:00.000000
"""
from alembic import op
import sqlalchemy as sa
import sqlmodel


revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('job', schema=None) as batch_op:
        batch_op.add_column(sa.Column('sample_text', sqlmodel.sql.sqltypes.AutoString(), nullable=False,
                                      server_default=''))
        batch_op.add_column(sa.Column('sample_iteration', sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('job', schema=None) as batch_op:
        batch_op.drop_column('sample_iteration')
        batch_op.drop_column('sample_text')
