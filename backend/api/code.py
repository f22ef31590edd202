"""Tenants' trainer code: upload a Python file, list, inspect, delete.

A job runs uploaded code by naming it ``"code:<id>"`` as its ``algorithm``;
it runs in a sandbox on the workers (``docs/tenant-code.md``). Uploads are
refused (403) unless a platform admin allowed them for the tenant. Another
tenant's code is reported as missing (404).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from datetime import datetime
from typing import Any

from fastapi import APIRouter, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from backend.api.deps import CurrentTenant, DbId, SessionDep
from backend.api.tenant_files import form_file, list_owned, multipart_form, owned_for_deletion
from backend.core.models import TrainerCode, as_utc
from backend.services import code_uploads, tenant_files
from backend.services.code_uploads import MAX_CODE_BYTES
from backend.services.errors import TooLarge

router = APIRouter(prefix="/api/v1/code", tags=["code"])

MAX_BODY_BYTES = MAX_CODE_BYTES + 64 * 1024
"""The source plus multipart overhead and the name field."""


class CodePublic(BaseModel):
    id: int
    algorithm: str = Field(description="What a job spec's `algorithm` field uses: code:<id>")
    name: str
    filename: str
    size: int
    sha256: str
    tenant_id: int
    user_id: int
    created_at: datetime
    contract: code_uploads.Contract = Field(
        description="`trainer` (a slaq_trainer.Trainer subclass) or `loop` (a function "
                    "train(params, data, ctx)), as read from the source; `unknown` if neither")


def _public(row: TrainerCode) -> CodePublic:
    return CodePublic(id=row.id or 0, algorithm=TrainerCode.ref.ref(row.id or 0),
                      name=row.name, filename=row.filename, size=row.size, sha256=row.sha256,
                      tenant_id=row.tenant_id, user_id=row.user_id,
                      created_at=as_utc(row.created_at), contract=code_uploads.code_contract(row))


async def _capped_body(request: Request) -> AsyncGenerator[bytes, None]:
    received = 0
    async for chunk in request.stream():
        received += len(chunk)
        if received > MAX_BODY_BYTES:
            raise TooLarge(f"the upload is over the limit of {MAX_CODE_BYTES // 1024} KiB")
        yield chunk


_UPLOAD_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {"multipart/form-data": {"schema": {
            "type": "object",
            "required": ["file"],
            "properties": {
                "file": {"type": "string", "format": "binary",
                         "description": f"One UTF-8 Python file (.py), at most "
                         f"{MAX_CODE_BYTES // 1024} KiB, defining one subclass of "
                         "slaq_trainer.Trainer or a loop function train(params, data, ctx)"},
                "name": {"type": "string", "maxLength": code_uploads.MAX_NAME_LENGTH,
                         "description": "Unique within your tenant; default the file name"},
            },
        }}},
    },
}


@router.post("", status_code=status.HTTP_201_CREATED, response_model=CodePublic,
             openapi_extra=_UPLOAD_BODY,
             responses={403: {"description": "Code uploads are off for this tenant"},
                        409: {"description": "Name taken"},
                        413: {"description": "Over the size limit"},
                        415: {"description": "Not multipart/form-data"}})
async def upload_code(request: Request, session: SessionDep,
                      scope: CurrentTenant) -> CodePublic | JSONResponse:
    """Upload a trainer (multipart: file, optional name). It is only compiled here,
    never run; jobs run it sandboxed as ``"algorithm": "code:<id>"``."""
    code_uploads.uploads_allowed(scope.tenant)
    async with multipart_form(request, _capped_body(request),
                              fields="a file field named 'file'", max_fields=5,
                              max_part_size=MAX_BODY_BYTES) as form:
        file = form_file(form, "the source")
        filename = file.filename or ""
        name_field = form.get("name")
        name = name_field if isinstance(name_field, str) and name_field.strip() else (
            filename.rsplit("/", 1)[-1].removesuffix(".py"))
        raw = await file.read(MAX_CODE_BYTES + 1)
        row = await run_in_threadpool(_create, session, scope, filename, name, raw)
    return _public(row)


def _create(session: SessionDep, scope: CurrentTenant, filename: str, name: str,
            raw: bytes) -> TrainerCode:
    clean_name = code_uploads.check_name(name)
    code_uploads.check_source(filename, raw)
    return code_uploads.store_code(session, tenant_id=scope.tenant.id or 0,
                                   user_id=scope.user.id or 0, name=clean_name,
                                   filename=filename, raw=raw)


@router.get("", response_model=list[CodePublic])
def list_code(session: SessionDep, scope: CurrentTenant) -> list[CodePublic]:
    """Your tenant's uploaded trainers, newest first (a platform admin sees every tenant's)."""
    return [_public(r) for r in list_owned(session, scope, TrainerCode)]


@router.get("/{code_id}", response_model=CodePublic)
def get_code(code_id: DbId, session: SessionDep, scope: CurrentTenant) -> CodePublic:
    """One uploaded trainer and the name jobs use for it."""
    return _public(scope.get_owned(session, TrainerCode, code_id, noun=TrainerCode.noun))


@router.delete("/{code_id}", status_code=status.HTTP_204_NO_CONTENT,
               responses={409: {"description": "Unfinished jobs use the code"}})
def delete_code(code_id: DbId, session: SessionDep, scope: CurrentTenant) -> None:
    """Delete uploaded code (its uploader or an admin); refused (409) while an
    unfinished job uses it."""
    row = owned_for_deletion(session, scope, TrainerCode, code_id, it="this code")
    tenant_files.delete(session, row)
