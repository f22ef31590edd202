"""Bulk, idempotent writes of loss points (unique per job and iteration)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.dialects import postgresql, sqlite
from sqlmodel import Session

from backend.core.models import LossRecord, utcnow


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
    dialect = session.get_bind().dialect.name
    table: Any = LossRecord.__table__  # type: ignore[attr-defined]
    stmt: Any
    if dialect == "postgresql":
        stmt = postgresql.insert(table).on_conflict_do_nothing(
            index_elements=["job_id", "iteration"]
        )
    elif dialect == "sqlite":
        stmt = sqlite.insert(table).on_conflict_do_nothing(index_elements=["job_id", "iteration"])
    else:
        raise RuntimeError(f"unsupported database dialect {dialect}")
    for start in range(0, len(rows), 1000):
        session.execute(stmt, rows[start:start + 1000])
