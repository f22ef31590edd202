"""Reading a CSV into a dataset's arrays (backend.services.csv_import), on literal CSV text."""

from __future__ import annotations

import io

import numpy as np
import pytest

from backend.services import csv_import
from backend.services.csv_import import parse_csv
from backend.services.errors import Invalid
from backend.services.uploads import UploadError
from tests.utils.csv_text import csv_file as _csv
from tests.utils.csv_text import csv_table as _table


def _refused(text: str | bytes, task: csv_import.UploadTask = "classification",
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
    wide = ",".join(f"c{i}" for i in range(csv_import.MAX_COLUMNS + 1))
    assert "columns" in _refused(wide + "\n").message
    monkeypatch.setattr(csv_import, "MAX_ROWS", 20)
    assert "more than 20 data rows" in _refused(_table(rows=21)).message
    assert parse_csv(_csv(_table(rows=20)), task="classification").rows == 20
    monkeypatch.setattr(csv_import, "MAX_CLASSES", 5)
    assert "at most 5 classes" in _refused(_table(label=lambda i: i)).message


def test_binary_and_broken_csv_are_refused() -> None:
    assert "UTF-8" in _refused(b"a,b\xff\xfe,c\n" + b"1,2,3\n" * 12).message
    assert "CSV" in _refused('a,b,c\n1,"2\n' + "3,4,5\n" * 11).message


GOOD = """sepal,petal,species
5.1,1.4,setosa
4.9,1.4,setosa
7.0,4.7,versicolor
6.4,4.5,versicolor
6.3,6.0,virginica
5.8,5.1,virginica
5.0,1.5,setosa
5.9,4.2,versicolor
6.5,5.5,virginica
5.4,1.7,setosa
"""


def test_a_good_literal_file_becomes_these_arrays() -> None:
    parsed = parse_csv(_csv(GOOD), task="classification")
    assert (parsed.rows, parsed.columns, parsed.n_classes) == (10, 2, 3)
    assert parsed.arrays.X[:2].tolist() == [[5.1, 1.4], [4.9, 1.4]]
    assert parsed.arrays.classes is not None
    assert parsed.arrays.classes.tolist() == ["setosa", "versicolor", "virginica"]
    assert parsed.arrays.y is not None and parsed.arrays.y[:4].tolist() == [0, 0, 1, 1]


def test_semicolons_and_tabs_are_read_like_commas() -> None:
    comma = parse_csv(_csv(GOOD), task="classification")
    for separator in (";", "\t"):
        other = parse_csv(_csv(GOOD.replace(",", separator)), task="classification")
        assert np.array_equal(other.arrays.X, comma.arrays.X), repr(separator)
        assert list(other.arrays.feature_names) == ["sepal", "petal"]


def test_a_bom_before_a_semicolon_header_is_dropped() -> None:
    parsed = parse_csv(io.BytesIO(("\ufeff" + GOOD.replace(",", ";")).encode()),
                       task="classification")
    assert list(parsed.arrays.feature_names) == ["sepal", "petal"]


def test_ragged_rows_and_odd_numbers_are_named_with_a_hint() -> None:
    ragged = GOOD.replace("6.4,4.5,versicolor", "6.4,versicolor")
    assert _refused(ragged).message == "row 5: 2 cells but the first row has 3"
    comma = "a;b;label\n" + "".join(f"{i},5;{i};{i % 2}\n" for i in range(12))
    assert "decimal comma" in _refused(comma).message


def test_too_many_columns_and_rows_at_the_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    at_limit = ",".join(f"c{i}" for i in range(csv_import.MAX_COLUMNS))
    monkeypatch.setattr(csv_import, "MIN_ROWS", 1)
    rows = ",".join("1" for _ in range(csv_import.MAX_COLUMNS))
    assert parse_csv(_csv(f"{at_limit}\n{rows}\n"), task="clustering").columns == \
        csv_import.MAX_COLUMNS
    assert _refused(f"{at_limit},extra\n").message == (
        f"{csv_import.MAX_COLUMNS + 1} columns; at most {csv_import.MAX_COLUMNS} are accepted")


def test_empty_files_of_every_kind_are_refused() -> None:
    for text in ("", "\ufeff", "\r\n", " , ,\n"):
        assert _refused(text).message == "the CSV is empty", repr(text)
    assert _refused("a,b,label\n\n").message == "the CSV has a header but no data rows"
