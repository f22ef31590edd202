"""Finding a row a tenant owns, as every process must: the API for a
request, the worker for a job's uploaded dataset or trainer code."""

from __future__ import annotations

from typing import Protocol, TypeVar

from sqlmodel import Session


class _TenantOwned(Protocol):
    tenant_id: int


_Owned = TypeVar("_Owned", bound=_TenantOwned)


def find_owned(session: Session, model: type[_Owned], row_id: int,
               tenant_id: int | None) -> _Owned | None:
    """The row if it exists and tenant ``tenant_id`` may see it (None: any
    tenant). Another tenant's row is None, as a missing one: its existence
    is none of the caller's business."""
    row = session.get(model, row_id)
    if row is None or (tenant_id is not None and row.tenant_id != tenant_id):
        return None
    return row
