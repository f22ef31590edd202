"""Run-time settings stored in the database (the admin may change them)."""

from __future__ import annotations

from sqlmodel import Session

from backend.core.models import PortalSetting, utcnow

POLICY_KEY = "active_policy"
COMPLETION_GUARD_KEY = "completion_guard"


def active_policy_name(session: Session, default: str) -> str:
    row = session.get(PortalSetting, POLICY_KEY)
    return row.value if row is not None else default


def set_active_policy(session: Session, name: str) -> None:
    _put(session, POLICY_KEY, name)


def completion_guard(session: Session, default: float) -> float:
    """slaq's service-floor fraction (``ServiceFloor.fraction``) in force."""
    row = session.get(PortalSetting, COMPLETION_GUARD_KEY)
    return float(row.value) if row is not None else default


def set_completion_guard(session: Session, fraction: float) -> None:
    _put(session, COMPLETION_GUARD_KEY, repr(float(fraction)))


def _put(session: Session, key: str, value: str) -> None:
    row = session.get(PortalSetting, key)
    if row is None:
        session.add(PortalSetting(key=key, value=value))
    else:
        row.value = value
        row.updated_at = utcnow()
        session.add(row)
    session.commit()
