"""Request and response shapes of the REST API (never the table classes)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from backend.core.pools import POOL_NAME, POOL_NAME_RULE
from backend.security import MIN_PASSWORD_LENGTH
from workers.convergence import MIN_WINDOW
from workers.stopping import MIN_SHARE

T = TypeVar("T")

QUALITY_METRICS: tuple[str, ...] = ("loss", "val_loss")
"""Metrics a job may name as its quality signal (the training loss, or the
held-out loss of its periodic evaluations)."""
DEFAULT_EVAL_EVERY = 50
DEFAULT_TOLERANCE = 1e-4
"""The convergence test a job gets when it sets neither target_loss nor tolerance."""
MAX_EVAL_EVERY = 100_000_000


class StoppingRule(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_iterations: int = Field(1000, ge=1, description="Stop after this many iterations")
    target_loss: float | None = Field(
        None, description="Stop once the job's quality metric (quality_metric: the training "
        "loss, or val_loss at each evaluation) is at or below this. Without a tolerance, a "
        "job with a target runs to it or to max_iterations (no convergence test)")
    tolerance: float | None = Field(
        DEFAULT_TOLERANCE, gt=0, lt=1, description="Converged when the mean of the quality "
        "metric's last window differs from the window before by less than this (relative), "
        "allowing two standard errors of noise; the training loss is judged only after "
        f"{MIN_SHARE:.0%} of max_iterations, val_loss once there are two windows of "
        f"evaluations. Left out, the convergence test applies with {DEFAULT_TOLERANCE:g} "
        "only when target_loss is not set (a job with a target runs to it or to "
        "max_iterations); null disables the test; a number applies it, with or without a "
        "target"
    )
    window: int = Field(10, ge=1, le=1000, description="Iterations (evaluations, for "
                        "quality_metric val_loss) in each of the two windows the convergence "
                        f"test compares; windows under {MIN_WINDOW} count as {MIN_WINDOW}")

    @model_validator(mode="after")
    def _target_alone_runs_to_it(self) -> StoppingRule:
        # A user who names a target expects the job to reach it (or its
        # iteration limit), not to stop on a convergence test they never asked for.
        if self.target_loss is not None and "tolerance" not in self.model_fields_set:
            self.tolerance = None
        return self


class JobRequirements(BaseModel):
    """What the worker slot running the job must offer (see /help/pools on the portal)."""

    model_config = ConfigDict(extra="forbid")

    gpu: bool | None = Field(
        None, description="true: run only on a pool whose workers have a GPU; false: never "
        "prefer one. Left out, jobs of GPU-capable trainers (the PyTorch ones) prefer a GPU "
        "pool when one has a free slot and run elsewhere otherwise")
    min_memory_mb: int = Field(0, ge=0, le=64 * 1024 * 1024,
                               description="Run only on pools whose workers have this much memory")
    pool: str | None = Field(None, pattern=POOL_NAME.pattern,
                             description="Run only on this worker pool (" + POOL_NAME_RULE + ")")


class JobCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field("", max_length=200, description=(
        "Empty: '<trainer> on <dataset>', with an uploaded trainer's or dataset's own name"))
    algorithm: str = Field(..., description="One of GET /api/v1/catalog/algorithms")
    dataset: str = Field(..., description="One of GET /api/v1/catalog/datasets")
    params: dict[str, Any] = Field(default_factory=dict, description="Algorithm hyper-parameters")
    dataset_params: dict[str, Any] = Field(default_factory=dict)
    seed: int = Field(0, ge=0, le=2**31 - 1)
    stopping: StoppingRule = Field(default_factory=StoppingRule)
    eval_every: int = Field(
        DEFAULT_EVAL_EVERY, ge=0, le=MAX_EVAL_EVERY,
        description="Evaluate on the held-out split every this many iterations (val_loss, "
        "val_accuracy, ...); 0 never evaluates. At most stopping.max_iterations")
    requirements: JobRequirements = Field(default_factory=JobRequirements)
    quality_metric: str = Field(
        "loss", description="The metric the scheduler's quality signal and "
        "stopping.target_loss follow: " + " or ".join(f"'{m}'" for m in QUALITY_METRICS)
        + "; 'val_loss' needs eval_every > 0")

    @field_validator("quality_metric")
    @classmethod
    def _known_metric(cls, value: str) -> str:
        if value not in QUALITY_METRICS:
            allowed = ", ".join(f"'{m}'" for m in QUALITY_METRICS)
            raise ValueError(f"quality_metric {value!r} is not one of {allowed}")
        return value


class JobExplanation(BaseModel):
    """Where a job stands, in plain words (see backend/services/job_explanation.py)."""

    summary: str = Field(description="One or two plain sentences: what the job is doing or "
                         "waiting for, its place in the queue and roughly when it starts; "
                         "for a finished job, why it ended")
    detail: str | None = Field(None, description="The scheduler's technical reason (predicted "
                               "gain, fit family, rank), for those who ask why")
    position: int | None = Field(None, description="Place in the queue, 1 = next; waiting "
                                 "jobs only")
    estimate_seconds: float | None = Field(
        None, description="Rough seconds until it gets a slot, from recent chunk durations "
        "and the jobs ahead of it; null when unknown")


class JobResidency(BaseModel):
    """How the job's chunks found their trainer: loaded on the slot or built again."""

    checkpoint_iteration: int = Field(description="The iteration of the job's latest saved "
                                      "state (its model download); a resident trainer may be "
                                      "ahead of it")
    restores: int = Field(description="Chunks that built the trainer and restored its state")
    resident_chunks: int = Field(description="Chunks that stepped on the trainer left loaded "
                                 "on their slot")
    checkpoints_saved: int = Field(description="States written to the checkpoint store")
    switch_seconds: float | None = Field(description="Measured cost of moving the job to "
                                         "another slot: build, restore (a cold sandbox start "
                                         "for tenant code) and save; null before its first "
                                         "start")


