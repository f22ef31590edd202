"""Tenants' uploaded datasets on the worker side: loading an upload into a
``Dataset`` (the file format lives in ``backend.core.upload_format``).

A job names an uploaded dataset as ``"upload:<id>"`` (the id returned by
``POST /api/v1/datasets``). The API checks at submit time that the upload
belongs to the job's tenant; the worker checks again here, so a job can never
read another tenant's data even if the database were edited by hand.
"""

from __future__ import annotations

import functools
from pathlib import Path

from sqlalchemy.engine import Engine
from sqlmodel import Session

from backend.core.models import Job, UploadedDataset
from backend.core.owned import find_owned
from backend.core.upload_format import is_upload_ref, parse_upload_ref, read_npz, upload_file
from workers.datasets import Dataset, Task, dataset_from_arrays, load_dataset


class UploadMissing(LookupError):
    """The job's uploaded dataset is gone or belongs to another tenant."""


def load_uploaded(engine: Engine, dataset: str, *, tenant_id: int) -> Dataset:
    """The ``Dataset`` for ``"upload:<id>"``, which must belong to ``tenant_id``."""
    upload_id = parse_upload_ref(dataset)
    if upload_id is None:
        raise UploadMissing(f"{dataset!r} is not an upload reference (upload:<id>)")
    with Session(engine) as session:
        row = find_owned(session, UploadedDataset, upload_id, tenant_id)
        if row is None:
            raise UploadMissing(f"uploaded dataset {upload_id} does not exist (deleted?)")
        path, task = row.path, row.task
    return _load_file(str(upload_file(path)), task, dataset)


@functools.lru_cache(maxsize=8)
def _load_file(path: str, task: str, name: str) -> Dataset:
    # Keyed by path: file names are random and never reused, so a cached entry
    # can never describe a different (re-uploaded) dataset.
    arrays = read_npz(Path(path))
    kind: Task = "regression" if task == "regression" else (
        "classification" if task == "classification" else "clustering")
    y = arrays.y if kind != "clustering" else None
    return dataset_from_arrays(name, kind, arrays.X, y)


def resolve_dataset(engine: Engine, job: Job) -> Dataset:
    """The dataset a job trains on: a registered one, or its tenant's upload."""
    if is_upload_ref(job.dataset):
        return load_uploaded(engine, job.dataset, tenant_id=job.tenant_id)
    return load_dataset(job.dataset, job.dataset_params)
