"""Tenants' CSV datasets: limits, parsing and validation, storage, lookup.

A CSV becomes a dataset in three steps: :func:`parse_csv` reads it row by row
into numeric arrays (refusing anything it would have to guess about, with the
row and column named), :func:`store_upload` writes the arrays as an ``.npz``
under ``DATA_DIR/uploads/<tenant id>/`` and inserts the ``UploadedDataset``
row, and jobs refer to it as ``"upload:<id>"`` (see :mod:`workers.datasets.uploaded`).

A UTF-8 ``.txt`` file uploaded with task ``text`` (for language models) is
checked by :func:`workers.datasets.text.clean_text` and stored as a ``.txt`` file
by :func:`store_text_upload`; its row counts characters (``rows``) and
distinct characters (``columns``).
"""

from __future__ import annotations

import csv
import io
import itertools
import math
import re
import uuid
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session

from backend.core.models import FINISHED, Job, UploadedDataset
from backend.core.settings import get_settings
from backend.core.upload_format import UploadArrays, upload_ref, write_npz, write_text_file
from backend.services.errors import Conflict, Invalid, ServiceError

MAX_UPLOAD_BYTES = 20 * 1024 * 1024
"""Largest accepted request body for an upload (the CSV plus form overhead)."""
MAX_ROWS = 200_000
"""Most data rows in one CSV (the header does not count)."""
MAX_COLUMNS = 500
"""Most columns in one CSV, the label column included."""
MIN_ROWS = 10
"""Fewest data rows worth training on."""
MIN_FEATURES = 1
"""Fewest feature columns (besides the label)."""
MAX_CLASSES = 1000
"""Most distinct labels for classification; more is almost surely a regression target."""
MAX_NAME_LENGTH = 64
"""Longest dataset name (the database column's width)."""
TASKS = ("classification", "regression", "clustering", "text")
"""What an uploaded dataset can be for (text: a .txt file for language models)."""

UploadTask = Literal["classification", "regression", "clustering"]
TextTask = Literal["text"]
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._-]*$")
_BLOCK = 4096  # rows converted to numpy at a time


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


@dataclass(frozen=True, eq=False)
class ParsedCsv:
    arrays: UploadArrays
    task: UploadTask
    label_name: str | None

    @property
    def rows(self) -> int:
        return int(self.arrays.X.shape[0])

    @property
    def columns(self) -> int:
        return int(self.arrays.X.shape[1])

    @property
    def n_classes(self) -> int:
        return 0 if self.arrays.classes is None else int(self.arrays.classes.size)


def _number(cell: str) -> float | None:
    try:
        return float(cell)
    except ValueError:
        return None


def _rows(lines: Iterable[str], delimiter: str = ",") -> Generator[list[str], None, None]:
    try:
        yield from csv.reader(lines, delimiter=delimiter, strict=True)
    except UnicodeDecodeError:
        raise _invalid("file", "not UTF-8 text; save the CSV as UTF-8") from None
    except csv.Error as exc:
        raise _invalid("file", f"not a readable CSV: {exc}") from None


def _label_index(label: str | None, header: list[str] | None, width: int) -> int:
    if label is None or not label.strip():
        return width - 1
    wanted = label.strip()
    if header is not None and wanted in header:
        if header.count(wanted) > 1:
            raise _invalid("label", f"more than one column is named {wanted!r}; use its index")
        return header.index(wanted)
    try:
        index = int(wanted)
    except ValueError:
        names = f"; columns are {', '.join(header[:20])}" if header else " (the file has no header)"
        raise _invalid("label", f"no column named {wanted!r}{names}") from None
    if not -width <= index < width:
        raise _invalid("label", f"column index {index} is out of range for {width} columns")
    return index % width


DELIMITERS = (",", ";", "\t")
"""Cell separators an upload may use, in order of preference when the first
lines fit more than one equally well."""
_HEAD_LINES = 20


def _head(text: IO[str]) -> list[str]:
    """The first lines of the file, to choose its delimiter from."""
    head: list[str] = []
    for _ in range(_HEAD_LINES):
        line = text.readline()
        if not line:
            break
        head.append(line)
    return head


def _delimiter(head: list[str]) -> str:
    """The separator that splits every non-blank head line into the same number
    (more than one) of cells, the widest such split winning; ',' when none does.

    A header line settles most ambiguities ("1,5;2,3" splits both ways, but a
    header "a;b" only one way)."""
    best, best_width = ",", 1
    for candidate in DELIMITERS:
        try:
            widths = {len(row) for row in csv.reader(head, delimiter=candidate)
                      if any(cell.strip() for cell in row)}
        except csv.Error:
            continue
        if len(widths) == 1 and (width := widths.pop()) > best_width:
            best, best_width = candidate, width
    return best