class JobPublic(BaseModel):
    id: int
    tenant_id: int
    name: str
    algorithm: str
    dataset: str
    params: dict[str, Any]
    dataset_params: dict[str, Any]
    seed: int
    stopping: StoppingRule
    status: str
    progress: float = Field(description="iterations done / max iterations, 0..1")
    iterations_done: int
    initial_loss: float | None
    current_loss: float | None
    best_loss: float | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    elapsed_seconds: float = Field(description="Seconds the job has spent training")
    chunks_run: int
    end_reason: str | None
    error: str | None
    scheduler_reason: str | None
    predicted_gain: float | None
    queue_position: int | None = None
    eval_every: int = Field(description="Held-out evaluation every this many iterations; 0 never")
    quality_metric: str = Field(description="What the scheduler and stopping.target_loss follow")
    requirements: JobRequirements = Field(description="What the slot running it must offer")
    pool: str | None = Field(None, description="The worker pool of its latest chunk")
    last_eval: dict[str, float] = Field(description="The latest evaluation's metrics "
                                        "(val_loss, ...); empty before the first")
    last_eval_iteration: int | None = Field(description="The iteration of that evaluation")
    explanation: JobExplanation = Field(description="What the job does or waits for, in plain "
                                        "words, with the technical detail apart")
    tags: list[str] = Field(default_factory=list, description="Labels the owner gave it, "
                            "sorted")
    note: str = Field("", description="The owner's free-text note on the run")
    experiment_id: int | None = Field(None, description="The experiment (sweep) this job "
                                      "belongs to, if any")
    stopped_early: bool = Field(False, description="Paused by its experiment's early-stopping "
                                "rule (end_reason says why); resumable by hand")
    trainer_output: str = Field("", description="The end (at most 64 KiB) of what uploaded "
                                "trainer code printed in its last chunk; empty for others")
    text_sample: str | None = Field(None, description="The text the model generated at its "
                                    "latest evaluation (char_transformer: a sample continuing "
                                    "the start of its text, at most 1000 characters); null for "
                                    "trainers that generate none. Plain text, never markup")
    text_sample_iteration: int | None = Field(None, description="The iteration of that "
                                              "evaluation")
    residency: JobResidency | None = Field(None, description="Where its trainer was found "
                                           "chunk by chunk (resident or restored)")


