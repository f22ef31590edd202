"""Request and response shapes of the REST API (never the table classes)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from backend.security import MIN_PASSWORD_LENGTH

T = TypeVar("T")


class StoppingRule(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_iterations: int = Field(1000, ge=1, description="Stop after this many iterations")
    target_loss: float | None = Field(None, description="Stop once the loss is at or below this")
    tolerance: float | None = Field(
        1e-4, gt=0, lt=1, description="Converged when the relative loss change over the "
        "window is below this; null disables"
    )
    window: int = Field(10, ge=1, le=1000, description="Iterations the convergence test spans")


class JobCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field("", max_length=200)
    algorithm: str = Field(..., description="One of GET /api/v1/catalog/algorithms")
    dataset: str = Field(..., description="One of GET /api/v1/catalog/datasets")
    params: dict[str, Any] = Field(default_factory=dict, description="Algorithm hyper-parameters")
    dataset_params: dict[str, Any] = Field(default_factory=dict)
    seed: int = Field(0, ge=0, le=2**31 - 1)
    stopping: StoppingRule = Field(default_factory=StoppingRule)


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


class UsagePublic(BaseModel):
    running_slots: int
    active_jobs: int
    queued_jobs: int


class TenantPublic(BaseModel):
    id: int
    name: str
    quotas: Quotas
    usage: UsagePublic


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


class PolicyChange(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str


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
