"""Tenants' datasets: names and tasks, storage, lookup (what every tenant
file shares is :mod:`backend.services.tenant_files`'s).

A CSV becomes a dataset in three steps: :func:`backend.services.csv_import.
parse_csv` reads it row by row into numeric arrays (refusing anything it would
have to guess about, with the row and column named), :func:`store_upload`
writes the arrays as an ``.npz`` under ``DATA_DIR/uploads/<tenant id>/`` and
inserts the ``UploadedDataset`` row, and jobs refer to it as ``"upload:<id>"``
(see :mod:`workers.datasets.uploaded`).

A UTF-8 ``.txt`` file uploaded with task ``text`` (for language models) is
checked by :func:`workers.datasets.text.clean_text` and stored as a ``.txt`` file
by :func:`store_text_upload`; its row counts characters (``rows``) and
distinct characters (``columns``).
"""

from __future__ import annotations

import re
from typing import IO, Literal

from sqlmodel import Session

from backend.core.models import UploadedDataset
from backend.core.settings import get_settings
from backend.core.upload_format import write_npz, write_text_file
from backend.services import tenant_files
from backend.services.csv_import import ParsedCsv, UploadTask
from backend.services.errors import Conflict, Invalid, ServiceError

MAX_UPLOAD_BYTES = 20 * 1024 * 1024
"""Largest accepted request body for an upload (the CSV plus form overhead)."""
MAX_NAME_LENGTH = 64
"""Longest dataset name (the database column's width)."""
TASKS = ("classification", "regression", "clustering", "text")
"""What an uploaded dataset can be for (text: a .txt file for language models)."""

TextTask = Literal["text"]
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._-]*$")


UploadError = ServiceError
"""Any refused upload: :class:`Invalid` content (at its field), a name
taken (:class:`Conflict`), a file over the size limit (:class:`TooLarge`)."""


def _invalid(field: str, message: str) -> Invalid:
    return Invalid(message, field)


def check_name(name: str) -> str:
    """The dataset name, trimmed; refuses empty, too long or odd names."""
    clean = name.strip()
    if not clean:
        raise _invalid("name", "give the dataset a name")
    if len(clean) > MAX_NAME_LENGTH:
        raise _invalid("name", f"at most {MAX_NAME_LENGTH} characters")
    if not _NAME.match(clean):
        raise _invalid("name", "use letters, digits, spaces, '.', '_' or '-', "
                       "starting with a letter or digit")
    return clean


def check_task(task: str) -> UploadTask | TextTask:
    clean = task.strip().lower()
    if clean == "text":
        return "text"
    if clean == "classification":
        return "classification"
    if clean == "regression":
        return "regression"
    if clean == "clustering":
        return "clustering"
    raise _invalid("task", f"must be one of {', '.join(TASKS)}; got {task!r}")


def name_taken(session: Session, tenant_id: int, name: str) -> bool:
    return tenant_files.name_taken(session, UploadedDataset, tenant_id, name)


def name_clash(name: str) -> Conflict:
    """The refusal of a second dataset named ``name`` in one tenant."""
    return Conflict(f"name: a dataset named {name!r} exists already")


def store_upload(*, session: Session, parsed: ParsedCsv, name: str, tenant_id: int,
                 user_id: int) -> UploadedDataset:
    """Write the arrays and insert the row; raises Conflict on a name clash."""
    relative = tenant_files.new_path(UploadedDataset, tenant_id, ".npz")
    write_npz(get_settings().data_dir / relative, parsed.arrays)
    row = UploadedDataset(tenant_id=tenant_id, user_id=user_id, name=name, task=parsed.task,
                          rows=parsed.rows, columns=parsed.columns, n_classes=parsed.n_classes,
                          path=relative.as_posix())
    return tenant_files.insert(session, row, name_clash=name_clash(name))


def parse_text(stream: IO[bytes]) -> str:
    """An uploaded text file, decoded and checked (see :func:`workers.datasets.text.clean_text`)."""
    from workers.datasets.text import MAX_TEXT_BYTES, clean_text

    try:
        # One byte past the limit is enough for clean_text to refuse it.
        return clean_text(stream.read(MAX_TEXT_BYTES + 1))
    except ValueError as exc:
        raise _invalid("file", str(exc)) from None


def store_text_upload(*, session: Session, text: str, name: str, tenant_id: int,
                      user_id: int) -> UploadedDataset:
    """Write a checked text as UTF-8 and insert its row (task ``text``: ``rows``
    counts characters, ``columns`` distinct characters); Conflict on a name clash."""
    relative = tenant_files.new_path(UploadedDataset, tenant_id, ".txt")
    write_text_file(get_settings().data_dir / relative, text)
    row = UploadedDataset(tenant_id=tenant_id, user_id=user_id, name=name, task="text",
                          rows=len(text), columns=len(set(text)), n_classes=0,
                          path=relative.as_posix())
    return tenant_files.insert(session, row, name_clash=name_clash(name))


def find_upload(session: Session, upload_id: int, tenant_id: int | None) -> UploadedDataset | None:
    """The upload if it exists and ``tenant_id`` may see it (None: any tenant)."""
    return tenant_files.find_owned(session, UploadedDataset, upload_id, tenant_id)


def upload_tasks(task: str) -> tuple[str, ...]:
    """Which algorithm tasks an upload made for ``task`` supports (as the
    built-in catalogue does: labelled data can also be clustered)."""
    if task == "classification":
        return ("classification", "clustering")
    if task == "regression":
        return ("regression", "clustering")
    if task == "text":
        return ("text",)
    return ("clustering",)