def parse_csv(stream: IO[bytes], *, task: UploadTask, label: str | None = None) -> ParsedCsv:
    """Read a CSV into validated numeric arrays (see :func:`_parse`); ``stream``
    is read line by line and left open. Cells may be separated by commas,
    semicolons or tabs (see :func:`_delimiter`)."""
    text = io.TextIOWrapper(stream, encoding="utf-8-sig", newline="")
    try:
        head = _head(text)
    except UnicodeDecodeError:
        text.detach()
        raise _invalid("file", "not UTF-8 text; save the CSV as UTF-8") from None
    rows = _rows(itertools.chain(head, text), _delimiter(head))
    try:
        return _parse(rows, task=task, label=label)
    finally:
        rows.close()
        text.detach()


def _parse(rows: Iterator[list[str]], *, task: UploadTask, label: str | None) -> ParsedCsv:
    """Read a CSV into validated numeric arrays.

    The first row is a header when any of its cells is not a number. Every
    other cell must be a finite number, except classification labels, which
    may be any text (class names). ``label`` is a column name or a 0-based
    index (negative counts from the end); the last column by default. For
    clustering every column is a feature and ``label`` is ignored.
    """
    first: list[str] | None = None
    for first_row in rows:
        if any(cell.strip() for cell in first_row):
            first = first_row
            break
    if first is None:
        raise _invalid("file", "the CSV is empty")
    width = len(first)
    if width > MAX_COLUMNS:
        raise _invalid("file", f"{width} columns; at most {MAX_COLUMNS} are accepted")
    has_header = any(_number(cell) is None for cell in first)
    header = [cell.strip() for cell in first] if has_header else None
    names = header or [f"column {i + 1}" for i in range(width)]
    label_at = None if task == "clustering" else _label_index(label, header, width)
    n_features = width - (0 if label_at is None else 1)
    if n_features < MIN_FEATURES:
        raise _invalid("file", f"needs at least {MIN_FEATURES} feature column besides the label; "
                       f"it has {width} column(s)" + (_format_hint(first[0]) if width == 1 else ""))
    feature_cols = [i for i in range(width) if i != label_at]
    body: Iterable[list[str]] = rows if has_header else _chain(first, rows)
    blocks: list[np.ndarray] = []
    block: list[list[float]] = []
    labels: list[str] = []
    targets: list[float] = []
    line = 1 if has_header else 0
    count = 0
    for row in body:
        line += 1
        if not row or not any(cell.strip() for cell in row):
            continue  # blank lines, e.g. a trailing newline
        count += 1
        if count > MAX_ROWS:
            raise _invalid("file", f"more than {MAX_ROWS:,} data rows")
        if len(row) != width:
            raise _invalid("file", f"row {line}: {len(row)} cells but the first row has {width}")
        values: list[float] = []
        for col in feature_cols:
            values.append(_cell(row[col], line, names[col]))
        block.append(values)
        if label_at is not None:
            raw = row[label_at].strip()
            if task == "regression":
                targets.append(_cell(raw, line, names[label_at]))
            elif not raw:
                raise _invalid("file",
                               f"row {line}, column {names[label_at]!r}: the label is empty")
            else:
                labels.append(raw)
        if len(block) >= _BLOCK:
            blocks.append(np.asarray(block, dtype=np.float64))
            block = []
    if block:
        blocks.append(np.asarray(block, dtype=np.float64))
    if count == 0:
        raise _invalid("file", "the CSV has a header but no data rows" if has_header
                       else "the CSV is empty")
    if count < MIN_ROWS:
        raise _invalid("file", f"{count} data rows; at least {MIN_ROWS} are needed")
    X = np.concatenate(blocks, axis=0)
    y: np.ndarray | None = None
    classes: np.ndarray | None = None
    if task == "regression":
        y = np.asarray(targets, dtype=np.float64)
    elif task == "classification":
        classes, y = _encode_labels(labels)
    feature_names = np.asarray([names[i] for i in feature_cols], dtype=str)
    arrays = UploadArrays(X=X, y=y, classes=classes, feature_names=feature_names)
    return ParsedCsv(arrays=arrays, task=task,
                     label_name=None if label_at is None else names[label_at])


def _chain(first: list[str], rest: Iterator[list[str]]) -> Iterator[list[str]]:
    yield first
    yield from rest


def _cell(raw: str, line: int, column: str) -> float:
    text = raw.strip()
    if not text:
        raise _invalid("file", f"row {line}, column {column!r}: empty cell; "
                       "fill in or drop missing values")
    value = _number(text)
    if value is None:
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise _invalid("file", f"row {line}, column {column!r}: {shown!r} is not a number"
                       + _format_hint(text))
    if not math.isfinite(value):
        raise _invalid("file", f"row {line}, column {column!r}: {text!r} is not a finite number")
    return value


_DECIMAL_COMMA = re.compile(r"^[+-]?[0-9]+,[0-9]+$")


