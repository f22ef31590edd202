"""Tenants' own datasets: upload a CSV (or a UTF-8 text for language models),
list, inspect, delete.

A job trains on an upload by naming it ``"upload:<id>"`` in its ``dataset``
field. Another tenant's upload is reported as missing (404), like its jobs.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from datetime import datetime
from typing import Annotated, Any, Literal

import numpy as np
from fastapi import APIRouter, HTTPException, Query, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.datastructures import UploadFile

from backend.api.deps import CurrentTenant, DbId, SessionDep
from backend.api.tenant_files import form_file, list_owned, multipart_form, owned_for_deletion
from backend.core.models import UploadedDataset, as_utc
from backend.core.upload_format import read_npz, upload_file
from backend.services import csv_import, tenant_files, uploads
from backend.services.errors import Invalid, TooLarge
from backend.services.uploads import MAX_UPLOAD_BYTES, TASKS
from workers.datasets.text import MAX_TEXT_BYTES, MIN_TEXT_CHARS

router = APIRouter(prefix="/api/v1/datasets", tags=["datasets"])

DRAIN_LIMIT = 64 * 1024 * 1024
"""An oversized body is read (and thrown away) up to this many bytes so the
client sees the 413 instead of a reset connection; past it we stop reading."""


class DatasetPublic(BaseModel):
    id: int
    dataset: str = Field(description="What a job spec's `dataset` field uses: upload:<id>")
    name: str
    task: str
    tasks: list[str] = Field(description="Algorithm tasks this dataset can train")
    rows: int = Field(description="Data rows; for a text dataset, its characters")
    columns: int = Field(description="Feature columns (the label column not counted); for a "
                         "text dataset, its distinct characters")
    n_classes: int
    tenant_id: int
    user_id: int
    created_at: datetime


def _public(row: UploadedDataset) -> DatasetPublic:
    return DatasetPublic(id=row.id or 0, dataset=UploadedDataset.ref.ref(row.id or 0),
                         name=row.name,
                         task=row.task, tasks=list(uploads.upload_tasks(row.task)),
                         rows=row.rows, columns=row.columns, n_classes=row.n_classes,
                         tenant_id=row.tenant_id, user_id=row.user_id,
                         created_at=as_utc(row.created_at))


async def _capped_body(request: Request) -> AsyncGenerator[bytes, None]:
    received = 0
    async for chunk in request.stream():
        received += len(chunk)
        if received > MAX_UPLOAD_BYTES:
            if received > DRAIN_LIMIT:
                break
            continue  # keep reading to the end, keep nothing
        yield chunk
    if received > MAX_UPLOAD_BYTES:
        raise TooLarge(f"the upload is over the limit of {MAX_UPLOAD_BYTES // (1024 * 1024)} MB")


_UPLOAD_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {"multipart/form-data": {"schema": {
            "type": "object",
            "required": ["file", "name", "task"],
            "properties": {
                "file": {"type": "string", "format": "binary",
                         "description": f"CSV, UTF-8, at most {MAX_UPLOAD_BYTES // 2**20} MB, "
                         f"{csv_import.MAX_ROWS:,} rows, {csv_import.MAX_COLUMNS} columns; "
                         "an optional header row. For task text: a UTF-8 text file of "
                         f"{MIN_TEXT_CHARS} characters to {MAX_TEXT_BYTES // 2**20} MB"},
                "name": {"type": "string", "maxLength": uploads.MAX_NAME_LENGTH,
                         "description": "Unique within your tenant"},
                "task": {"type": "string", "enum": list(TASKS)},
                "label": {"type": "string", "description": "Label column: a header name or a "
                          "0-based index (negative from the end); default the last column; "
                          "ignored for clustering"},
            },
        }}},
    },
}


@router.post("", status_code=status.HTTP_201_CREATED, response_model=DatasetPublic,
             openapi_extra=_UPLOAD_BODY,
             responses={409: {"description": "Name taken"},
                        413: {"description": "Over the size limit"},
                        415: {"description": "Not multipart/form-data"}})
async def upload_dataset(request: Request, session: SessionDep,
                         scope: CurrentTenant) -> DatasetPublic | JSONResponse:
    """Upload a CSV (multipart: file, name, task, optional label) as a dataset of your tenant;
    with task ``text``, a UTF-8 text file for character-level language models."""
    async with multipart_form(request, _capped_body(request),
                              fields="fields file, name and task", max_fields=10,
                              max_part_size=64 * 1024) as form:
        file = form_file(form, "the CSV")
        fields = {key: form.get(key) for key in ("name", "task", "label")}
        text = {k: v for k, v in fields.items() if isinstance(v, str)}
        for key in ("name", "task"):
            if key not in text:
                raise Invalid("this field is required", key)
        row = await run_in_threadpool(
            _create, session, scope, file, text["name"], text["task"], text.get("label"))
    return _public(row)


def _create(session: SessionDep, scope: CurrentTenant, file: UploadFile, name: str, task: str,
            label: str | None) -> UploadedDataset:
    clean_name = uploads.check_name(name)
    clean_task = uploads.check_task(task)
    tenant_id = scope.tenant.id or 0
    if uploads.name_taken(session, tenant_id, clean_name):
        raise uploads.name_clash(clean_name)
    file.file.seek(0)
    if clean_task == "text":
        return uploads.store_text_upload(session=session, text=uploads.parse_text(file.file),
                                         name=clean_name, tenant_id=tenant_id,
                                         user_id=scope.user.id or 0)
    parsed = csv_import.parse_csv(file.file, task=clean_task, label=label)
    return uploads.store_upload(session=session, parsed=parsed, name=clean_name,
                                tenant_id=tenant_id, user_id=scope.user.id or 0)


@router.get("", response_model=list[DatasetPublic])
def list_datasets(session: SessionDep, scope: CurrentTenant) -> list[DatasetPublic]:
    """Your tenant's uploaded datasets, newest first (a platform admin sees every tenant's)."""
    return [_public(r) for r in list_owned(session, scope, UploadedDataset)]


@router.get("/{dataset_id}", response_model=DatasetPublic)
def get_dataset(dataset_id: DbId, session: SessionDep, scope: CurrentTenant) -> DatasetPublic:
    """One uploaded dataset: its shape, task and the name jobs use for it."""
    return _public(scope.get_owned(session, UploadedDataset, dataset_id, noun=UploadedDataset.noun))


@router.delete("/{dataset_id}", status_code=status.HTTP_204_NO_CONTENT,
               responses={409: {"description": "Unfinished jobs use the dataset"}})
def delete_dataset(dataset_id: DbId, session: SessionDep, scope: CurrentTenant) -> None:
    """Delete an uploaded dataset (its uploader or an admin); refused (409) while an
    unfinished job uses it."""
    row = owned_for_deletion(session, scope, UploadedDataset, dataset_id, it="this dataset")
    tenant_files.delete(session, row)


class PreviewColumn(BaseModel):
    name: str
    role: Literal["feature", "label"]
    type: Literal["integer", "number", "class"] = Field(
        description="integer or number (every feature); class for a classification label, "
        "whose cells are the class names")


class DatasetPreview(BaseModel):
    id: int
    name: str
    task: str
    total_rows: int
    columns: list[PreviewColumn] = Field(description="Features in file order, then the label")
    rows: list[list[float | int | str]] = Field(description="The first rows, one value per column")
    text: str | None = Field(None, description="For a text dataset (no columns or rows): "
                             "its beginning")


def _numeric_type(values: np.ndarray) -> Literal["integer", "number"]:
    return "integer" if bool(np.all(np.equal(np.mod(values, 1), 0))) else "number"


def _cells(values: np.ndarray, kind: str) -> list[float | int | str]:
    if kind == "integer":
        return [int(v) for v in values]
    return [float(v) for v in values]


@router.get("/{dataset_id}/preview", response_model=DatasetPreview,
            responses={404: {"description": "No such dataset in your tenant, or its file is gone"}})
def preview_dataset(dataset_id: DbId, session: SessionDep, scope: CurrentTenant,
                    rows: Annotated[int, Query(ge=1, le=100)] = 10) -> DatasetPreview:
    """The first rows of an uploaded dataset as stored (features, then the label),
    with each column's name and type. The label column's CSV header is not
    kept: it is shown as "label" (classification) or "target" (regression)."""
    row = scope.get_owned(session, UploadedDataset, dataset_id, noun=UploadedDataset.noun)
    if row.task == "text":
        return _text_preview(row, dataset_id)
    try:
        arrays = read_npz(upload_file(row.path))
    except FileNotFoundError:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"the file of dataset {dataset_id} "
                            "is missing; upload it again") from None
    shown = min(rows, int(arrays.X.shape[0]))
    columns: list[PreviewColumn] = []
    values: list[list[float | int | str]] = []
    for i, name in enumerate(arrays.feature_names.tolist()):
        kind = _numeric_type(arrays.X[:, i])
        columns.append(PreviewColumn(name=str(name), role="feature", type=kind))
        values.append(_cells(arrays.X[:shown, i], kind))
    if arrays.y is not None:
        if arrays.classes is not None:
            names = arrays.classes.tolist()
            columns.append(PreviewColumn(name="label", role="label", type="class"))
            values.append([str(names[int(k)]) for k in arrays.y[:shown]])
        else:
            kind = _numeric_type(arrays.y)
            columns.append(PreviewColumn(name="target", role="label", type=kind))
            values.append(_cells(arrays.y[:shown], kind))
    table = [list(cells) for cells in zip(*values, strict=True)] if values else []
    return DatasetPreview(id=row.id or 0, name=row.name, task=row.task,
                          total_rows=int(arrays.X.shape[0]), columns=columns, rows=table)


TEXT_PREVIEW_CHARS = 2000


def _text_preview(row: UploadedDataset, dataset_id: int) -> DatasetPreview:
    try:
        with upload_file(row.path).open(encoding="utf-8") as fh:
            head = fh.read(TEXT_PREVIEW_CHARS)
    except FileNotFoundError:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"the file of dataset {dataset_id} "
                            "is missing; upload it again") from None
    return DatasetPreview(id=row.id or 0, name=row.name, task=row.task, total_rows=row.rows,
                          columns=[], rows=[], text=head)
