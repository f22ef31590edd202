"""Dataset names and tasks, the upload:<id> reference, and the npz round trip."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from backend.core.upload_format import (
    UploadArrays,
    is_upload_ref,
    parse_upload_ref,
    read_npz,
    upload_ref,
    write_npz,
)
from backend.services import uploads
from backend.services.csv_import import parse_csv
from backend.services.uploads import UploadError
from tests.utils.csv_text import csv_file as _csv
from tests.utils.csv_text import csv_table as _table


@pytest.mark.parametrize(("name", "ok"), [("iris", True), ("my data_v1.2-b", True), ("", False),
                                          ("  ", False), ("../etc", False), ("x" * 65, False),
                                          ("-lead", False)])
def test_names(name: str, ok: bool) -> None:
    if ok:
        assert uploads.check_name(f" {name} ") == name
    else:
        with pytest.raises(UploadError):
            uploads.check_name(name)


def test_tasks() -> None:
    assert uploads.check_task(" Regression ") == "regression"
    with pytest.raises(UploadError, match="classification, regression, clustering"):
        uploads.check_task("ranking")
    assert uploads.upload_tasks("classification") == ("classification", "clustering")
    assert uploads.upload_tasks("clustering") == ("clustering",)


def test_upload_refs() -> None:
    assert upload_ref(7) == "upload:7" and parse_upload_ref("upload:7") == 7
    for bad in ("upload:", "upload:0", "upload:-1", "upload:1x", "upload: 1", "iris",
                "upload:" + "9" * 30):
        assert parse_upload_ref(bad) is None
    assert is_upload_ref("upload:abc") and not is_upload_ref("digits")


def test_npz_round_trip_never_pickles(tmp_path: Path) -> None:
    parsed = parse_csv(_csv(_table(label=lambda i: "abc"[i % 3])), task="classification")
    path = tmp_path / "t" / "data.npz"
    write_npz(path, parsed.arrays)
    back = read_npz(path)
    assert np.array_equal(back.X, parsed.arrays.X)
    assert back.y is not None and back.y.tolist() == [i % 3 for i in range(12)]
    assert back.classes is not None and back.classes.tolist() == ["a", "b", "c"]
    assert [p.name for p in path.parent.iterdir()] == ["data.npz"], "no temporary file left"
    with np.load(path, allow_pickle=False) as raw:
        assert all(raw[k].dtype != object for k in raw.files)
    # An object array would need pickle: such a file is refused on read.
    evil = tmp_path / "evil.npz"
    np.savez(evil, X=np.zeros((2, 2)), feature_names=np.array([{"a": 1}, None], dtype=object))
    with pytest.raises(ValueError, match="pickle"):
        read_npz(evil)


def test_regression_arrays_feed_dataset_from_arrays(tmp_path: Path) -> None:
    from workers.datasets import dataset_from_arrays

    parsed = parse_csv(_csv(_table()), task="regression")
    write_npz(tmp_path / "r.npz", UploadArrays(parsed.arrays.X, parsed.arrays.y, None,
                                               parsed.arrays.feature_names))
    back = read_npz(tmp_path / "r.npz")
    data = dataset_from_arrays("upload:1", "regression", back.X, back.y)
    assert data.supports("regression") and not data.supports("classification")
    assert abs(float(data.X.mean())) < 1e-9
