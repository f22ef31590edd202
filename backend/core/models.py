"""Database tables: the source of truth for tenants, users, jobs, losses and
scheduling decisions. API shapes live in :mod:`backend.schemas`, so internal
fields (hashes, scheduler bookkeeping) never leak by accident."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, ClassVar

from sqlalchemy import JSON, Column, Index, UniqueConstraint
from sqlmodel import Field, SQLModel

from backend.core.file_refs import CODE, UPLOAD, FileRef


def utcnow() -> datetime:
    return datetime.now(UTC)


def as_utc(moment: datetime) -> datetime:
    """SQLite hands back naive datetimes; every stored time is UTC."""
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


NOTE_MAX = 2000
"""Longest free-text note on a job or an experiment, in characters."""
TAG_MAX = 40
"""Longest tag, in characters."""


class Role(StrEnum):
    member = "member"
    tenant_admin = "tenant_admin"
    platform_admin = "platform_admin"


class JobStatus(StrEnum):
    queued = "queued"  # runnable, waiting for a slot
    running = "running"  # a chunk is in flight
    paused = "paused"
    completed = "completed"
    failed = "failed"
    cancelled = "cancelled"


FINISHED = (JobStatus.completed, JobStatus.failed, JobStatus.cancelled)


class Tenant(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(index=True, unique=True, max_length=64)
    created_at: datetime = Field(default_factory=utcnow)
    max_slots: int = 4
    max_active_jobs: int = 50
    max_queued_jobs: int = 200
    max_iterations_per_job: int = 100_000
    share_weight: float = 1.0
    # Uploaded trainer code runs sandboxed, but a sandbox is not a guarantee:
    # platform admins opt tenants in (see deploy/PRODUCTION.md).
    allow_code_uploads: bool = False
    pool_slots: dict[str, int] = Field(default_factory=dict,
                                       sa_column=Column(JSON, nullable=False))
    """Slots the tenant may hold at once in a named worker pool (e.g. {"gpu": 1});
    a pool not named is limited only by ``max_slots``."""


class User(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int = Field(foreign_key="tenant.id", index=True)
    email: str = Field(index=True, unique=True, max_length=254)
    password_hash: str
    role: str = Field(default=Role.member)
    created_at: datetime = Field(default_factory=utcnow)
    is_active: bool = True


class ApiToken(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    user_id: int = Field(foreign_key="user.id", index=True)
    name: str = Field(max_length=100)
    token_hash: str = Field(index=True, unique=True)
    prefix: str = Field(max_length=16)
    created_at: datetime = Field(default_factory=utcnow)
    expires_at: datetime | None = None
    revoked_at: datetime | None = None
    last_used_at: datetime | None = None


class Job(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int = Field(foreign_key="tenant.id", index=True)
    user_id: int = Field(foreign_key="user.id", index=True)
    name: str = Field(default="", max_length=200)
    algorithm: str
    dataset: str
    params: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    dataset_params: dict[str, Any] = Field(
        default_factory=dict, sa_column=Column(JSON, nullable=False)
    )
    seed: int = 0
    max_iterations: int
    target_loss: float | None = None
    tolerance: float | None = None
    convergence_window: int = 10
    status: str = Field(default=JobStatus.queued, index=True)
    created_at: datetime = Field(default_factory=utcnow)
    started_at: datetime | None = None
    finished_at: datetime | None = None
    waiting_since: datetime = Field(default_factory=utcnow)
    iterations_done: int = 0
    checkpoint_iteration: int = 0
    chunk_seq: int = 0
    chunks_run: int = 0
    attained_seconds: float = 0.0
    initial_loss: float | None = None
    current_loss: float | None = None
    best_loss: float | None = None
    end_reason: str | None = None
    error: str | None = None
    last_reason: str | None = None
    predicted_gain: float | None = None
    eval_every: int = 50
    """Run the trainer's held-out evaluation every this many iterations (0: never)."""
    quality_metric: str = Field(default="loss", max_length=64)
    """The metric the scheduler's quality signal and the stopping rules follow."""
    last_eval: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    trainer_output: str = ""
    """The end of a sandboxed trainer's stdout/stderr (bounded), shown with the job."""
    experiment_id: int | None = Field(default=None, foreign_key="experiment.id", index=True)
    """The experiment (sweep) this job is one configuration of, if any."""
    stopped_early: bool = False
    """Paused by its experiment's early-stopping rule (``end_reason`` says why).
    Stays set after a resume by hand, so the rule never stops the job twice."""
    requirements: dict[str, Any] = Field(default_factory=dict,
                                         sa_column=Column(JSON, nullable=False))
    """What the slot running it must offer: ``gpu`` (bool), ``min_memory_mb``,
    ``pool``; and ``prefer_gpu``, set for the torch trainers unless the job says
    otherwise (see :mod:`backend.scheduling.placement`)."""
    pool: str | None = Field(default=None, max_length=40)
    """The worker pool of the job's latest chunk."""
    restores: int = 0
    """Chunks that had to build the trainer (and restore its checkpoint) on their slot."""
    resident_chunks: int = 0
    """Chunks that stepped on the trainer left loaded on their slot by the chunk before."""
    checkpoints_saved: int = 0
    """States written to the checkpoint store (on leaving a slot, at the cadence, at the end)."""
    switch_seconds: float | None = None
    """What moving the job to another slot costs, measured: build + restore of its
    latest start on a slot plus writing its state (the last save)."""
    note: str = Field(default="", max_length=NOTE_MAX)
    """The owner's free-text note on the run (labels: :mod:`backend.services.labels`)."""
    sample_text: str = ""
    """The text the model generated at its latest evaluation (a language model's
    sample, ``Trainer.text_sample``); empty for trainers that generate none."""
    sample_iteration: int | None = None
    """The iteration of that evaluation."""


