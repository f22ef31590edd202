"""Files tenants upload (datasets, trainer code), handled alike.

Every kind is a :class:`backend.core.models.TenantFile`: a row owned by a
tenant, a file under ``DATA_DIR/<directory>/<tenant id>/``, and a name jobs
use (``upload:<id>``, ``code:<id>``). Finding one for a tenant, storing one,
counting the unfinished jobs that use one and deleting one are written once
here; :mod:`backend.services.uploads` and :mod:`backend.services.code_uploads`
keep only their own checks (a CSV's cells, a source's syntax).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TypeVar

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col

from backend.core.models import FINISHED, Job, TenantFile, TrainerCode, UploadedDataset
from backend.core.owned import find_owned
from backend.core.settings import get_settings
from backend.services.errors import Conflict

_File = TypeVar("_File", bound=TenantFile)


def display_name(session: Session, reference: str, tenant_id: int) -> str:
    """What a person calls the file a job spec refers to: an upload's or a
    code's own name for ``upload:<id>`` / ``code:<id>`` owned by the tenant,
    else ``reference`` itself (a built-in name, or one not to disclose)."""
    for model in (UploadedDataset, TrainerCode):
        file_id = model.ref.parse(reference)
        if file_id is not None:
            row = find_owned(session, model, file_id, tenant_id)
            return row.name if row is not None else reference
    return reference


def name_taken(session: Session, model: type[TenantFile], tenant_id: int, name: str) -> bool:
    """Whether tenant ``tenant_id`` has a file of this kind named ``name``."""
    return session.execute(
        select(col(model.id)).where(col(model.tenant_id) == tenant_id, col(model.name) == name)
    ).first() is not None


def new_path(model: type[TenantFile], tenant_id: int, suffix: str) -> Path:
    """A fresh random path, relative to ``DATA_DIR``, for a file of this kind."""
    return Path(model.directory) / str(tenant_id) / f"{uuid.uuid4().hex}{suffix}"


def insert(session: Session, row: _File, *, name_clash: Conflict) -> _File:
    """Insert the row of a file already written at ``row.path``; raises
    ``name_clash`` if the tenant has one of that name, and removes the file
    if the row is not stored."""
    target = get_settings().data_dir / row.path
    session.add(row)
    try:
        session.commit()
    except IntegrityError:
        session.rollback()
        target.unlink(missing_ok=True)
        raise name_clash from None
    except BaseException:
        session.rollback()
        target.unlink(missing_ok=True)
        raise
    session.refresh(row)
    return row


def jobs_using(session: Session, row: TenantFile) -> int:
    """How many unfinished jobs of the file's tenant name it."""
    named_by = getattr(Job, row.job_field)
    return int(session.execute(
        select(func.count()).select_from(Job).where(
            col(named_by) == row.ref.ref(row.id or 0),
            col(Job.tenant_id) == row.tenant_id,
            col(Job.status).not_in([s.value for s in FINISHED]))
    ).scalar_one())


def delete(session: Session, row: TenantFile) -> None:
    """Delete the row and then its file; raises Conflict while jobs use it."""
    busy = jobs_using(session, row)
    if busy:
        raise Conflict(f"{row.noun} {row.id} is used by {busy} unfinished job(s); "
                       "cancel them or wait for them to finish")
    path = get_settings().data_dir / row.path
    session.delete(row)
    session.commit()
    path.unlink(missing_ok=True)
