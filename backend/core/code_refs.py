"""How a job names a tenant's uploaded trainer code (``"code:<id>"``), and
where that code's source file is for the worker that sandboxes it."""

from __future__ import annotations

import re
from pathlib import Path

from sqlalchemy.engine import Engine
from sqlmodel import Session

from backend.core.models import TrainerCode
from backend.core.settings import get_settings

CODE_PREFIX = "code:"
_REF = re.compile(r"^code:([1-9][0-9]{0,17})$")


def code_ref(code_id: int) -> str:
    """The algorithm name a job spec uses for uploaded trainer ``code_id``."""
    return f"{CODE_PREFIX}{code_id}"


def is_code_ref(algorithm: str) -> bool:
    return algorithm.startswith(CODE_PREFIX)


def parse_code_ref(algorithm: str) -> int | None:
    """The code id in ``"code:<id>"``, or None if ``algorithm`` is not that form."""
    match = _REF.match(algorithm)
    return int(match.group(1)) if match else None


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
        row = session.get(TrainerCode, code_id)
    # Another tenant's code is reported as missing, as the API does.
    if row is None or row.tenant_id != tenant_id:
        raise LookupError(f"trainer code {code_id} not found")
    path = ((data_dir or get_settings().data_dir) / row.path).resolve()
    if not path.is_file():
        raise LookupError(f"trainer code {code_id}: its source file is missing")
    return path