class JobTag(SQLModel, table=True):
    """One tag on a job: a row per tag, so the jobs list filters by tag in SQL
    on SQLite and PostgreSQL alike (an index on ``tag``, no JSON operators)."""

    __tablename__ = "job_tag"
    job_id: int = Field(foreign_key="job.id", primary_key=True)
    tag: str = Field(primary_key=True, max_length=TAG_MAX, index=True)


class ExperimentTag(SQLModel, table=True):
    """One tag on an experiment (see :class:`JobTag`)."""

    __tablename__ = "experiment_tag"
    experiment_id: int = Field(foreign_key="experiment.id", primary_key=True)
    tag: str = Field(primary_key=True, max_length=TAG_MAX, index=True)


class WorkerPool(SQLModel, table=True):
    """A pool of worker slots the scheduler has seen, with its smallest
    worker's resources, and the tenants it is reserved for (empty: all)."""

    __tablename__ = "worker_pool"
    name: str = Field(primary_key=True, max_length=40)
    cores: int = 0
    memory_mb: int = 0
    gpu: str | None = Field(default=None, max_length=200)
    gpu_memory_mb: int = 0
    reserved_for: list[int] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    first_seen: datetime = Field(default_factory=utcnow)
    last_seen: datetime = Field(default_factory=utcnow)


class Experiment(SQLModel, table=True):
    """A named set of jobs generated from one search space (a sweep); the
    spec keeps the space, sampler, objective and early-stopping rule."""

    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int = Field(foreign_key="tenant.id", index=True)
    user_id: int = Field(foreign_key="user.id", index=True)
    name: str = Field(default="", max_length=200)
    spec: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    created_at: datetime = Field(default_factory=utcnow)
    note: str = Field(default="", max_length=NOTE_MAX)


class LossRecord(SQLModel, table=True):
    __tablename__ = "loss_point"
    __table_args__ = (UniqueConstraint("job_id", "iteration", name="uq_loss_point_job_iter"),)

    id: int | None = Field(default=None, primary_key=True)
    job_id: int = Field(foreign_key="job.id")
    iteration: int
    loss: float
    seconds: float
    recorded_at: datetime = Field(default_factory=utcnow)


class MetricRecord(SQLModel, table=True):
    """One metric value of one iteration: per-step (``split="train"``, other
    than the loss, which stays in ``loss_point``) or held-out (``"eval"``)."""

    __tablename__ = "metric_point"
    __table_args__ = (
        UniqueConstraint("job_id", "split", "name", "iteration", name="uq_metric_point"),
    )

    id: int | None = Field(default=None, primary_key=True)
    job_id: int = Field(foreign_key="job.id")
    split: str = Field(max_length=8)
    name: str = Field(max_length=64)
    iteration: int
    value: float


