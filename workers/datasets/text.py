"""Text datasets for language-model trainers: the built-in corpus and uploads.

The built-in corpus ships with the repository (``data/corpus/``: docstrings of
Python standard-library modules, PSF License, made by
``data/corpus/make_corpus.py``) so demos and tests work offline. Tenants
upload UTF-8 ``.txt`` files; :func:`clean_text` is the one set of rules both
the upload API and the worker apply. Every text is split the same way: the
first 90% (cut at a line break when one is near) trains, the rest validates.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

CORPUS_DIR = Path(__file__).resolve().parents[2] / "data" / "corpus"

MAX_TEXT_BYTES = 5 * 1024 * 1024
"""Largest text upload, in UTF-8 bytes (a char model learns plenty from less)."""
MIN_TEXT_CHARS = 200
"""Fewest characters worth training on (after cleaning)."""
MAX_VOCABULARY = 2000
"""Most distinct characters; more would make the model's output layer the job."""
VALIDATION_FRACTION = 0.1


@dataclass(frozen=True)
class TextDataset:
    """A built-in text dataset, for the catalogue."""

    name: str
    title: str
    description: str
    file: str


TEXT_DATASETS: dict[str, TextDataset] = {
    d.name: d for d in (
        TextDataset("python_docs", "Python docstrings",
                    "337k characters of Python standard-library docstrings (PSF License), "
                    "for character-level language models.",
                    "python_docstrings.txt"),
    )
}


def clean_text(raw: bytes) -> str:
    """Decode and check an uploaded text; raises ValueError saying what to fix.

    Accepts UTF-8 (a byte-order mark is dropped) with any line endings
    (normalised to ``\\n``); refuses binary files, empty or tiny texts and
    texts with more than :data:`MAX_VOCABULARY` distinct characters.
    """
    if len(raw) > MAX_TEXT_BYTES:
        raise ValueError(f"the text is over the limit of {MAX_TEXT_BYTES // 2**20} MB")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 text (byte {exc.start} is invalid); save the file "
                         "as UTF-8") from None
    if "\x00" in text:
        raise ValueError("the file contains NUL bytes: it looks binary, not text")
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if len(text.strip()) < MIN_TEXT_CHARS:
        raise ValueError(f"{len(text.strip())} characters of text; at least "
                         f"{MIN_TEXT_CHARS} are needed")
    vocabulary = len(set(text))
    if vocabulary > MAX_VOCABULARY:
        raise ValueError(f"{vocabulary} distinct characters; at most {MAX_VOCABULARY} "
                         "are accepted")
    return text


def split_text(text: str) -> tuple[str, str]:
    """(train, validation): the last ~10% validates, cut at a line break when
    one lies within 200 characters of the cut so no word is split."""
    cut = int(len(text) * (1 - VALIDATION_FRACTION))
    newline = text.rfind("\n", max(cut - 200, 1), cut)
    if newline > 0:
        cut = newline + 1
    return text[:cut], text[cut:]


@functools.lru_cache(maxsize=4)
def load_text(name: str) -> tuple[str, str]:
    """(train, validation) text of the built-in text dataset ``name``."""
    info = TEXT_DATASETS.get(name)
    if info is None:
        raise KeyError(f"unknown text dataset {name!r}; known: {', '.join(sorted(TEXT_DATASETS))}")
    return split_text((CORPUS_DIR / info.file).read_text(encoding="utf-8"))


def text_from_upload(path: str | Path) -> tuple[str, str]:
    """(train, validation) text of an uploaded ``.txt`` file, checked again
    with :func:`clean_text` (the file on disk is not trusted blindly)."""
    return split_text(clean_text(Path(path).read_bytes()))


def job_text(engine: Engine, dataset: str, *, tenant_id: int) -> tuple[str, str] | None:
    """(train, validation) text of a job's dataset, or None when it is a table.

    ``dataset`` is a built-in text dataset's name or ``"upload:<id>"``; an
    upload must belong to ``tenant_id`` (checked again here, as for tables).
    """
    from sqlmodel import Session

    from backend.core.models import UploadedDataset
    from backend.core.upload_format import parse_upload_ref, upload_file
    from workers.datasets.uploaded import UploadMissing

    if dataset in TEXT_DATASETS:
        return load_text(dataset)
    upload_id = parse_upload_ref(dataset)
    if upload_id is None:
        return None
    with Session(engine) as session:
        row = session.get(UploadedDataset, upload_id)
        if row is None or row.tenant_id != tenant_id:
            raise UploadMissing(f"uploaded dataset {upload_id} does not exist (deleted?)")
        if row.task != "text":
            return None
        path = str(upload_file(row.path))
    return _upload_text(path)


@functools.lru_cache(maxsize=4)
def _upload_text(path: str) -> tuple[str, str]:
    # Keyed by path: upload file names are random and never reused.
    return text_from_upload(path)
