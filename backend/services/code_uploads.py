"""Tenants' uploaded trainer code: its own checks (what every tenant file
shares, lookup, jobs using it, deletion, is :mod:`backend.services.tenant_files`'s).

An upload is one UTF-8 Python file that compiles. The API only ever
``compile()``s it (to report syntax errors at upload time); it is never
imported or run outside the sandbox (``workers.sandbox``). Files live under
``DATA_DIR/code/<tenant id>/`` with a random name; jobs name them
``"code:<id>"``; the worker finds a job's file with
``backend.core.code_refs.load_trainer_code``.
"""

from __future__ import annotations

import ast
import hashlib
import re
from pathlib import Path
from typing import Literal

from sqlmodel import Session

from backend.core.models import Tenant, TrainerCode
from backend.core.settings import get_settings
from backend.services import tenant_files
from backend.services.errors import Conflict, Forbidden, Invalid, ServiceError, TooLarge

MAX_CODE_BYTES = 256 * 1024
"""Largest accepted source file."""
MAX_NAME_LENGTH = 64
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._-]*$")


CodeUploadError = ServiceError
"""Any refused upload or deletion of code: :class:`Forbidden` (uploads are
off for the tenant), :class:`Invalid` source (at its field), :class:`TooLarge`,
:class:`Conflict` (a name taken, jobs using it)."""


def uploads_allowed(tenant: Tenant) -> None:
    if not tenant.allow_code_uploads:
        raise Forbidden(f"tenant {tenant.name!r} may not upload trainer code; a "
                              "platform admin can allow it (PATCH /api/v1/admin/tenants/"
                              "<id> with allow_code_uploads: true)")


def check_name(name: str) -> str:
    clean = name.strip()
    if not clean or len(clean) > MAX_NAME_LENGTH or not _NAME.match(clean):
        raise Invalid(f"name must be 1-{MAX_NAME_LENGTH} letters, digits, "
                              "spaces, dots, dashes or underscores, starting with a letter or "
                              "digit", "name")
    return clean


def check_source(filename: str, raw: bytes) -> str:
    """The decoded source if it is a compilable Python file within the limits."""
    if not filename.lower().endswith(".py"):
        raise Invalid("upload one Python source file whose name ends in .py",
                              "file")
    if len(raw) > MAX_CODE_BYTES:
        raise TooLarge(f"the source is over the limit of {MAX_CODE_BYTES // 1024} "
                              "KiB", "file")
    if not raw.strip():
        raise Invalid("the file is empty", "file")
    try:
        source = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Invalid(f"the file is not UTF-8 text (byte {exc.start})",
                              "file") from None
    try:
        # Compiling parses only: no module code runs in the API process.
        compile(source, filename, "exec", dont_inherit=True)
    except SyntaxError as exc:
        where = f" at line {exc.lineno}" if exc.lineno else ""
        if not where:  # e.g. NUL bytes: not a mistake in any one line
            raise Invalid(f"not valid Python source: {exc.msg}", "file") from None
        raise Invalid(f"Python syntax error{where}: {exc.msg}", "file") from None
    except ValueError as exc:  # e.g. NUL bytes
        raise Invalid(f"not valid Python source: {exc}", "file") from None
    return source


Contract = Literal["trainer", "loop", "unknown"]


_CONTRACTS: dict[str, Contract] = {}
"""Contract by source digest: a listing parses each distinct file once."""


def code_contract(row: TrainerCode) -> Contract:
    """Which contract an upload follows, read from its source: a Trainer
    subclass, or a loop function ``train(params, data, ctx)`` (the sandbox
    decides the same way, a Trainer subclass first)."""
    found = _CONTRACTS.get(row.sha256)
    if found is None:
        try:
            found = contract_of((get_settings().data_dir / row.path).read_bytes())
        except OSError:
            return "unknown"
        if len(_CONTRACTS) > 1024:
            _CONTRACTS.clear()
        _CONTRACTS[row.sha256] = found
    return found


def contract_of(raw: bytes) -> Contract:
    try:
        tree = ast.parse(raw.decode("utf-8"))
    except (SyntaxError, ValueError):
        return "unknown"
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and any(
                (base.id if isinstance(base, ast.Name) else
                 base.attr if isinstance(base, ast.Attribute) else "").endswith("Trainer")
                for base in node.bases):
            return "trainer"
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "train":
            return "loop"
    return "unknown"


def store_code(session: Session, *, tenant_id: int, user_id: int, name: str, filename: str,
               raw: bytes) -> TrainerCode:
    """Write the source and insert its row; raises Conflict on a name clash."""
    relative = tenant_files.new_path(TrainerCode, tenant_id, ".py")
    target = get_settings().data_dir / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(raw)
    row = TrainerCode(tenant_id=tenant_id, user_id=user_id, name=name,
                      filename=Path(filename).name[:255], path=relative.as_posix(),
                      sha256=hashlib.sha256(raw).hexdigest(), size=len(raw))
    return tenant_files.insert(session, row, name_clash=Conflict(
        f"trainer code named {name!r} exists already", "name"))