class Page(BaseModel, Generic[T]):
    items: list[T]
    total: int
    limit: int
    offset: int


class LossHistory(BaseModel):
    job_id: int
    total_points: int
    downsampled: bool
    iterations: list[int]
    losses: list[float]


class MetricSeries(BaseModel):
    name: str
    split: Literal["train", "eval"]
    total_points: int
    downsampled: bool
    iterations: list[int]
    values: list[float]


class MetricsHistory(BaseModel):
    job_id: int
    quality_metric: str
    eval_every: int
    last_eval: dict[str, float]
    last_eval_iteration: int | None
    train: dict[str, MetricSeries] = Field(
        description="Per-iteration metrics other than the loss (which GET .../losses serves)")
    eval: dict[str, MetricSeries] = Field(
        description="Held-out metrics, one point every eval_every iterations")


class ParamSchema(BaseModel):
    name: str
    type: str
    default: Any
    minimum: float | None
    maximum: float | None
    choices: list[str]
    help: str


class CatalogEntry(BaseModel):
    name: str
    title: str
    description: str
    tasks: list[str]
    params: list[ParamSchema]


class DecisionPublic(BaseModel):
    chunk_seq: int
    iterations: int
    policy: str
    reason: str
    predicted_gain: float | None
    created_at: datetime
    pool: str | None = Field(None, description="The worker pool the chunk was placed on")


class PoolPublic(BaseModel):
    name: str
    slots: int = Field(description="Live worker slots in the pool now")
    busy: int = Field(description="Slots running a chunk now")
    cores: int = Field(description="Cores of the pool's smallest worker")
    memory_mb: int = Field(description="Memory of the pool's smallest worker")
    gpu: str | None = Field(description="GPU model, when every worker of the pool has one")
    gpu_memory_mb: int
    reserved_for: list[str] = Field(description="Tenants that may use it; empty: every tenant")
    last_seen: datetime | None


class PoolUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reserved_for: list[str] = Field(
        max_length=1000, description="Names of the tenants that may use the pool; [] opens "
        "it to every tenant")


class LoginRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    email: str = Field(..., max_length=254)
    password: str = Field(..., max_length=1024)
    token_name: str = Field("login", max_length=100)


class TokenCreated(BaseModel):
    token: str = Field(description="Shown once; store it now")
    name: str
    prefix: str


class SignIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    email: str = Field(..., max_length=254)
    password: str = Field(..., max_length=1024)


class Me(BaseModel):
    id: int
    email: str
    role: str
    tenant_id: int
    tenant_name: str
    allow_code_uploads: bool = Field(False, description="Whether your tenant may upload "
                                     "trainer code (POST /api/v1/code)")
    csrf_token: str | None = Field(None, description="Send as X-CSRF-Token on unsafe requests "
                                   "made with the session cookie")


class TokenRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(..., min_length=1, max_length=100)
    expires_in_days: int | None = Field(None, ge=1, le=3650)


class TokenInfo(BaseModel):
    id: int
    name: str
    prefix: str
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None


class Quotas(BaseModel):
    max_slots: int = Field(ge=0, le=10_000, description="Chunks in flight at once")
    max_active_jobs: int = Field(ge=0, le=1_000_000, description="Unfinished jobs")
    max_queued_jobs: int = Field(ge=0, le=1_000_000, description="Jobs waiting for a slot")
    max_iterations_per_job: int = Field(ge=1, le=100_000_000)
    share_weight: float = Field(gt=0, le=1000, description="Relative share under contention")


class QuotaUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_slots: int | None = Field(None, ge=0, le=10_000)
    max_active_jobs: int | None = Field(None, ge=0, le=1_000_000)
    max_queued_jobs: int | None = Field(None, ge=0, le=1_000_000)
    max_iterations_per_job: int | None = Field(None, ge=1, le=100_000_000)
    share_weight: float | None = Field(None, gt=0, le=1000)
    pool_slots: dict[str, int] | None = Field(
        None, description="Slots the tenant may hold at once per worker pool, e.g. "
        '{"gpu": 1}; replaces the whole map ({} removes every per-pool limit)')

    @field_validator("pool_slots")
    @classmethod
    def _pool_slots(cls, value: dict[str, int] | None) -> dict[str, int] | None:
        for name, slots in (value or {}).items():
            if not POOL_NAME.match(name):
                raise ValueError(f"pool name {name!r} is not valid: {POOL_NAME_RULE}")
            if not 0 <= slots <= 10_000:
                raise ValueError(f"pool_slots[{name!r}] must be between 0 and 10000")
        return value

    allow_code_uploads: bool | None = Field(
        None, description="Let the tenant upload trainer code (runs sandboxed; see "
        "deploy/PRODUCTION.md)")


class UsagePublic(BaseModel):
    running_slots: int
    active_jobs: int
    queued_jobs: int


class TenantPublic(BaseModel):
    id: int
    name: str
    quotas: Quotas
    usage: UsagePublic
    allow_code_uploads: bool = Field(
        False, description="Whether the tenant may upload trainer code (runs sandboxed)")
    pool_slots: dict[str, int] = Field(
        default_factory=dict, description="Per-pool slot quotas (pools not named: max_slots)")


class TenantCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(..., min_length=2, max_length=64, pattern=r"^[a-z0-9][a-z0-9_-]*$")
    quotas: QuotaUpdate = Field(default_factory=QuotaUpdate)


class UserPublic(BaseModel):
    id: int
    email: str
    role: str
    tenant_id: int
    is_active: bool


class UserCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    email: str = Field(..., min_length=3, max_length=254, pattern=r"^[^@\s]+@[^@\s]+$")
    password: str = Field(..., min_length=MIN_PASSWORD_LENGTH, max_length=1024,
                          description="Long enough and hard to guess (the server checks)")
    tenant_id: int = Field(..., ge=1, le=2**31 - 1)
    role: Literal["member", "tenant_admin", "platform_admin"] = "member"


class UserUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["member", "tenant_admin", "platform_admin"] | None = None
    is_active: bool | None = None


class PolicyState(BaseModel):
    active: str
    available: list[str]
    completion_guard: float = Field(
        description="The completion-time guard: the share of a round-robin turn every job "
        "is guaranteed (0 = off, quality first; 1 = as often as round-robin)")
    guarded: list[str] = Field(description="The policies the completion guard applies to")
    completion_weight: float = Field(
        description="slaq's completion term: a job's score gains this over the compute "
        "seconds it has left (0 = off; COMPLETION_WEIGHT until an admin sets it)")


class PolicyChange(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(None, description="The policy to switch to")
    completion_guard: float | None = Field(
        None, ge=0, le=1, description="The completion-time guard to set, from 0 (off) to 1")
    completion_weight: float | None = Field(
        None, ge=0, le=1,
        description="slaq's completion weight to set, from 0 (off) to 1 (docs/scheduling.md, "
        "\"A completion term\"); other policies ignore it")

    @model_validator(mode="after")
    def _something(self) -> PolicyChange:
        if self.name is None and self.completion_guard is None \
                and self.completion_weight is None:
            raise ValueError("give the policy's name, its completion_guard, its "
                             "completion_weight, or several of them")
        return self


class AuditEntry(BaseModel):
    id: int
    actor_email: str
    tenant_id: int | None
    action: str
    target: str
    details: dict[str, Any]
    created_at: datetime


class PredictedPoint(BaseModel):
    iteration: int
    loss: float
    low: float
    high: float


class Prediction(BaseModel):
    job_id: int
    from_iteration: int
    points: list[PredictedPoint] = Field(description="Empty while the job has too little history")
    family: str | None = Field(None, description="The curve family the scheduler fitted")
