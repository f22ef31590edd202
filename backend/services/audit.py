"""The audit log of admin actions."""

from __future__ import annotations

from typing import Any

from sqlmodel import Session

from backend.core.models import AuditLog, User


def record(session: Session, *, actor: User, action: str, target: str,
           tenant_id: int | None = None, **details: Any) -> None:
    """Add an entry to the caller's transaction; it commits with the change."""
    session.add(AuditLog(actor_id=actor.id or 0, tenant_id=tenant_id, action=action,
                         target=target, details=details))
