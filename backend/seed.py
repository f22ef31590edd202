"""First-start data: a platform admin, a demo tenant and its tenant admin.

Neither account has a default password: each gets ADMIN_PASSWORD /
DEMO_PASSWORD when set (and strong enough), else a generated one that is
shown once, when the account is made. Only its argon2 hash is stored;
``slaq reset-password EMAIL`` sets a new one.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlmodel import Session, col

from backend.core.models import ApiToken, Role, Tenant, User, WebSession, utcnow
from backend.security import generate_password, hash_password, password_problem

PLATFORM_TENANT = "platform"


class SeedPasswordRefused(ValueError):
    """A configured seed password fails the password policy."""


@dataclass(frozen=True)
class SeededAccount:
    email: str
    created: bool
    password: str | None
    """The generated password, to show now; None when the account existed
    already or its password came from ``setting``."""
    setting: str

    def describe(self) -> str:
        """The account for the operator, with its password only when new."""
        if self.password is not None:
            return f"{self.email} / {self.password}   (generated; shown only this once)"
        if self.created:
            return f"{self.email} / the password in {self.setting}"
        return (f"{self.email}   (password shown at first start; "
                f"`slaq reset-password {self.email}` sets a new one)")


@dataclass(frozen=True)
class SeedResult:
    admin: SeededAccount
    demo: SeededAccount


def demo_email_for(demo_tenant: str) -> str:
    return f"demo@{demo_tenant}.example.com"


def refused_seed_password(*, admin_email: str, admin_password: str, demo_tenant: str,
                          demo_password: str) -> str | None:
    """Why a configured seed password may not be used, or None; checked even
    when the account exists, so a weak setting is caught on any start."""
    for setting, email, password in (
            ("ADMIN_PASSWORD", admin_email, admin_password),
            ("DEMO_PASSWORD", demo_email_for(demo_tenant), demo_password)):
        problem = password_problem(password, email=email) if password else None
        if problem:
            return (f"{setting} is refused: {problem}. Choose a stronger one, or unset it "
                    f"to have a password generated and shown once.")
    return None


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


def _seed_account(session: Session, *, email: str, password: str, setting: str,
                  tenant: Tenant, role: Role) -> SeededAccount:
    chosen = password or generate_password()
    user, created = ensure_user(session, email=email, password=chosen, tenant=tenant, role=role)
    return SeededAccount(email=user.email, created=created, setting=setting,
                         password=chosen if created and not password else None)


def seed(session: Session, *, admin_email: str, admin_password: str = "",
         demo_tenant: str, demo_password: str = "") -> SeedResult:
    """Make the platform admin and the demo tenant admin unless they exist.
    Raises :class:`SeedPasswordRefused` before changing anything when a given
    password fails the policy."""
    refused = refused_seed_password(admin_email=admin_email, admin_password=admin_password,
                                    demo_tenant=demo_tenant, demo_password=demo_password)
    if refused:
        raise SeedPasswordRefused(refused)
    platform = ensure_tenant(session, PLATFORM_TENANT)
    admin = _seed_account(session, email=admin_email, password=admin_password,
                          setting="ADMIN_PASSWORD", tenant=platform, role=Role.platform_admin)
    # The demo tenant shows off uploaded trainers; every other tenant starts without.
    demo = ensure_tenant(session, demo_tenant, allow_code_uploads=True)
    demo_admin = _seed_account(session, email=demo_email_for(demo_tenant),
                               password=demo_password, setting="DEMO_PASSWORD", tenant=demo,
                               role=Role.tenant_admin)
    return SeedResult(admin=admin, demo=demo_admin)


@dataclass(frozen=True)
class PasswordReset:
    """A new password, and the sign-ins it ended."""

    password: str
    tokens_revoked: int
    sessions_ended: int


def reset_password(session: Session, email: str) -> PasswordReset | None:
    """Give the user ``email`` a new generated password (None when there is no
    such user), and end every way in the old one opened: their API tokens are
    revoked and their browser sessions deleted.

    A reset usually means the old password leaked; a token or session made
    with it would otherwise go on working. Done through the ORM so the
    account-change epoch (:mod:`backend.core.auth_epoch`) tells every API
    process at once.
    """
    user = session.execute(
        select(User).where(User.email == email.strip().lower())  # type: ignore[arg-type]
    ).scalar_one_or_none()
    if user is None:
        return None
    password = generate_password()
    user.password_hash = hash_password(password)
    session.add(user)
    now = utcnow()
    tokens = session.execute(select(ApiToken).where(
        col(ApiToken.user_id) == user.id, col(ApiToken.revoked_at).is_(None))).scalars().all()
    for token in tokens:
        token.revoked_at = now
        session.add(token)
    browser = session.execute(
        select(WebSession).where(col(WebSession.user_id) == user.id)).scalars().all()
    for web in browser:
        session.delete(web)
    session.commit()
    return PasswordReset(password, len(tokens), len(browser))
