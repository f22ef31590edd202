"""The uploaded-dataset file format, shared by the API (which writes uploads)
and the workers (which read them): the ``upload:<id>`` reference a job spec
uses, and the ``.npz`` files under ``DATA_DIR``.

Files are plain ``numpy.savez`` archives of numeric and unicode arrays, read
with ``allow_pickle=False``: nothing in an upload can execute code. Text
uploads (task ``text``) are plain UTF-8 ``.txt`` files.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from backend.core.file_refs import UPLOAD
from backend.core.settings import get_settings

UPLOAD_PREFIX = UPLOAD.prefix
"""Datasets whose name starts with this are tenants' uploads, by id."""

upload_ref = UPLOAD.ref
"""The dataset name a job spec uses for upload ``upload_id``."""
is_upload_ref = UPLOAD.is_ref
parse_upload_ref = UPLOAD.parse
"""The upload id in ``"upload:<id>"``, or None if ``dataset`` is not that form."""


@dataclass(frozen=True, eq=False)
class UploadArrays:
    """What an upload file holds: raw (unstandardised) features and targets."""

    X: np.ndarray
    y: np.ndarray | None  # class indices (int64) or regression targets (float64)
    classes: np.ndarray | None  # class names (unicode), index i names class i
    feature_names: np.ndarray  # unicode, one per column of X


def write_npz(path: Path, arrays: UploadArrays) -> None:
    """Write ``arrays`` to ``path`` atomically (temporary file, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    parts: dict[str, np.ndarray] = {"X": np.ascontiguousarray(arrays.X, dtype=np.float64),
                                    "feature_names": np.asarray(arrays.feature_names, dtype=str)}
    if arrays.y is not None:
        parts["y"] = np.asarray(arrays.y)
    if arrays.classes is not None:
        parts["classes"] = np.asarray(arrays.classes, dtype=str)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("wb") as fh:
            np.savez(fh, **parts)  # type: ignore[arg-type]
            fh.flush()
            os.fsync(fh.fileno())
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text_file(path: Path, text: str) -> None:
    """Write a text upload to ``path`` as UTF-8, atomically (temporary file, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("wb") as fh:
            fh.write(text.encode("utf-8"))
            fh.flush()
            os.fsync(fh.fileno())
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def read_npz(path: Path) -> UploadArrays:
    """Read an upload file; never unpickles."""
    with np.load(path, allow_pickle=False) as data:
        X = np.asarray(data["X"], dtype=np.float64)
        y = np.asarray(data["y"]) if "y" in data.files else None
        classes = np.asarray(data["classes"]) if "classes" in data.files else None
        names = np.asarray(data["feature_names"]) if "feature_names" in data.files else \
            np.asarray([f"x{i}" for i in range(X.shape[1])])
    return UploadArrays(X=X, y=y, classes=classes, feature_names=names)


def upload_file(relative: str) -> Path:
    """The absolute path of an upload file stored relative to the data dir."""
    return get_settings().data_dir / relative
