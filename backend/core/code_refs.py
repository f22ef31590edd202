"""How a job names a tenant's uploaded trainer code (``"code:<id>"``; the form
shared with datasets lives in :mod:`backend.core.file_refs`), and where that
code's source file is for the worker that sandboxes it."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.engine import Engine
from sqlmodel import Session

from backend.core.file_refs import CODE
from backend.core.models import TrainerCode
from backend.core.owned import find_owned
from backend.core.settings import get_settings

CODE_PREFIX = CODE.prefix

code_ref = CODE.ref
"""The algorithm name a job spec uses for uploaded trainer ``code_id``."""
is_code_ref = CODE.is_ref
parse_code_ref = CODE.parse
"""The code id in ``"code:<id>"``, or None if ``algorithm`` is not that form."""


def load_trainer_code(engine: Engine, code_ref_text: str, tenant_id: int, *,
                      data_dir: Path | None = None) -> Path:
    """The source file a job's ``"code:<id>"`` names, only if ``tenant_id`` owns it.

    Raises LookupError with a readable reason otherwise (no such code, another
    tenant's, or its file gone): the worker fails the job with it.
    """
    code_id = parse_code_ref(code_ref_text)
    if code_id is None:
        raise LookupError(f"{code_ref_text!r} is not a trainer code reference (code:<id>)")
    with Session(engine) as session:
        # Another tenant's code is reported as missing, as the API does.
        row = find_owned(session, TrainerCode, code_id, tenant_id)
    if row is None:
        raise LookupError(f"trainer code {code_id} not found")
    path = ((data_dir or get_settings().data_dir) / row.path).resolve()
    if not path.is_file():
        raise LookupError(f"trainer code {code_id}: its source file is missing")
    return path
