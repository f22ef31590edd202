"""What the dataset and trainer-code routes share: reading an upload's
multipart form within a size limit, listing the caller's files, and finding
one the caller may delete (:mod:`backend.services.tenant_files` does the rest)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from typing import TypeVar

from fastapi import HTTPException, Request, status
from sqlalchemy import select
from sqlmodel import Session, col
from starlette.datastructures import FormData, UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser

from backend.api.deps import TenantScope
from backend.core.models import Role, TenantFile
from backend.services.errors import Forbidden, Invalid

_File = TypeVar("_File", bound=TenantFile)


@asynccontextmanager
async def multipart_form(request: Request, body: AsyncGenerator[bytes, None], *,
                         fields: str, max_fields: int,
                         max_part_size: int) -> AsyncIterator[FormData]:
    """The request's multipart form, read from ``body`` (the request's stream
    within its limit), closed on leaving; 415 names the ``fields`` expected."""
    content_type = request.headers.get("content-type", "")
    if not content_type.lower().startswith("multipart/form-data"):
        raise HTTPException(status.HTTP_415_UNSUPPORTED_MEDIA_TYPE,
                            f"send multipart/form-data with {fields}")
    parser = MultiPartParser(request.headers, body, max_files=1, max_fields=max_fields,
                             max_part_size=max_part_size)
    try:
        form = await parser.parse()
    except MultiPartException as exc:
        raise Invalid(f"not a valid multipart body: {exc.message}", "file") from None
    try:
        yield form
    finally:
        await form.close()


def form_file(form: FormData, what: str) -> UploadFile:
    """The form's ``file`` field; 422 asking to attach ``what`` if it has none."""
    file = form.get("file")
    if not isinstance(file, UploadFile):
        raise Invalid(f"attach {what} as a file field named 'file'", "file")
    return file


def list_owned(session: Session, scope: TenantScope, model: type[_File]) -> list[_File]:
    """The caller's files of this kind, newest first (every tenant's for a platform admin)."""
    query = scope.filter(select(model), col(model.tenant_id))
    return list(session.execute(query.order_by(col(model.id).desc())).scalars().all())


def owned_for_deletion(session: Session, scope: TenantScope, model: type[_File], row_id: int,
                       *, it: str) -> _File:
    """The caller's file ``row_id`` (404 if not theirs), refused (403) unless
    the caller uploaded it or is an admin; ``it`` names it in the refusal."""
    row = scope.get_owned(session, model, row_id, noun=model.noun)
    if row.user_id != scope.user.id and scope.user.role == Role.member:
        raise Forbidden(f"only the uploader or a tenant admin can delete {it}")
    return row
