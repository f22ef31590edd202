"""CSV parsing and validation for uploaded datasets, and the npz round trip."""

from __future__ import annotations

import io
from collections.abc import Callable
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
from backend.services.errors import Invalid
from backend.services.uploads import UploadError, parse_csv


def _csv(text: str) -> io.BytesIO:
    return io.BytesIO(text.encode())


def _table(rows: int = 12, header: str | None = "a,b,label",
           label: Callable[[int], object] = lambda i: i % 2) -> str:
    lines = [header] if header else []
    for i in range(rows):
        lines.append(f"{i},{i * 0.5},{label(i)}")
    return "\n".join(lines) + "\n"


def _refused(text: str | bytes, task: uploads.UploadTask = "classification",
             label: str | None = None) -> UploadError:
    data = text if isinstance(text, bytes) else text.encode()
    with pytest.raises(UploadError) as info:
        parse_csv(io.BytesIO(data), task=task, label=label)
    assert isinstance(info.value, Invalid)  # answered 422 (backend.api.errors)
    return info.value


def test_classification_with_header_and_default_label() -> None:
    parsed = parse_csv(_csv(_table()), task="classification")
    assert (parsed.rows, parsed.columns, parsed.n_classes) == (12, 2, 2)
    assert parsed.label_name == "label"
    assert list(parsed.arrays.feature_names) == ["a", "b"]
    assert parsed.arrays.y is not None and parsed.arrays.y.tolist() == [i % 2 for i in range(12)]
    assert parsed.arrays.X[3].tolist() == [3.0, 1.5]


def test_label_by_name_index_and_negative_index() -> None:
    text = _table()
    by_name = parse_csv(_csv(text), task="regression", label="a")
    assert by_name.label_name == "a" and list(by_name.arrays.feature_names) == ["b", "label"]
    by_index = parse_csv(_csv(text), task="regression", label="0")
    assert np.array_equal(by_index.arrays.X, by_name.arrays.X)
    by_negative = parse_csv(_csv(text), task="classification", label="-1")
    assert by_negative.label_name == "label"


def test_no_header_means_every_row_is_data() -> None:
    parsed = parse_csv(_csv(_table(header=None)), task="classification")
    assert parsed.rows == 12
    assert list(parsed.arrays.feature_names) == ["column 1", "column 2"]


def test_text_labels_become_classes_and_numeric_labels_sort_as_numbers() -> None:
    names = ["setosa", "versicolor", "virginica"]
    lines = ["x,y,species"] + [f"{i},{i % 5},{names[i % 3]}" for i in range(15)]
    parsed = parse_csv(_csv("\n".join(lines)), task="classification")
    assert parsed.arrays.classes is not None
    assert parsed.arrays.classes.tolist() == names and parsed.n_classes == 3
    numeric = ["x,label"] + [f"{i},{[10, 2, 2.0][i % 3]}" for i in range(12)]
    parsed = parse_csv(_csv("\n".join(numeric)), task="classification")
    assert parsed.arrays.classes is not None and parsed.arrays.y is not None
    assert parsed.arrays.classes.tolist() == ["2", "10"], "2 and 2.0 are one class; 2 < 10"
    assert parsed.arrays.y[:3].tolist() == [1, 0, 0]


def test_clustering_uses_every_column_and_ignores_label() -> None:
    parsed = parse_csv(_csv(_table()), task="clustering", label="nonexistent")
    assert parsed.columns == 3 and parsed.arrays.y is None and parsed.label_name is None


def test_bom_crlf_quotes_and_trailing_blank_lines_are_fine() -> None:
    lines = ['"a","b","c"'] + [f'"{i}",{i}.5,{i % 2}' for i in range(10)]
    data = "\ufeff" + "\r\n".join(lines) + "\r\n\r\n"
    parsed = parse_csv(io.BytesIO(data.encode()), task="classification")
    assert parsed.rows == 10 and list(parsed.arrays.feature_names) == ["a", "b"]


@pytest.mark.parametrize(("text", "words"), [
    ("", "empty"),
    ("\n\n  \n", "empty"),
    ("a,b,label\n", "no data rows"),
    ("a,b,label\n1,2,0\n2,3,1\n", "at least 10"),
    (_table().replace("5,2.5,1", "5,two,1"), "row 7, column 'b': 'two' is not a number"),
    (_table().replace("5,2.5,1", "5,,1"), "row 7, column 'b': empty cell"),
    (_table().replace("5,2.5,1", "5,nan,1"), "row 7, column 'b': 'nan' is not a finite"),
    (_table().replace("5,2.5,1", "5,inf,1"), "not a finite"),
    (_table().replace("5,2.5,1", "5,2.5"), "row 7: 2 cells but the first row has 3"),
    (_table().replace("5,2.5,1", "5,2.5,1,9"), "row 7: 4 cells"),
    (_table(label=lambda i: 0), "at least 2 classes"),
    ("label\n" + "\n".join("1" if i % 2 else "0" for i in range(12)), "feature column"),
])
def test_bad_files_are_refused_with_the_place(text: str, words: str) -> None:
    error = _refused(text)
    assert words in error.message, error.message
    assert error.field in ("file", "label")


def test_regression_target_must_be_numeric() -> None:
    text = _table(label=lambda i: f"x{i}")
    error = _refused(text, task="regression")
    assert "column 'label'" in error.message and "not a number" in error.message
    assert parse_csv(_csv(text), task="classification").n_classes == 12


def test_label_column_errors() -> None:
    assert "no column named 'nope'" in _refused(_table(), label="nope").message
    assert "out of range" in _refused(_table(), label="7").message
    assert "no header" in _refused(_table(header=None), label="label").message
    assert "more than one" in _refused(_table(header="a,a,label"), label="a").message


def test_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    wide = ",".join(f"c{i}" for i in range(uploads.MAX_COLUMNS + 1))
    assert "columns" in _refused(wide + "\n").message
    monkeypatch.setattr(uploads, "MAX_ROWS", 20)
    assert "more than 20 data rows" in _refused(_table(rows=21)).message
    assert parse_csv(_csv(_table(rows=20)), task="classification").rows == 20
    monkeypatch.setattr(uploads, "MAX_CLASSES", 5)
    assert "at most 5 classes" in _refused(_table(label=lambda i: i)).message


def test_binary_and_broken_csv_are_refused() -> None:
    assert "UTF-8" in _refused(b"a,b\xff\xfe,c\n" + b"1,2,3\n" * 12).message
    assert "CSV" in _refused('a,b,c\n1,"2\n' + "3,4,5\n" * 11).message


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
