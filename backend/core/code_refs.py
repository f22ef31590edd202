"""How a job names a tenant's uploaded trainer code: ``"code:<id>"``."""

from __future__ import annotations

import re

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