def _format_hint(text: str) -> str:
    """Why a cell may have failed to read as a number, when it looks like a
    file written with other separators than the ones detected."""
    for separator, name in ((";", "';'"), ("\t", "tab")):
        if separator in text:
            return (f"; the file looks {name}-separated but its first lines do not split "
                    "evenly on it: check that every row has the same number of cells")
    if _DECIMAL_COMMA.match(text):
        return "; it looks like a decimal comma: write decimals with '.' (e.g. 1.5)"
    return ""


def _encode_labels(labels: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Class names and each row's class index. When every label is a number
    they are compared as numbers (so "1" and "1.0" are one class, and 2 < 10);
    otherwise as text, sorted alphabetically."""
    numbers = {name: _number(name) for name in set(labels)}
    values = {name: v for name, v in numbers.items() if v is not None and math.isfinite(v)}
    if len(values) == len(numbers):
        first_name: dict[float, str] = {}
        for name in sorted(values):
            first_name.setdefault(values[name], name)
        ordered = sorted(first_name)
        position = {v: i for i, v in enumerate(ordered)}
        order = [first_name[v] for v in ordered]
        index = {name: position[v] for name, v in values.items()}
    else:
        order = sorted(numbers)
        index = {name: i for i, name in enumerate(order)}
    if len(order) < 2:
        raise _invalid("label", f"classification needs at least 2 classes; every row is "
                       f"{order[0]!r}")
    if len(order) > MAX_CLASSES:
        raise _invalid("label", f"{len(order)} distinct values; at most {MAX_CLASSES} classes "
                       "(is this a regression target?)")
    y = np.fromiter((index[name] for name in labels), dtype=np.int64, count=len(labels))
    return np.asarray(order, dtype=str), y


def uploads_root() -> Path:
    return get_settings().data_dir / "uploads"


def name_taken(session: Session, tenant_id: int, name: str) -> bool:
    return session.execute(
        select(UploadedDataset.id).where(  # type: ignore[call-overload]
            UploadedDataset.tenant_id == tenant_id, UploadedDataset.name == name)
    ).first() is not None


def store_upload(*, session: Session, parsed: ParsedCsv, name: str, tenant_id: int,
                 user_id: int) -> UploadedDataset:
    """Write the arrays and insert the row; raises Conflict on a name clash."""
    relative = Path("uploads") / str(tenant_id) / f"{uuid.uuid4().hex}.npz"
    target = get_settings().data_dir / relative
    write_npz(target, parsed.arrays)
    row = UploadedDataset(tenant_id=tenant_id, user_id=user_id, name=name, task=parsed.task,
                          rows=parsed.rows, columns=parsed.columns, n_classes=parsed.n_classes,
                          path=relative.as_posix())
    return _insert(session, row, target, name)


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
    relative = Path("uploads") / str(tenant_id) / f"{uuid.uuid4().hex}.txt"
    target = get_settings().data_dir / relative
    write_text_file(target, text)
    row = UploadedDataset(tenant_id=tenant_id, user_id=user_id, name=name, task="text",
                          rows=len(text), columns=len(set(text)), n_classes=0,
                          path=relative.as_posix())
    return _insert(session, row, target, name)


def _insert(session: Session, row: UploadedDataset, target: Path, name: str) -> UploadedDataset:
    """Insert an upload's row whose file is written; removes the file if that fails."""
    session.add(row)
    try:
        session.commit()
    except IntegrityError:
        session.rollback()
        target.unlink(missing_ok=True)
        raise Conflict(f"name: a dataset named {name!r} exists already") from None
    except BaseException:
        session.rollback()
        target.unlink(missing_ok=True)
        raise
    session.refresh(row)
    return row


def find_upload(session: Session, upload_id: int, tenant_id: int | None) -> UploadedDataset | None:
    """The upload if it exists and ``tenant_id`` may see it (None: any tenant)."""
    row = session.get(UploadedDataset, upload_id)
    if row is None or (tenant_id is not None and row.tenant_id != tenant_id):
        return None
    return row


def jobs_using(session: Session, upload: UploadedDataset) -> int:
    """How many unfinished jobs train on ``upload``."""
    return int(session.execute(
        select(func.count()).select_from(Job).where(
            Job.dataset == upload_ref(upload.id or 0),  # type: ignore[arg-type]
            Job.tenant_id == upload.tenant_id,  # type: ignore[arg-type]
            Job.status.notin_(list(FINISHED)))  # type: ignore[attr-defined]
    ).scalar_one())


def delete_upload(session: Session, upload: UploadedDataset) -> None:
    """Delete the row and then the file; raises Conflict while jobs use it."""
    busy = jobs_using(session, upload)
    if busy:
        raise Conflict(f"dataset {upload.id} is used by {busy} unfinished job(s); "
                          "cancel them or wait for them to finish")
    path = get_settings().data_dir / upload.path
    session.delete(upload)
    session.commit()
    path.unlink(missing_ok=True)


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

