"""Run-time settings stored in the database (the admin may change them)."""

from __future__ import annotations

from sqlmodel import Session

from backend.core.models import PortalSetting, utcnow

POLICY_KEY = "active_policy"


def active_policy_name(session: Session, default: str) -> str:
    row = session.get(PortalSetting, POLICY_KEY)
    return row.value if row is not None else default


def set_active_policy(session: Session, name: str) -> None:
    row = session.get(PortalSetting, POLICY_KEY)
    if row is None:
        session.add(PortalSetting(key=POLICY_KEY, value=name))
    else:
        row.value = name
        row.updated_at = utcnow()
        session.add(row)
    session.commit()
