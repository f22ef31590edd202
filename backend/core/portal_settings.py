"""Run-time settings stored in the database (the admin may change them)."""

from __future__ import annotations

from typing import NamedTuple

from sqlmodel import Session, col, select

from backend.core.models import PortalSetting, utcnow
from backend.core.settings import Settings

POLICY_KEY = "active_policy"
COMPLETION_GUARD_KEY = "completion_guard"
COMPLETION_WEIGHT_KEY = "completion_weight"


class PolicyChoice(NamedTuple):
    """The admin's choice in force: the policy's name, its completion guard
    and slaq's completion weight."""

    name: str
    completion_guard: float
    completion_weight: float = 0.0


def policy_defaults(settings: Settings) -> PolicyChoice:
    """What is in force until an admin changes it: the portal's start-up settings."""
    return PolicyChoice(settings.policy, settings.completion_guard, settings.completion_weight)


def policy_choice(session: Session, defaults: PolicyChoice) -> PolicyChoice:
    """The three settings in one query (the scheduler reads them every round);
    ``defaults`` for those the admin never set."""
    rows = dict(session.exec(select(PortalSetting.key, PortalSetting.value).where(
        col(PortalSetting.key).in_((POLICY_KEY, COMPLETION_GUARD_KEY,
                                    COMPLETION_WEIGHT_KEY)))).all())
    guard = rows.get(COMPLETION_GUARD_KEY)
    weight = rows.get(COMPLETION_WEIGHT_KEY)
    return PolicyChoice(rows.get(POLICY_KEY, defaults.name),
                        defaults.completion_guard if guard is None else float(guard),
                        defaults.completion_weight if weight is None else float(weight))


def active_policy_name(session: Session, default: str) -> str:
    row = session.get(PortalSetting, POLICY_KEY)
    return row.value if row is not None else default


def set_active_policy(session: Session, name: str) -> None:
    _put(session, POLICY_KEY, name)


def set_completion_guard(session: Session, fraction: float) -> None:
    """slaq's service-floor fraction (``ServiceFloor.fraction``) from now on."""
    _put(session, COMPLETION_GUARD_KEY, repr(float(fraction)))


def set_completion_weight(session: Session, weight: float) -> None:
    """slaq's completion term (``SlaqPolicy.completion_weight``) from now on."""
    _put(session, COMPLETION_WEIGHT_KEY, repr(float(weight)))


def _put(session: Session, key: str, value: str) -> None:
    row = session.get(PortalSetting, key)
    if row is None:
        session.add(PortalSetting(key=key, value=value))
    else:
        row.value = value
        row.updated_at = utcnow()
        session.add(row)
    session.commit()
