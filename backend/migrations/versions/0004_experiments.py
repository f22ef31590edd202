"""experiments: sweeps of jobs, and jobs stopped early by their rule

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23 08:55:00.000000
"""
from alembic import op
import sqlalchemy as sa
import sqlmodel


revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('experiment',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('tenant_id', sa.Integer(), nullable=False),
    sa.Column('user_id', sa.Integer(), nullable=False),
    sa.Column('name', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False, server_default=''),
    sa.Column('spec', sa.JSON(), nullable=False, server_default='{}'),
    sa.Column('created_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenant.id'], ),
    sa.ForeignKeyConstraint(['user_id'], ['user.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('experiment', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_experiment_tenant_id'), ['tenant_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_experiment_user_id'), ['user_id'], unique=False)

    with op.batch_alter_table('job', schema=None) as batch_op:
        batch_op.add_column(sa.Column('experiment_id', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('stopped_early', sa.Boolean(), nullable=False, server_default=sa.false()))
        batch_op.create_index(batch_op.f('ix_job_experiment_id'), ['experiment_id'], unique=False)
        batch_op.create_foreign_key('fk_job_experiment_id', 'experiment', ['experiment_id'], ['id'])


def downgrade() -> None:
    with op.batch_alter_table('job', schema=None) as batch_op:
        batch_op.drop_constraint('fk_job_experiment_id', type_='foreignkey')
        batch_op.drop_index(batch_op.f('ix_job_experiment_id'))
        batch_op.drop_column('stopped_early')
        batch_op.drop_column('experiment_id')

    with op.batch_alter_table('experiment', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_experiment_user_id'))
        batch_op.drop_index(batch_op.f('ix_experiment_tenant_id'))

    op.drop_table('experiment')
