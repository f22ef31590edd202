"""First-start data: a platform admin, a demo tenant and its tenant admin."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlmodel import Session

from backend.core.models import Role, Tenant, User
from backend.security import hash_password

PLATFORM_TENANT = "platform"


@dataclass(frozen=True)
class SeedResult:
    admin_email: str
    demo_email: str
    created: bool


def ensure_tenant(session: Session, name: str, **quotas: int | float) -> Tenant:
    tenant = session.execute(select(Tenant).where(Tenant.name == name)).scalar_one_or_none()  # type: ignore[arg-type]
    if tenant is None:
        tenant = Tenant(name=name, **quotas)  # type: ignore[arg-type]
        session.add(tenant)
        session.commit()
        session.refresh(tenant)
    return tenant


def ensure_user(session: Session, *, email: str, password: str, tenant: Tenant,
                role: Role) -> tuple[User, bool]:
    email = email.strip().lower()
    user = session.execute(select(User).where(User.email == email)).scalar_one_or_none()  # type: ignore[arg-type]
    if user is not None:
        return user, False
    user = User(tenant_id=tenant.id or 0, email=email, password_hash=hash_password(password),
                role=role)
    session.add(user)
    session.commit()
    session.refresh(user)
    return user, True


def seed(session: Session, *, admin_email: str, admin_password: str,
         demo_tenant: str) -> SeedResult:
    platform = ensure_tenant(session, PLATFORM_TENANT)
    _, created = ensure_user(session, email=admin_email, password=admin_password,
                             tenant=platform, role=Role.platform_admin)
    demo = ensure_tenant(session, demo_tenant)
    demo_email = f"demo@{demo_tenant}.example.com"
    ensure_user(session, email=demo_email, password="demo", tenant=demo, role=Role.tenant_admin)
    return SeedResult(admin_email=admin_email, demo_email=demo_email, created=created)
