"""Bulk, idempotent writes of loss and metric points (unique per job and iteration)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy.dialects import postgresql, sqlite
from sqlmodel import Session

from backend.core.models import LossRecord, MetricRecord, utcnow
from backend.core.safe_text import storable


def insert_loss_points(
    session: Session, job_id: int, points: Sequence[tuple[int, float, float]]
) -> None:
    """Insert (iteration, loss, seconds) rows; rows already present are kept
    as they are, so a chunk delivered twice writes nothing twice."""
    if not points:
        return
    now = utcnow()
    rows = [
        {"job_id": job_id, "iteration": it, "loss": loss, "seconds": sec, "recorded_at": now}
        for it, loss, sec in points
    ]
    _insert_ignoring_duplicates(session, LossRecord, ["job_id", "iteration"], rows)


def insert_metric_points(
    session: Session, job_id: int, split: str,
    samples: Sequence[tuple[int, Mapping[str, float]]],
) -> None:
    """Insert one row per (iteration, metric) of ``samples``; like loss points,
    rows already present are kept. ``split`` is ``"train"`` or ``"eval"``."""
    # Names come from trainers, tenant code included: one holding a lone
    # surrogate or NUL would fail the whole commit, so it is stored escaped.
    rows = [
        {"job_id": job_id, "split": split, "name": storable(name), "iteration": it,
         "value": value}
        for it, metrics in samples for name, value in metrics.items()
        if name != "iteration" and math.isfinite(value)
    ]
    _insert_ignoring_duplicates(
        session, MetricRecord, ["job_id", "split", "name", "iteration"], rows)


def _insert_ignoring_duplicates(
    session: Session, model: Any, keys: list[str], rows: list[dict[str, Any]]
) -> None:
    if not rows:
        return
    dialect = session.get_bind().dialect.name
    table: Any = model.__table__
    stmt: Any
    if dialect == "postgresql":
        stmt = postgresql.insert(table).on_conflict_do_nothing(index_elements=keys)
    elif dialect == "sqlite":
        stmt = sqlite.insert(table).on_conflict_do_nothing(index_elements=keys)
    else:
        raise RuntimeError(f"unsupported database dialect {dialect}")
    for start in range(0, len(rows), 1000):
        session.execute(stmt, rows[start:start + 1000])