class TenantFile(SQLModel):
    """What every file a tenant uploads has (a dataset, trainer code): its
    owner and uploader, a name unique within the tenant, and where the file
    lies under ``DATA_DIR``. A job names one as ``ref.ref(id)`` in its
    ``job_field``; :mod:`backend.services.tenant_files` finds, counts the
    jobs using and deletes any kind alike."""

    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int = Field(foreign_key="tenant.id", index=True)
    user_id: int = Field(foreign_key="user.id")
    name: str = Field(max_length=64)
    path: str
    """Relative to ``DATA_DIR``: ``<directory>/<tenant id>/<random>.<suffix>``."""
    created_at: datetime = Field(default_factory=utcnow)

    ref: ClassVar[FileRef]
    """How a job names a file of this kind."""
    job_field: ClassVar[str]
    """The ``Job`` column that holds that name."""
    noun: ClassVar[str]
    """What a user calls one, in messages ("dataset 3 not found")."""
    directory: ClassVar[str]
    """Where under ``DATA_DIR`` the files of this kind are stored."""


class TrainerCode(TenantFile, table=True):
    """A tenant's uploaded trainer source; jobs name it ``code:<id>``."""

    __table_args__ = (UniqueConstraint("tenant_id", "name", name="uq_code_tenant_name"),)
    ref: ClassVar[FileRef] = CODE
    job_field: ClassVar[str] = "algorithm"
    noun: ClassVar[str] = "trainer code"
    directory: ClassVar[str] = "code"

    filename: str = Field(max_length=255)
    sha256: str = Field(max_length=64)
    size: int


class Decision(SQLModel, table=True):
    __table_args__ = (Index("ix_decision_job_seq", "job_id", "chunk_seq"),)

    id: int | None = Field(default=None, primary_key=True)
    job_id: int = Field(foreign_key="job.id")
    tenant_id: int = Field(foreign_key="tenant.id", index=True)
    chunk_seq: int
    iterations: int
    policy: str
    reason: str
    predicted_gain: float | None = None
    created_at: datetime = Field(default_factory=utcnow, index=True)
    pool: str | None = Field(default=None, max_length=40)
    """The worker pool the chunk was placed on."""


class PortalSetting(SQLModel, table=True):
    """Run-time settings an admin can change (e.g. the active policy)."""

    key: str = Field(primary_key=True, max_length=64)
    value: str
    updated_at: datetime = Field(default_factory=utcnow)


class WebSession(SQLModel, table=True):
    """A browser sign-in. The cookie carries a random id; only its hash is
    stored, and the CSRF token must come back in a header on unsafe requests."""

    id: int | None = Field(default=None, primary_key=True)
    user_id: int = Field(foreign_key="user.id", index=True)
    session_hash: str = Field(index=True, unique=True)
    csrf_token: str
    created_at: datetime = Field(default_factory=utcnow)
    expires_at: datetime


class AuditLog(SQLModel, table=True):
    """Admin actions: who changed what (quotas, roles, the active policy)."""

    id: int | None = Field(default=None, primary_key=True)
    actor_id: int = Field(foreign_key="user.id", index=True)
    tenant_id: int | None = Field(default=None, foreign_key="tenant.id", index=True)
    action: str = Field(max_length=64)
    target: str = Field(max_length=200)
    details: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    created_at: datetime = Field(default_factory=utcnow, index=True)


class UploadedDataset(TenantFile, table=True):
    """A tenant's CSV dataset, validated and stored as a numpy file (or a
    text file for language models); jobs name it ``upload:<id>``."""

    __table_args__ = (UniqueConstraint("tenant_id", "name", name="uq_dataset_tenant_name"),)
    ref: ClassVar[FileRef] = UPLOAD
    job_field: ClassVar[str] = "dataset"
    noun: ClassVar[str] = "dataset"
    directory: ClassVar[str] = "uploads"

    task: str
    rows: int
    columns: int
    n_classes: int = 0
