"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-22 17:06:47.136334
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op


revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('api_keys',
    sa.Column('id', sa.String(length=32), nullable=False),
    sa.Column('submitter', sa.String(length=100), nullable=False),
    sa.Column('prefix', sa.String(length=16), nullable=False),
    sa.Column('key_hash', sa.String(length=64), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('revoked_at', sa.DateTime(), nullable=True),
    sa.Column('bucket_tokens', sa.Float(), nullable=True),
    sa.Column('bucket_updated_at', sa.DateTime(), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('key_hash')
    )
    with op.batch_alter_table('api_keys', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_api_keys_submitter'), ['submitter'], unique=False)

    op.create_table('submissions',
    sa.Column('id', sa.String(length=32), nullable=False),
    sa.Column('task_id', sa.String(length=64), nullable=False),
    sa.Column('source', sa.Text(), nullable=False),
    sa.Column('source_sha256', sa.String(length=64), nullable=False),
    sa.Column('api_key_id', sa.String(length=32), nullable=False),
    sa.Column('submitter', sa.String(length=100), nullable=False),
    sa.Column('idempotency_key', sa.String(length=200), nullable=True),
    sa.Column('model', sa.String(length=200), nullable=True),
    sa.Column('sample_index', sa.Integer(), nullable=True),
    sa.Column('sampling', sa.JSON(), nullable=False),
    sa.Column('tags', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.ForeignKeyConstraint(['api_key_id'], ['api_keys.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('api_key_id', 'idempotency_key', name='uq_submissions_idempotency')
    )
    with op.batch_alter_table('submissions', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_submissions_model'), ['model'], unique=False)
        batch_op.create_index(batch_op.f('ix_submissions_source_sha256'), ['source_sha256'], unique=False)
        batch_op.create_index(batch_op.f('ix_submissions_task_id'), ['task_id'], unique=False)

    op.create_table('jobs',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('submission_id', sa.String(length=32), nullable=False),
    sa.Column('task_id', sa.String(length=64), nullable=False),
    sa.Column('state', sa.Enum('queued', 'compiling', 'compiled', 'running', 'done', name='jobstate', native_enum=False, length=32), nullable=False),
    sa.Column('not_before', sa.DateTime(), nullable=False),
    sa.Column('worker_id', sa.String(length=200), nullable=True),
    sa.Column('claim_token', sa.String(length=32), nullable=True),
    sa.Column('lease_expires_at', sa.DateTime(), nullable=True),
    sa.Column('heartbeat_at', sa.DateTime(), nullable=True),
    sa.Column('claims', sa.Integer(), nullable=False),
    sa.Column('crashes', sa.Integer(), nullable=False),
    sa.Column('system_errors', sa.Integer(), nullable=False),
    sa.Column('last_error', sa.Text(), nullable=True),
    sa.Column('build_key', sa.String(length=64), nullable=True),
    sa.Column('compile_cached', sa.Boolean(), nullable=True),
    sa.Column('queued_at', sa.DateTime(), nullable=False),
    sa.Column('compile_started_at', sa.DateTime(), nullable=True),
    sa.Column('compiled_at', sa.DateTime(), nullable=True),
    sa.Column('run_started_at', sa.DateTime(), nullable=True),
    sa.Column('finished_at', sa.DateTime(), nullable=True),
    sa.ForeignKeyConstraint(['submission_id'], ['submissions.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('submission_id')
    )
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.create_index('ix_jobs_claim', ['state', 'not_before', 'id'], unique=False)
        batch_op.create_index(batch_op.f('ix_jobs_lease_expires_at'), ['lease_expires_at'], unique=False)

    op.create_table('verdicts',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('submission_id', sa.String(length=32), nullable=False),
    sa.Column('task_id', sa.String(length=64), nullable=False),
    sa.Column('status', sa.Enum('compile_error', 'runtime_error', 'timeout', 'incorrect', 'policy_violation', 'tamper_detected', 'correct', 'system_error', name='status', native_enum=False, length=32), nullable=False),
    sa.Column('diagnosis', sa.Text(), nullable=False),
    sa.Column('device', sa.String(length=32), nullable=True),
    sa.Column('device_name', sa.String(length=200), nullable=True),
    sa.Column('median_ms', sa.Float(), nullable=True),
    sa.Column('speedup_eager', sa.Float(), nullable=True),
    sa.Column('speedup_compile', sa.Float(), nullable=True),
    sa.Column('speed_of_light', sa.Float(), nullable=True),
    sa.Column('worker_id', sa.String(length=200), nullable=True),
    sa.Column('verdict', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.ForeignKeyConstraint(['submission_id'], ['submissions.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('submission_id')
    )
    with op.batch_alter_table('verdicts', schema=None) as batch_op:
        batch_op.create_index('ix_verdicts_board', ['task_id', 'status', 'device_name'], unique=False)

    op.create_table('job_attempts',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('job_id', sa.Integer(), nullable=False),
    sa.Column('claim_token', sa.String(length=32), nullable=False),
    sa.Column('worker_id', sa.String(length=200), nullable=False),
    sa.Column('started_at', sa.DateTime(), nullable=False),
    sa.Column('ended_at', sa.DateTime(), nullable=True),
    sa.Column('outcome', sa.String(length=32), nullable=True),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('claim_token')
    )
    with op.batch_alter_table('job_attempts', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_job_attempts_job_id'), ['job_id'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('job_attempts', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_job_attempts_job_id'))

    op.drop_table('job_attempts')
    with op.batch_alter_table('verdicts', schema=None) as batch_op:
        batch_op.drop_index('ix_verdicts_board')

    op.drop_table('verdicts')
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_jobs_lease_expires_at'))
        batch_op.drop_index('ix_jobs_claim')

    op.drop_table('jobs')
    with op.batch_alter_table('submissions', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_submissions_task_id'))
        batch_op.drop_index(batch_op.f('ix_submissions_source_sha256'))
        batch_op.drop_index(batch_op.f('ix_submissions_model'))

    op.drop_table('submissions')
    with op.batch_alter_table('api_keys', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_api_keys_submitter'))

    op.drop_table('api_keys')
