"""labels: notes on jobs and experiments, and their tags (a row per tag)

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-27 07:00:00.000000
"""
from alembic import op
import sqlalchemy as sa


revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('job', schema=None) as batch_op:
        batch_op.add_column(sa.Column('note', sa.String(length=2000), nullable=False,
                                      server_default=''))
    with op.batch_alter_table('experiment', schema=None) as batch_op:
        batch_op.add_column(sa.Column('note', sa.String(length=2000), nullable=False,
                                      server_default=''))
    op.create_table(
        'job_tag',
        sa.Column('job_id', sa.Integer(), sa.ForeignKey('job.id'), primary_key=True),
        sa.Column('tag', sa.String(length=40), primary_key=True),
    )
    op.create_index('ix_job_tag_tag', 'job_tag', ['tag'])
    op.create_table(
        'experiment_tag',
        sa.Column('experiment_id', sa.Integer(), sa.ForeignKey('experiment.id'),
                  primary_key=True),
        sa.Column('tag', sa.String(length=40), primary_key=True),
    )
    op.create_index('ix_experiment_tag_tag', 'experiment_tag', ['tag'])


def downgrade() -> None:
    op.drop_index('ix_experiment_tag_tag', table_name='experiment_tag')
    op.drop_table('experiment_tag')
    op.drop_index('ix_job_tag_tag', table_name='job_tag')
    op.drop_table('job_tag')
    with op.batch_alter_table('experiment', schema=None) as batch_op:
        batch_op.drop_column('note')
    with op.batch_alter_table('job', schema=None) as batch_op:
        batch_op.drop_column('note')
