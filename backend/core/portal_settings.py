"""Run-time settings stored in the database (the admin may change them)."""

from __future__ import annotations

from typing import NamedTuple

from sqlmodel import Session, col, select

from backend.core.models import PortalSetting, utcnow

POLICY_KEY = "active_policy"
COMPLETION_GUARD_KEY = "completion_guard"


class PolicyChoice(NamedTuple):
    """The admin's choice in force: the policy's name and its completion guard."""

    name: str
    completion_guard: float


def policy_choice(session: Session, default_name: str, default_guard: float) -> PolicyChoice:
    """Both settings in one query: the scheduler reads them every round."""
    rows = dict(session.exec(select(PortalSetting.key, PortalSetting.value).where(
        col(PortalSetting.key).in_((POLICY_KEY, COMPLETION_GUARD_KEY)))).all())
    guard = rows.get(COMPLETION_GUARD_KEY)
    return PolicyChoice(rows.get(POLICY_KEY, default_name),
                        default_guard if guard is None else float(guard))


def active_policy_name(session: Session, default: str) -> str:
    row = session.get(PortalSetting, POLICY_KEY)
    return row.value if row is not None else default


def set_active_policy(session: Session, name: str) -> None:
    _put(session, POLICY_KEY, name)


def set_completion_guard(session: Session, fraction: float) -> None:
    """slaq's service-floor fraction (``ServiceFloor.fraction``) from now on."""
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
