"""The what-if replay: the portal's recent history replayed under other
policies (platform admins: it spans every tenant's jobs).

``POST /api/v1/admin/what-if`` checks the window and starts the replay in
the background (202); ``GET /api/v1/admin/what-if/{id}`` (or ``/latest``)
answers its progress and, once done, the report; each says the window it
replays (``hours``, and the report's ``since`` and ``until``)."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Response, status
from pydantic import BaseModel, Field, field_validator, model_validator

from backend.api.deps import KeysDep, PlatformAdmin, RedisDep, SessionDep
from backend.core.leases import Heartbeats
from backend.core.models import utcnow
from backend.core.portal_settings import policy_choice, policy_defaults
from backend.core.settings import get_settings
from backend.scheduling.registry import policy_runs
from backend.services import what_if_runs
from backend.services.portal_trace import check_window
from backend.services.what_if import (
    DEFAULT_POLICIES,
    MAX_RUNS,
    NO_COMPLETED_JOB,
    check_policies,
    tenant_views,
)
from backend.services.what_if_runs import ReplayJob, Window

router = APIRouter(prefix="/api/v1/admin", tags=["admin"])

MAX_HOURS = 24 * 30
RunId = Annotated[str, Path(pattern="^[0-9a-f]{32}$", description="The replay's id")]


class WhatIfRequest(BaseModel):
    hours: float = Field(24.0, gt=0, le=MAX_HOURS,
                         description="Replay the jobs submitted in the last this many hours")
    slots: int | None = Field(None, ge=1, le=4096,
                              description="Worker slots to simulate (default: the slots up now)")
    policies: list[str] = Field(default_factory=lambda: list(DEFAULT_POLICIES),
                                min_length=1, max_length=6)
    completion_guards: list[Annotated[float, Field(ge=0, le=1)]] = Field(
        default_factory=list, max_length=3,
        description="slaq's completion-time guards to replay it at, each 0 (off) to 1 "
        "(default: the one in force), so settings can be compared on the portal's own "
        "history before one is set; a run at another guard than the one in force is "
        "labelled with it, 'slaq (guard 0.6)'")
    completion_weights: list[Annotated[float, Field(ge=0, le=1)]] = Field(
        default_factory=list, max_length=3,
        description="slaq's completion weights to replay it at, each 0 (off) to 1 "
        "(default: the one in force); a run at another weight than the one in force is "
        "labelled with it, 'slaq (weight 0.01)'")

    @field_validator("policies")
    @classmethod
    def _known(cls, policies: list[str]) -> list[str]:
        check_policies(policies)
        return list(dict.fromkeys(policies))

    @field_validator("completion_guards", "completion_weights")
    @classmethod
    def _distinct(cls, values: list[float]) -> list[float]:
        return list(dict.fromkeys(values))

    @model_validator(mode="after")
    def _bounded(self) -> WhatIfRequest:
        runs = len(policy_runs(self.policies, self.completion_guards,
                               weights=self.completion_weights))
        if runs > MAX_RUNS:
            raise ValueError(f"that is {runs} runs to replay (slaq runs once per guard and "
                             f"weight); a replay compares at most {MAX_RUNS}: choose fewer "
                             "policies, completion guards or completion weights")
        return self


@router.post("/what-if", status_code=status.HTTP_202_ACCEPTED)
def start_what_if(body: WhatIfRequest, session: SessionDep, scope: PlatformAdmin,
                  client: RedisDep, keys: KeysDep, response: Response) -> dict[str, Any]:
    """Every job submitted in the window that completed, replayed in the
    simulator under each policy (its real curves, speeds and chunk costs;
    today's tenant quotas), next to how it actually ran. Answers at once
    with the replay's state; poll its ``Location`` for progress and report."""
    slots = body.slots or len(Heartbeats(client, keys).alive_info())
    if slots < 1:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_ENTITY,
                            "No worker slot is up to size the replay on: give the number "
                            "of slots to simulate.")
    until = utcnow()
    since = until - timedelta(hours=body.hours)
    completed = check_window(session, since, until)
    if not completed:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_ENTITY, NO_COMPLETED_JOB)
    settings = get_settings()
    in_force = policy_choice(session, policy_defaults(settings))
    # The replaying process reads the jobs: at the bounds that alone takes seconds.
    job = ReplayJob(Window(since, until, completed), body.policies, slots,
                    settings.chunk_seconds, tenant_views(session),
                    completion_guards=body.completion_guards,
                    in_force=in_force.completion_guard,
                    completion_weight=in_force.completion_weight,
                    completion_weights=body.completion_weights, hours=body.hours,
                    extra={"slots": slots, "chunk_seconds": settings.chunk_seconds,
                           "active_policy": in_force.name,
                           "completion_guard": in_force.completion_guard,
                           "completion_weight": in_force.completion_weight})
    run_id = what_if_runs.start(client, keys, job, started_by=scope.user.email)
    response.headers["Location"] = f"{router.prefix}/what-if/{run_id}"
    return _known_run(what_if_runs.read(client, keys, run_id))


@router.get("/what-if/latest", responses={204: {"description": "No replay in the last day"}})
def latest_what_if(_scope: PlatformAdmin, client: RedisDep, keys: KeysDep) -> Any:
    """The newest replay of the last day (running or finished); 204 when there is none."""
    run = what_if_runs.latest(client, keys)
    # Not a 404: having no replay yet is the normal state of a portal, and the
    # admin page asks on every load (a 404 is an error in the browser's log).
    return Response(status_code=status.HTTP_204_NO_CONTENT) if run is None else run


@router.get("/what-if/{run_id}")
def what_if_run(run_id: RunId, _scope: PlatformAdmin, client: RedisDep,
                keys: KeysDep) -> dict[str, Any]:
    """A replay's state: ``running`` (with progress), ``done`` (with the
    report in ``result``), ``failed`` or ``lost`` (with ``error``)."""
    return _known_run(what_if_runs.read(client, keys, run_id))


def _known_run(run: dict[str, Any] | None) -> dict[str, Any]:
    if run is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND,
                            "No such what-if replay: replays are kept for a day.")
    return run
