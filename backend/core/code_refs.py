"""How a job names a tenant's uploaded trainer code: ``"code:<id>"``
(the form shared with datasets lives in :mod:`backend.core.file_refs`)."""

from __future__ import annotations

from backend.core.file_refs import CODE

CODE_PREFIX = CODE.prefix

code_ref = CODE.ref
"""The algorithm name a job spec uses for uploaded trainer ``code_id``."""
is_code_ref = CODE.is_ref
parse_code_ref = CODE.parse
"""The code id in ``"code:<id>"``, or None if ``algorithm`` is not that form."""
