"""TenantScope, the one place routes scope reads by tenant: a member sees
their tenant's rows only, a platform admin every tenant's, and another
tenant's row is as missing as one that does not exist."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from fastapi import HTTPException
from sqlalchemy import select
from sqlmodel import Session, col

from backend.api.deps import TenantScope
from backend.core.db import engine_for, migrate, session_scope
from backend.core.models import Job, Role, Tenant
from backend.seed import ensure_tenant, ensure_user


@dataclass
class World:
    session: Session
    member: TenantScope
    admin: TenantScope
    own_job: int
    other_job: int


def _job(session: Session, tenant: Tenant, user_id: int) -> int:
    job = Job(tenant_id=tenant.id or 0, user_id=user_id, algorithm="logistic_regression",
              dataset="iris", params={}, dataset_params={}, max_iterations=10, tolerance=None)
    session.add(job)
    session.commit()
    return job.id or 0


@pytest.fixture
def world(db_url: str) -> Iterator[World]:
    migrate(db_url)
    with session_scope(engine_for(db_url)) as session:
        a, b = ensure_tenant(session, "a"), ensure_tenant(session, "b")
        platform = ensure_tenant(session, "platform")
        member, _ = ensure_user(session, email="m@a.test", password="x", tenant=a,
                                role=Role.member)
        root, _ = ensure_user(session, email="root@p.test", password="x", tenant=platform,
                              role=Role.platform_admin)
        yield World(session=session, member=TenantScope(tenant=a, user=member),
                    admin=TenantScope(tenant=platform, user=root),
                    own_job=_job(session, a, member.id or 0),
                    other_job=_job(session, b, member.id or 0))


def _visible(world: World, scope: TenantScope) -> set[int]:
    query = scope.filter(select(col(Job.id)), col(Job.tenant_id))
    return set(world.session.execute(query).scalars().all())


def test_filter_keeps_a_member_to_their_tenant(world: World) -> None:
    assert _visible(world, world.member) == {world.own_job}
    assert world.member.only_tenant_id == world.member.tenant.id


def test_filter_leaves_a_platform_admin_every_tenant(world: World) -> None:
    assert _visible(world, world.admin) == {world.own_job, world.other_job}
    assert world.admin.only_tenant_id is None


def test_get_owned_returns_the_callers_row(world: World) -> None:
    assert world.member.get_owned(world.session, Job, world.own_job).id == world.own_job
    assert world.admin.get_owned(world.session, Job, world.other_job).id == world.other_job


@pytest.mark.parametrize("whose", ["other tenant's", "missing"])
def test_get_owned_hides_other_tenants_rows_as_missing(world: World, whose: str) -> None:
    job_id = world.other_job if whose == "other tenant's" else world.other_job + 1000
    with pytest.raises(HTTPException) as caught:
        world.member.get_owned(world.session, Job, job_id)
    assert (caught.value.status_code, caught.value.detail) == (404, f"job {job_id} not found")


def test_get_owned_names_the_row_as_asked(world: World) -> None:
    with pytest.raises(HTTPException) as caught:
        world.member.get_owned(world.session, Job, world.other_job, noun="dataset")
    assert caught.value.detail == f"dataset {world.other_job} not found"
