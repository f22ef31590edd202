"""A job's metrics beyond the training loss (per-iteration and held-out
series), and the download of its whole history as CSV or JSON."""

from __future__ import annotations

import json
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Response

from backend.api.deps import CurrentTenant, DbId, SessionDep
from backend.core.models import Job
from backend.schemas import MetricsHistory
from backend.services.job_metrics import (
    export_csv,
    export_json,
    export_table,
    metrics_history,
)

router = APIRouter(prefix="/api/v1/jobs", tags=["jobs"])


@router.get("/{job_id}/metrics", response_model=MetricsHistory)
def get_metrics(job_id: DbId, session: SessionDep, scope: CurrentTenant,
                max_points: Annotated[int, Query(ge=10, le=100_000)] = 2000,
                split: Annotated[Literal["train", "eval"] | None, Query()] = None,
                ) -> MetricsHistory:
    """Per-iteration metrics other than the loss (``train``: accuracy, ...) and
    the held-out evaluations (``eval``: val_loss, val_accuracy, ..., one point
    every ``eval_every`` iterations), one series per name, each downsampled
    like the loss history to at most ``max_points`` points."""
    job = scope.get_owned(session, Job, job_id)
    return metrics_history(session=session, job=job, max_points=max_points, split=split)


@router.get("/{job_id}/export", response_class=Response,
            responses={200: {"content": {"text/csv": {}, "application/json": {}},
                             "description": "The job's history: one row per iteration, one "
                             "column per metric"}})
def export_history(job_id: DbId, session: SessionDep, scope: CurrentTenant,
                   format: Annotated[Literal["csv", "json"], Query()] = "csv",  # noqa: A002
                   max_points: Annotated[int, Query(ge=10, le=100_000)] = 100_000) -> Response:
    """Download the loss and every metric as CSV (``iteration, loss, <training
    metrics>, <val_* metrics>``; held-out columns are empty on iterations
    without an evaluation) or JSON (the same table plus each series), every
    series downsampled like the loss history to at most ``max_points``."""
    job = scope.get_owned(session, Job, job_id)
    table = export_table(session=session, job=job, max_points=max_points)
    filename = f"job-{job_id}-losses.{format}"
    headers = {"Content-Disposition": f'attachment; filename="{filename}"',
               "Cache-Control": "no-store"}
    if format == "csv":
        return Response(export_csv(table), media_type="text/csv", headers=headers)
    return Response(json.dumps(export_json(table, job), allow_nan=False),
                    media_type="application/json", headers=headers)
